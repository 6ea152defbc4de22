"""The curriculum as polars expressions: pass rate, reward spread, band and rationalization per
problem, over verdict columns (tasks/curate.py documents what each value means).

    curriculum_frame(problems, verdicts, curation, warmup=False)
    # problem_id  run_id  round  level  samples  judged  pass_rate  reward_std  kept  drop_reason
    # "a1.."      "demo"  1      2      8        8       0.25       0.433..     True  null

The values are the row-by-row definitions' to the last bit: p is the left-to-right sum of the
judged rewards over their count, and the standard deviation is `statistics.pstdev` (exact
rational arithmetic, then one rounding). With rewards of 0 or 1 (every exact-match domain) a
problem's p and spread depend only on (judged, passed), so pstdev runs once per distinct pair,
not once per problem; other rewards go through Python per problem.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import polars as pl

from configs import CurateConfig
from tasks.curriculum.columns import lazy_frame

PROBLEM_COLUMNS = {"problem_id": pl.String, "run_id": pl.String, "round": pl.Int64,
                   "level": pl.Int64}
VERDICT_COLUMNS = {"problem_id": pl.String, "reward": pl.Float64}
CURRICULUM_COLUMNS = ["problem_id", "run_id", "round", "level", "samples", "judged", "pass_rate",
                      "reward_std", "kept", "drop_reason"]


def reward_stats(verdicts: pl.LazyFrame) -> pl.DataFrame:
    """Per problem_id of the verdicts (first-seen order): samples, judged, pass_rate,
    reward_std."""
    reward = pl.col("reward")
    binary = verdicts.select(reward.drop_nulls().is_in([0.0, 1.0]).all()).collect().item()
    if not binary:
        stats = verdicts.group_by("problem_id", maintain_order=True).agg(
            pl.len().alias("samples"), reward.drop_nulls().alias("judged_rewards")
        ).collect()
        judged = stats["judged_rewards"].to_list()
        return stats.drop("judged_rewards").with_columns(
            pl.Series("judged", [len(j) for j in judged], dtype=pl.Int64),
            pl.Series("pass_rate", [sum(j) / len(j) if j else None for j in judged],
                      dtype=pl.Float64),
            pl.Series("reward_std", [statistics.pstdev(j) if j else 0.0 for j in judged],
                      dtype=pl.Float64))
    stats = verdicts.group_by("problem_id", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("samples"), reward.count().cast(pl.Int64).alias("judged"),
        (reward == 1.0).sum().cast(pl.Int64).alias("passed")).collect()
    pairs = stats.select("judged", "passed").unique()
    spreads = pairs.with_columns(pl.Series("reward_std", [
        statistics.pstdev([1.0] * passed + [0.0] * (judged - passed)) if judged else 0.0
        for judged, passed in pairs.iter_rows()], dtype=pl.Float64))
    return stats.join(spreads, on=["judged", "passed"], how="left", maintain_order="left").select(
        "problem_id", "samples", "judged",
        pl.when(pl.col("judged") > 0).then(pl.col("passed") / pl.col("judged"))
        .otherwise(None).alias("pass_rate"),
        "reward_std")


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
            .when(p <= curation.min_pass_rate).then(pl.lit("too_hard"))
            .when(p >= curation.max_pass_rate).then(pl.lit("too_easy"))
            .when(pl.col("reward_std") == 0.0).then(pl.lit("zero_variance"))
            .otherwise(None))


def rationalized_ids(curriculum: pl.DataFrame, curation: CurateConfig) -> pl.Series:
    """The too-hard problem ids trained on their reference: at most rationalize_ratio x the
    round's verified answer rows (per kept problem, round(p x judged) capped at
    max_answers_per_problem), lowest level first, then in problem order."""
    kept = curriculum.filter(pl.col("drop_reason").is_null())
    answers = np.rint((kept["pass_rate"] * kept["judged"]).to_numpy())  # round half to even
    verified = int(np.minimum(answers, curation.max_answers_per_problem).sum()) if len(kept) else 0
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
        pl.col("reward_std").fill_null(0.0)).with_columns(
        drop_reason_expr(curation, warmup=warmup,
                         warmup_max_level=warmup_max_level).alias("drop_reason")).collect()
    if curation.solver_targets == "rationalize" and not warmup:
        chosen = pl.col("problem_id").is_in(rationalized_ids(frame, curation).implode())
        frame = frame.with_columns(pl.when(chosen).then(None).otherwise(pl.col("drop_reason"))
                                   .alias("drop_reason"))
    frame = frame.with_columns(pl.col("drop_reason").is_null().alias("kept"))
    return frame.select(CURRICULUM_COLUMNS)
