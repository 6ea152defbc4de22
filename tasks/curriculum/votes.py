"""Majority-vote pseudo-labels (TTRL / R-Zero style) and their precision against references.

A problem's k sampled answers vote; the label is the most common extracted answer:

    majority_labels({"a1..": ["42", "42", "41", None]})
    # {"a1..": Vote(label="42", agreement=0.5, tie=False)}

    agreement  share of the k samples that gave the label (an answer that could not be
               extracted, None, is a vote for nothing: it counts in k but for no label)
    tie        the top count is shared by several answers; the label is then the smallest of
               them as a string ("10" < "9"), the same rule `flywheel audit labels` uses, so
               the label is deterministic and the audit query recomputes it exactly

A problem with no extracted answer has label None and agreement 0.0. Where the domain also has
an executed reference, `label_precision` is the share of labelled problems whose vote equals
it: pseudo-labels drift as the model drifts (EVE, TTRL #29), so verify records it every round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple


class Vote(NamedTuple):
    label: str | None
    agreement: float
    tie: bool


def majority_vote(answers: Sequence[str | None]) -> Vote:
    """The vote of one problem's k answers (see the module docstring)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return Vote(None, 0.0, False)
    top = max(counts.values())
    leaders = sorted(a for a, n in counts.items() if n == top)
    return Vote(leaders[0], top / len(answers), len(leaders) > 1)


def majority_labels(answers_by_problem: Mapping[str, Sequence[str | None]]) -> dict[str, Vote]:
    """{problem_id: Vote(label, agreement, tie)} for every problem's answers."""
    return {pid: majority_vote(answers) for pid, answers in answers_by_problem.items()}


def label_matches(labels: Mapping[str, str | None], references: Mapping[str, str | None],
                  *, only: Iterable[str] | None = None) -> tuple[int, int]:
    """(matching, total) over problems that have both a label and a reference (of those in
    `only`, when given): matching = labels equal to the reference."""
    ids = labels.keys() if only is None else only
    both = [pid for pid in ids if labels.get(pid) is not None and references.get(pid) is not None]
    return sum(labels[pid] == references[pid] for pid in both), len(both)


def label_precision(labels: Mapping[str, str | None], references: Mapping[str, str | None],
                    *, only: Iterable[str] | None = None) -> float | None:
    """Share of problems with both a label and a reference whose label equals the reference;
    None when no problem has both (nothing to measure, not a made-up 0 or 1)."""
    matching, total = label_matches(labels, references, only=only)
    return matching / total if total else None
