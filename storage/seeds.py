"""The seeded rules a run and its audit both apply: stage seeds and the replay sample.

A stage's random seed follows the run's seed, the stage's name and the round, never a
fingerprint, so a change of config that renames a stage's files leaves its rows as they were:

    stage_seed(0, "train", 1)                           -> 3914197441 (a 32-bit integer)
    replay_indices(1000, 30, ratio=2.0, seed=3914197441) -> 60 distinct indices of range(1000)

The train stage (tasks/train.py `replayed_rows`) replays the pool rows at `replay_indices`; the
audit (storage/audit/training_plan.py) recomputes the same indices from the values the train stage
recorded, so both read one definition.
"""

from __future__ import annotations

import random

from storage.fingerprint import stable_hash


def stage_seed(run_seed: int, stage: str, round_index: int) -> int:
    """The random seed of one stage of one round.

    Parameters
    ----------
    run_seed
        The run config's `seed`.
    stage
        The stage's name, or a name of its own for a second random stream of a stage
        (e.g. "synthesize-fill").
    round_index
        The round.

    Returns
    -------
    int
        A 32-bit integer: the first 8 hex characters of `stable_hash([run_seed, stage,
        round_index])`.
    """
    return int(stable_hash([run_seed, stage, round_index], length=8), 16)


def replay_indices(pool_size: int, own_size: int, *, ratio: float, seed: int) -> list[int]:
    """Which rows of the replay pool a train stage replays, in draw order.

    Parameters
    ----------
    pool_size
        Rows in the replay pool (the earlier rounds' rows, in round order).
    own_size
        Rows of this round.
    ratio
        `train.replay_ratio`: replayed rows per row of this round.
    seed
        The train stage's seed (`stage_seed(run_seed, "train", round_index)`).

    Returns
    -------
    list of int
        `min(pool_size, round(ratio * own_size))` distinct indices into the pool, drawn by
        `random.Random(seed).sample`; the same indices a sample of the pool's rows would pick.
    """
    count = min(pool_size, round(ratio * own_size))
    return random.Random(seed).sample(range(pool_size), count)
