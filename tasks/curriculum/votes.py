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
from typing import Any, NamedTuple


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


def majority_frame(answers: Any) -> Any:
    """`majority_vote` of every problem at once: a polars LazyFrame of (problem_id, answer) rows
    -> one row per problem_id, in first-seen order, with `label`, `agreement` and `tie`; the
    same rule (top count over k, ties to the smallest string, no answer: null, 0.0, False)."""
    import polars as pl

    frame = answers.select("problem_id", "answer").with_row_index("first")
    samples = frame.group_by("problem_id").agg(pl.len().alias("k"), pl.col("first").min())
    counts = frame.filter(pl.col("answer").is_not_null()).group_by("problem_id", "answer").agg(
        pl.len().alias("votes"))
    leaders = counts.filter(pl.col("votes") == pl.col("votes").max().over("problem_id")).group_by(
        "problem_id").agg(pl.col("answer").min().alias("label"), pl.col("votes").first(),
                          (pl.len() > 1).alias("tie"))
    return samples.join(leaders, on="problem_id", how="left").sort("first").select(
        "problem_id", "label",
        (pl.col("votes").fill_null(0) / pl.col("k")).alias("agreement"),
        pl.col("tie").fill_null(False))
