"""Pairwise judging (`[verify.judge] mode = "pairwise"`): the judge compares an answer with its
problem's reference answer in both orders, and the two verdicts make one reward.

    first   "Which answer to the question is better? ... Answer A: <answer> Answer B: <reference>"
    second  the same with the answers swapped                   (the judge's position bias shows)

    first reply  second reply   reward  consistent
    A            B              1.0     yes          the answer wins in both positions
    B            A              0.0     yes          the reference wins in both
    TIE          TIE            0.5     yes
    A            A              0.5     no           position-inconsistent: a tie
    (no A, B or TIE in either)  None    -            judge_unparseable

The reference is the fixed opponent, so an answer's reward depends on it alone, never on the
other answers sampled with it: the same answer gets the same reward in every stage (a reward is
data). A problem without a reference (or majority label) has no opponent: its answers are
unjudged with reason `none`. The judgements dataset stores both prompts and replies and whether
they agreed (tasks/judgements.py); `flywheel audit RUN verifier` shows the position-inconsistent
share per round.
"""

from __future__ import annotations

import re

PAIRWISE_TEMPLATE = ("Which answer to the question is better?{rubric}\n\nQuestion: {question}"
                     "\n\nAnswer A: {first}\n\nAnswer B: {second}\n\n"
                     "Reply with A, B or TIE only.\nBetter:")
_PREFERENCE = re.compile(r"\b(A|B|TIE|[Tt]ie)\b")
WIN = {"A": 1.0, "B": 0.0, "TIE": 0.5}  # the answer's share of a verdict where it was shown first


def parse_preference(reply: str) -> str | None:
    """"A", "B" or "TIE" from a judge's reply (the first one it says; A and B as capitals, a
    tie in any case), else None.

    >>> parse_preference(" A"), parse_preference("Answer B is better"), parse_preference("tie")
    ('A', 'B', 'TIE')
    >>> parse_preference("a good answer") is None
    True
    """
    match = _PREFERENCE.search(reply)
    return None if match is None else match.group(1).upper()


def pair_outcome(first: str, second: str) -> tuple[float | None, bool | None]:
    """(reward, consistent) of the replies to the answer shown first and then second (the module
    docstring's table); (None, None) when either reply holds no preference."""
    shown_first, shown_second = parse_preference(first), parse_preference(second)
    if shown_first is None or shown_second is None:
        return None, None
    won_first, won_second = WIN[shown_first], 1.0 - WIN[shown_second]
    if won_first != won_second:
        return 0.5, False
    return won_first, True
