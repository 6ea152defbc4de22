"""A bandit over difficulty buckets that chooses which level each proposer prompt asks for.

In the spirit of SEC (Self-Evolving Curriculum): buckets are the domain's levels in
[min_level, max_level]; a bucket's reward in a round is the mean absolute advantage of its
problems' samples; Q is updated by TD(0) for the buckets seen that round,

    Q(b) <- Q(b) + alpha (r(b) - Q(b))

and each prompt's level is drawn from softmax(Q / temperature). With binary rewards a problem
with pass rate p has mean |r - mean r| = 2 p (1 - p) over its samples (0 for a problem always or
never solved, 1/2 at p = 1/2), so the bandit moves the proposer toward the levels where the
solver's answers disagree most.

Departures from SEC: SEC updates after every training batch and attributes a problem to the
bucket it was drawn from; here the update is once per round, and a problem counts for the level
the domain computed from its text (a proposer asked for L4 may write an L3 problem). The state
is never stored: `q_values` recomputes it from the earlier rounds' curriculum rows, in round
order, so a resumed run draws the same levels. Problems judged on one sample (the warm-up)
count for nothing: a group of one has no advantage.

    >>> q = q_values([[{"level": 3, "pass_rate": 0.5, "judged": 4}]], [2, 3], alpha=0.5,
    ...              initial_q=0.0)
    >>> q
    {2: 0.0, 3: 0.25}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def mean_abs_advantage(pass_rate: float) -> float:
    """Mean |r - p| over a group of binary rewards with pass rate p: 2 p (1 - p)."""
    return 2.0 * pass_rate * (1.0 - pass_rate)


def bucket_rewards(curriculum: Iterable[Mapping[str, Any]],
                   levels: Sequence[int]) -> dict[int, float]:
    """Mean |advantage| per level over one round's problems with >= 2 judged samples (a group of
    one has no advantage: the warm-up samples one answer per problem, so it moves no Q). Levels
    outside `levels` are ignored; a level with no such problem is absent."""
    totals: dict[int, list[float]] = defaultdict(list)
    for row in curriculum:
        if row["level"] in levels and row["pass_rate"] is not None and row["judged"] >= 2:
            totals[row["level"]].append(mean_abs_advantage(row["pass_rate"]))
    return {level: sum(values) / len(values) for level, values in sorted(totals.items())}


def td_update(q: Mapping[int, float], rewards: Mapping[int, float],
              alpha: float) -> dict[int, float]:
    """TD(0): Q(b) + alpha (r(b) - Q(b)) for the buckets in `rewards`; the others unchanged."""
    return {level: value + alpha * (rewards[level] - value) if level in rewards else value
            for level, value in q.items()}


def q_values(rounds: Iterable[Iterable[Mapping[str, Any]]], levels: Sequence[int], *, alpha: float,
             initial_q: float) -> dict[int, float]:
    """Q per level after replaying the rounds' curriculum rows in order."""
    q = {level: initial_q for level in levels}
    for curriculum in rounds:
        q = td_update(q, bucket_rewards(curriculum, levels), alpha)
    return q


def level_probabilities(q: Mapping[int, float], temperature: float) -> dict[int, float]:
    """softmax(Q / temperature) over the levels."""
    if temperature <= 0:
        msg = f"temperature = {temperature}: the softmax temperature must be > 0"
        raise ValueError(msg)
    values = np.array(list(q.values()), dtype=np.float64) / temperature
    weights = np.exp(values - values.max())
    return dict(zip(q, (weights / weights.sum()).tolist(), strict=True))


def sample_levels(q: Mapping[int, float], count: int, *, temperature: float,
                  seed: int) -> list[int]:
    """`count` levels drawn independently from softmax(Q / temperature), seeded."""
    probabilities = level_probabilities(q, temperature)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(np.array(list(probabilities)), size=count, p=list(probabilities.values()))
    return [int(level) for level in drawn]
