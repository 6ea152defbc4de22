"""The curriculum as polars expressions: pass rate, reward spread, band and rationalization per
problem, over verdict columns (tasks/curate.py documents what each value means).

    curriculum_frame(problems, verdicts, curation, warmup=False)
    # problem_id  run_id  round  level  samples  judged  passed  pass_rate  reward_std
    # "a1.."      "demo"  1      2      8        8       2       0.25       0.433..
    # reward_mad  kept  drop_reason
    # 0.375       True  null

The values are the row-by-row definitions' to the last bit: `passed` counts the samples that
earned the full reward (1.0), p is the left-to-right sum of the judged rewards over their
count, and the standard deviation is `statistics.pstdev` (exact rational arithmetic, then one
rounding). `reward_mad` is the mean |reward - pass_rate| over the judged rewards (exact too):
the mean absolute advantage of the problem's group, which the curriculum bandit
(tasks/curriculum/bandit.py) reads. With rewards of 0 or 1 it is 2 p (1 - p);
with graded ones (partial credit) it can be far below that. With rewards of 0 or 1 (every
exact-match domain) a problem's p and spreads depend only on (judged, passed), so they are
computed once per distinct pair, not once per problem; other rewards go through Python per
problem.
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction
from typing import Any

import polars as pl

from configs import CurateConfig
from tasks.curriculum.columns import lazy_frame

PROBLEM_COLUMNS = {"problem_id": pl.String, "run_id": pl.String, "round": pl.Int64,
                   "level": pl.Int64}
VERDICT_COLUMNS = {"problem_id": pl.String, "reward": pl.Float64}
CURRICULUM_COLUMNS = ["problem_id", "run_id", "round", "level", "samples", "judged", "passed",
                      "pass_rate", "reward_std", "reward_mad", "kept", "drop_reason"]


def reward_stats(verdicts: pl.LazyFrame) -> pl.DataFrame:
    """Per problem_id of the verdicts (first-seen order): samples, judged, passed, pass_rate,
    reward_std, reward_mad."""
    reward = pl.col("reward")
    binary = verdicts.select(reward.drop_nulls().is_in([0.0, 1.0]).all()).collect().item()
    if not binary:
        stats = verdicts.group_by("problem_id", maintain_order=True).agg(
            pl.len().alias("samples"), reward.drop_nulls().alias("judged_rewards")
        ).collect()
        judged = stats["judged_rewards"].to_list()
        rates = [sum(j) / len(j) if j else None for j in judged]
        return stats.drop("judged_rewards").with_columns(
            pl.Series("judged", [len(j) for j in judged], dtype=pl.Int64),
            pl.Series("passed", [sum(r == 1.0 for r in j) for j in judged], dtype=pl.Int64),
            pl.Series("pass_rate", rates, dtype=pl.Float64),
            pl.Series("reward_std", [statistics.pstdev(j) if j else 0.0 for j in judged],
                      dtype=pl.Float64),
            pl.Series("reward_mad", [mean_abs_deviation(j, p)
                                      for j, p in zip(judged, rates, strict=True)],
                      dtype=pl.Float64))
    stats = verdicts.group_by("problem_id", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("samples"), reward.count().cast(pl.Int64).alias("judged"),
        (reward == 1.0).sum().cast(pl.Int64).alias("passed")).collect()
    pairs = stats.select("judged", "passed").unique()
    groups = [[1.0] * passed + [0.0] * (judged - passed) for judged, passed in pairs.iter_rows()]
    spreads = pairs.with_columns(
        pl.Series("reward_std", [statistics.pstdev(g) if g else 0.0 for g in groups],
                  dtype=pl.Float64),
        pl.Series("reward_mad", [mean_abs_deviation(g, sum(g) / len(g) if g else None)
                                 for g in groups], dtype=pl.Float64))
    return stats.join(spreads, on=["judged", "passed"], how="left", maintain_order="left").select(
        "problem_id", "samples", "judged", "passed",
        pl.when(pl.col("judged") > 0).then(pl.col("passed") / pl.col("judged"))
        .otherwise(None).alias("pass_rate"),
        "reward_std", "reward_mad")


def mean_abs_deviation(rewards: list[float], pass_rate: float | None) -> float:
    """Mean |reward - pass_rate| over a problem's judged rewards (0.0 when none were judged), in
    exact rational arithmetic with one rounding, as pstdev: the same in any order of samples."""
    if not rewards or pass_rate is None:
        return 0.0
    if not all(math.isfinite(r) for r in rewards):
        return math.nan  # as pstdev gives
    p = Fraction(pass_rate)
    return float(sum(abs(Fraction(r) - p) for r in rewards) / len(rewards))


def drop_reason_expr(curation: CurateConfig, *, warmup: bool,
                     warmup_max_level: int = 0) -> pl.Expr:
    """The `drop_reason` column (null: kept) before rationalization; tasks.curate.drop_reason
    row by row."""
    if warmup:
        return (pl.when(pl.col("level") <= warmup_max_level).then(None)
                .otherwise(pl.lit("above_warmup_level")))
    if curation.solver_targets == "reference":
        return pl.lit(None, dtype=pl.String)
    p = pl.col("pass_rate")
    return (pl.when(p.is_null()).then(pl.lit("unjudged"))
            .when(p.is_nan()).then(None)  # NaN compares false with every bound, as in Python
            .when(too_hard_expr(curation)).then(pl.lit("too_hard"))
            .when(p >= curation.max_pass_rate).then(pl.lit("too_easy"))
            .when(pl.col("reward_std") == 0.0).then(pl.lit("zero_variance"))
            .otherwise(None))


def too_hard_expr(curation: CurateConfig) -> pl.Expr:
    """Too hard to train on a verified answer: p <= min_pass_rate, or, where too-hard problems
    are rationalized (`solver_targets = "rationalize"`), no sample earned the full reward.
    With rewards of 0 or 1 the two agree (no full reward is p = 0); with partial credit a
    problem can score p > 0 without one right answer, and its reference is all there is to
    learn from. tasks.curate.drop_reason row by row."""
    too_hard = pl.col("pass_rate") <= curation.min_pass_rate
    if curation.solver_targets == "rationalize":
        too_hard = too_hard | (pl.col("passed") == 0)
    return too_hard


def rationalized_ids(curriculum: pl.DataFrame, curation: CurateConfig) -> pl.Series:
    """The too-hard problem ids trained on their reference: at most rationalize_ratio x the
    round's verified answer rows (per kept problem, its `passed` capped at
    max_answers_per_problem), lowest level first, then in problem order."""
    kept = curriculum.filter(pl.col("drop_reason").is_null())
    verified = int(kept["passed"].clip(upper_bound=curation.max_answers_per_problem).sum())
    too_hard = curriculum.filter(pl.col("drop_reason") == "too_hard")
    chosen = too_hard.sort("level", maintain_order=True).head(
        int(curation.rationalize_ratio * verified))
    return chosen["problem_id"]


def curriculum_frame(problems: Any, verdicts: Any, curation: CurateConfig, *, warmup: bool,
                     warmup_max_level: int = 0) -> pl.DataFrame:
    """One curriculum row per problem, in problem order (see the module docstring).

    Parameters
    ----------
    problems, verdicts
        Parquet paths, frames or rows (tasks/curriculum/columns.py: lazy_frame).
    curation
        `[curate]`.
    warmup
        Round 0: keep levels up to `warmup_max_level`, drop the rest (`above_warmup_level`).
    warmup_max_level
        `domain.seed_max_level`.

    Returns
    -------
    pl.DataFrame
        The `curriculum` columns (storage/datasets.py).
    """
    stats = reward_stats(lazy_frame(verdicts, VERDICT_COLUMNS))
    frame = lazy_frame(problems, PROBLEM_COLUMNS).join(
        stats.lazy(), on="problem_id", how="left", maintain_order="left").with_columns(
        pl.col("samples").fill_null(0), pl.col("judged").fill_null(0),
        pl.col("passed").fill_null(0),
        pl.col("reward_std").fill_null(0.0), pl.col("reward_mad").fill_null(0.0)).with_columns(
        drop_reason_expr(curation, warmup=warmup,
                         warmup_max_level=warmup_max_level).alias("drop_reason")).collect()
    if curation.solver_targets == "rationalize" and not warmup:
        chosen = pl.col("problem_id").is_in(rationalized_ids(frame, curation).implode())
        frame = frame.with_columns(pl.when(chosen).then(None).otherwise(pl.col("drop_reason"))
                                   .alias("drop_reason"))
    frame = frame.with_columns(pl.col("drop_reason").is_null().alias("kept"))
    return frame.select(CURRICULUM_COLUMNS)
