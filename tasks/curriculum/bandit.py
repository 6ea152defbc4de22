"""A bandit over difficulty buckets that chooses which level each proposer prompt asks for.

In the spirit of SEC (Self-Evolving Curriculum): buckets are the domain's levels in
[min_level, max_level]; a bucket's reward in a round is the mean absolute advantage of its
problems' samples (each problem's curriculum `reward_mad`, mean |r - mean r| over its judged
rewards: tasks/curriculum/pass_rates.py); Q is updated by TD(0) for the buckets seen that round,

    Q(b) <- Q(b) + alpha (r(b) - Q(b))

and each prompt's level is drawn from softmax(Q / temperature). With binary rewards a problem
with pass rate p has mean |r - mean r| = 2 p (1 - p) over its samples (0 for a problem always or
never solved, 1/2 at p = 1/2), so the bandit moves the proposer toward the levels where the
solver's answers disagree most. Graded rewards (reasoning-gym's partial credit) are measured as
they are: samples that all score 0.5 have pass rate 0.5 but no advantage, where 2 p (1 - p) would
say 0.5.

Departures from SEC: SEC updates after every training batch and attributes a problem to the
bucket it was drawn from; here the update is once per round, and a problem counts for the level
the domain computed from its text (a proposer asked for L4 may write an L3 problem). The state
is never stored: `q_values` recomputes it from the earlier rounds' curriculum rows, in round
order, so a resumed run draws the same levels. Problems judged on one sample (the warm-up)
count for nothing: a group of one has no advantage.

    >>> q = q_values([[{"level": 3, "pass_rate": 0.5, "reward_mad": 0.5, "judged": 4}]], [2, 3],
    ...              alpha=0.5, initial_q=0.0)
    >>> q
    {2: 0.0, 3: 0.25}

Over a mix of tasks (reasoning_gym) the arms are (task, level) pairs instead of levels, as in
SEC's experiments over task families: `arm_q_values` replays curriculum rows that carry their
problem's `task` (the caller reads it from the problem text, domains/reasoning_gym.py
`task_of`), and `sample_arms` draws one arm per generator problem, which the domain's
`generate_task(rng, task, level)` then writes. The level functions above are the one-task case.

    >>> arm_q_values([[{"task": "lcm", "level": 1, "pass_rate": 0.5, "reward_mad": 0.5,
    ...                  "judged": 4}]], [("lcm", 1), ("lcm", 2)], alpha=0.5, initial_q=0.0)
    {('lcm', 1): 0.25, ('lcm', 2): 0.0}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

Arm = tuple[str, int]  # (task, level)


def judged_group(row: Mapping[str, Any]) -> bool:
    """Whether a curriculum row's problem has an advantage: >= 2 judged samples (a group of one
    has none: the warm-up samples one answer per problem, so it moves no Q)."""
    return row["pass_rate"] is not None and row["judged"] >= 2


def bucket_rewards(curriculum: Iterable[Mapping[str, Any]],
                   levels: Sequence[int]) -> dict[int, float]:
    """Mean |advantage| (`reward_mad`) per level over one round's problems with >= 2 judged
    samples (`judged_group`). Levels outside `levels` are ignored; a level with no such problem
    is absent."""
    totals: dict[int, list[float]] = defaultdict(list)
    for row in curriculum:
        if row["level"] in levels and judged_group(row):
            totals[row["level"]].append(row["reward_mad"])
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


def task_level_arms(tasks: Sequence[str], levels: Sequence[int]) -> list[Arm]:
    """Every (task, level) arm, tasks in the given order, levels ascending within each."""
    return [(task, level) for task in tasks for level in sorted(levels)]


def arm_rewards(curriculum: Iterable[Mapping[str, Any]], arms: Sequence[Arm]) -> dict[Arm, float]:
    """Mean |advantage| per (task, level) arm over one round's problems with >= 2 judged samples
    (as `bucket_rewards`); rows of other arms are ignored, an arm without rows is absent."""
    known = set(arms)
    totals: dict[Arm, list[float]] = defaultdict(list)
    for row in curriculum:
        arm = (row["task"], row["level"])
        if arm in known and judged_group(row):
            totals[arm].append(row["reward_mad"])
    return {arm: sum(values) / len(values) for arm, values in totals.items()}


def arm_q_values(rounds: Iterable[Iterable[Mapping[str, Any]]], arms: Sequence[Arm], *,
                 alpha: float, initial_q: float) -> dict[Arm, float]:
    """Q per (task, level) arm after replaying the rounds' curriculum rows (each with its
    problem's `task`) in order, by the TD(0) update of `td_update`."""
    q: dict[Any, float] = {arm: initial_q for arm in arms}
    for curriculum in rounds:
        q = td_update(q, arm_rewards(curriculum, arms), alpha)
    return q


def sample_arms(q: Mapping[Arm, float], count: int, *, temperature: float,
                seed: int) -> list[Arm]:
    """`count` (task, level) arms drawn independently from softmax(Q / temperature), seeded."""
    probabilities = level_probabilities(q, temperature)  # a softmax over any keys
    arms = list(probabilities)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(arms), size=count, p=list(probabilities.values()))
    return [arms[int(index)] for index in drawn]
