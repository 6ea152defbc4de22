"""Training rows as polars joins: which rollouts and problems become `train_rows`, over columns.

The rules are tasks/curate.py's (SFT: verified answers, references, proposer rows; GRPO prompt
rows and DPO pairs, below); this module computes the rows, in problem order, from Parquet files
or frames:

    positions   every problem row has its position `pos` in the problems file; a solver row
                sorts by (pos, rank within the problem), so rows come in problem order
    rollouts    scanned with only (rollout_id, problem_id, sample_index) beside the verdicts'
                (rollout_id, reward), streamed: a reward is taken by position, as verify writes
                verdicts in the rollouts' order, and joined on rollout_id only where that
                order does not hold (`rewarded_rollouts`); the rollouts with the wanted reward
                are joined with the kept problems and ranked per problem by (sample_index,
                file position); ids, prompts and completions are read afterwards for the
                chosen rollouts only (`rollout_texts`)
    prompts     the domain's solver_prompt runs once per chosen problem text, proposer_prompt
                once per level

GRPO (`grpo_prompts`): one prompt row per kept problem (the curriculum already dropped
zero-variance groups, which carry no GRPO signal); the trainer samples its own completions and
the domain's verifier scores them against `completion`. The label is the first non-null verdict
`label` of the problem (a reference or a majority-vote pseudo-label) where verify wrote one, else
the problem's reference; a kept problem with neither gets no row.

DPO (`dpo_pairs`): per kept problem, its judged answers are ranked best first and worst first
(ties in sample order) and the i-th of each paired into at most `max_pairs_per_problem`
(chosen, rejected) pairs, while the chosen answer's reward exceeds the rejected one's by at least
`train.dpo.min_margin`. With the default margin 1 that is the verified answers (reward 1) zipped
with the wrong ones (reward 0); a graded verifier (an LLM judge's 1-10, a reward function) with
a smaller margin pairs best against worst of k. Unjudged answers (reward None) are in neither.

A rollout without a verdict counts as unjudged; rollout ids are unique (the verdicts gate
checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from configs import CurateConfig
from domains.base import Domain
from tasks.curriculum.columns import lazy_frame, row_ids
from tasks.curriculum.rewards import proposer_weight_expr

PROBLEMS = {"problem_id": pl.String, "run_id": pl.String, "round": pl.Int64, "text": pl.String,
            "reference": pl.String, "level": pl.Int64, "proposal_id": pl.String,
            "task": pl.String, "payload": pl.String}
ROLLOUT_KEYS = {"rollout_id": pl.String, "problem_id": pl.String, "sample_index": pl.Int64}
ROLLOUT_TEXTS = {"rollout_id": pl.String, "prompt": pl.String, "completion": pl.String}
TEXT_READERS = 4  # row groups of rollout texts decoded at once (decoding overlaps the copies)
VERDICT_REWARDS = {"rollout_id": pl.String, "reward": pl.Float64}
REWARDED = ["rollout_pos", "problem_id", "sample_index", "reward"]
MARGIN_TOLERANCE = 1e-9  # a judge's (s - 1) / 9 gaps are not exact in binary
VERDICTS = {"rollout_id": pl.String, "problem_id": pl.String, "reward": pl.Float64,
            "label": pl.String}
TRAIN_COLUMNS = ["train_row_id", "run_id", "round", "role", "prompt", "completion", "rejected",
                 "weight", "problem_id", "rollout_id", "proposal_id", "problem"]
# label: what a GRPO row's reward judges against (null: the problem's reference)
SOLVER_PARTS = {"pos": pl.Int64, "sub": pl.Int64, "prompt": pl.String, "completion": pl.String,
                "rejected": pl.String, "weight": pl.Float64, "rollout_id": pl.String,
                "label": pl.String}


def positioned_problems(problems: Any) -> pl.DataFrame:
    """The problems' train-row columns with their position `pos` in the file."""
    return lazy_frame(problems, PROBLEMS).with_row_index("pos").with_columns(
        pl.col("pos").cast(pl.Int64)).collect()


def kept_problems(problems: pl.DataFrame, curriculum: Any) -> pl.DataFrame:
    """Problems whose curriculum row is kept (the last row of a problem_id decides), in problem
    order, with their `pass_rate` and `passed` (tasks/curriculum/pass_rates.py: too_hard_expr
    reads both)."""
    kept = lazy_frame(curriculum, {"problem_id": pl.String, "pass_rate": pl.Float64,
                                   "passed": pl.Int64, "kept": pl.Boolean}).collect()
    kept = kept.unique("problem_id", keep="last", maintain_order=True).filter(pl.col("kept"))
    return problems.join(kept.select("problem_id", "pass_rate", "passed"), on="problem_id",
                         how="inner",
                         maintain_order="left")


def solver_prompts(domain: Domain, texts: pl.Series) -> pl.Series:
    return pl.Series("prompt", [domain.solver_prompt(t) for t in texts.to_list()], dtype=pl.String)


def training_targets(domain: Domain, references: pl.Series) -> pl.Series:
    """The completions the references teach: the domain's `training_target` of each (python_io:
    a reference is the JSON its verifier runs, not an answer)."""
    return pl.Series(references.name, [domain.training_target(r) for r in references.to_list()],
                     dtype=pl.String)


def reference_rows(domain: Domain, problems: pl.DataFrame, *, teach: bool = True) -> pl.DataFrame:
    """Solver rows whose completion is what the problem's reference teaches (`training_targets`);
    with `teach=False` GRPO prompt rows, the reference (or the label in its place) as their
    completion and as the `label` their reward judges against."""
    references = problems["reference"]
    nothing = pl.Series([None] * len(problems), dtype=pl.String)
    return pl.DataFrame({
        "pos": problems["pos"], "sub": pl.Series([0] * len(problems), dtype=pl.Int64),
        "prompt": solver_prompts(domain, problems["text"]),
        "completion": training_targets(domain, references) if teach else references,
        "rejected": nothing, "weight": pl.Series([1.0] * len(problems), dtype=pl.Float64),
        "rollout_id": nothing, "label": nothing if teach else references}, schema=SOLVER_PARTS)


def rewarded_rollouts(rollouts: Any, verdicts: Any,
                      rewards: Sequence[float] | None) -> pl.DataFrame:
    """(rollout_pos, problem_id, sample_index, reward) of the rollouts whose verdict's reward is
    one of `rewards` (None: any reward, not null), in file order: by position where the
    verdicts are stored in the rollouts' order (`rewards_by_position`), else joined on
    rollout_id (the last verdict of an id decides)."""
    keys = lazy_frame(rollouts, ROLLOUT_KEYS)
    judged = lazy_frame(verdicts, VERDICT_REWARDS).rename({"rollout_id": "verdict_id"})
    wanted = (pl.col("reward").is_not_null() if rewards is None
              else pl.col("reward").is_in(list(rewards)))
    by_position = rewards_by_position(keys, judged, wanted)
    if by_position is not None:
        return by_position
    last_verdicts = judged.unique("verdict_id", keep="last")
    return keys.with_row_index("rollout_pos").join(
        last_verdicts, left_on="rollout_id", right_on="verdict_id", how="left",
        maintain_order="left").filter(wanted).select(REWARDED).collect()


def rewards_by_position(keys: pl.LazyFrame, judged: pl.LazyFrame,
                        wanted: pl.Expr) -> pl.DataFrame | None:
    """The `wanted` rows of rollouts and verdicts side by side, or None where a verdict is not
    its rollout's.

    Verify stores one verdict per rollout, at the rollout's position. With equal lengths, one
    streamed pass over both files keeps, beside the wanted rows, every row that proves the
    order wrong (a null rollout id, or another rollout's verdict at its position)."""
    lengths = pl.collect_all([keys.select(pl.len()), judged.select(pl.len())])
    if lengths[0].item() != lengths[1].item():
        return None
    misplaced = (pl.col("rollout_id").is_null()
                 | ~pl.col("rollout_id").eq_missing(pl.col("verdict_id"))).alias("misplaced")
    side_by_side = pl.concat([keys.with_row_index("rollout_pos"), judged], how="horizontal")
    rows = side_by_side.with_columns(misplaced).filter(wanted | pl.col("misplaced")).select(
        *REWARDED, "misplaced").collect(engine="streaming")
    return None if rows["misplaced"].any() else rows.drop("misplaced")


def rank_in_runs(column: str) -> pl.Expr:
    """0, 1, 2, ... within each run of equal values of `column` (a frame sorted by it)."""
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    starts = pl.when(pl.col(column) != pl.col(column).shift()).then(index)
    return index - starts.forward_fill().fill_null(0)


def ranked_rollouts(rewarded: pl.DataFrame, problems: pl.DataFrame,
                    reward: float) -> pl.DataFrame:
    """Rollouts of `problems` whose verdict reward equals `reward` (`rewarded_rollouts`), one
    row (rollout_pos, sample_index, pos, sub) per (problem position, rollout), ranked within the
    problem by (sample_index, file position); rollouts stored in problem and sample order come
    out of the join so ordered and are not sorted again."""
    wanted = rewarded.filter(pl.col("reward") == reward).select("rollout_pos", "problem_id",
                                                                "sample_index")
    joined = with_positions(wanted, problems)
    if not in_rank_order(joined):
        joined = joined.sort("pos", "sample_index", "rollout_pos")
    return joined.with_columns(rank_in_runs("pos").alias("sub"))


def with_positions(rollouts: pl.DataFrame, problems: pl.DataFrame) -> pl.DataFrame:
    """(rollout_pos, sample_index, pos): each rollout of `problems` with its problem's position,
    in rollout order, one row per problem row of its problem_id.

    Rollouts come in runs of one problem_id (verify and rollout keep a problem's samples
    together), so the problem ids are joined once per run and the positions gathered per row;
    where a problem_id has several problem rows, every rollout is joined."""
    problem_id = pl.col("problem_id")
    first = pl.int_range(pl.len()) == 0
    starts = rollouts.select((problem_id.ne_missing(problem_id.shift()) | first).alias(
        "start"))["start"]
    runs = rollouts.select(problem_id.filter(starts)).join(
        problems.select("problem_id", "pos"), on="problem_id", how="left", maintain_order="left")
    if len(runs) != int(starts.sum()):
        return rollouts.join(problems.select("pos", "problem_id"), on="problem_id", how="inner",
                             maintain_order="left").select("rollout_pos", "sample_index", "pos")
    run = starts.cast(pl.Int64).cum_sum() - 1
    return rollouts.select("rollout_pos", "sample_index", runs["pos"].gather(run).alias(
        "pos")).filter(pl.col("pos").is_not_null())


def in_rank_order(frame: pl.DataFrame) -> bool:
    """Whether (pos, sample_index, rollout_pos) ascend strictly from row to row."""
    pos, sample, at = (pl.col(c).diff() for c in ("pos", "sample_index", "rollout_pos"))
    ascending = (pos > 0) | ((pos == 0) & ((sample > 0) | ((sample == 0) & (at > 0))))
    return bool(frame.select(ascending.slice(1).all()).item())


def rollout_texts(rollouts: Any, positions: pl.Series) -> pl.DataFrame:
    """(rollout_pos, rollout_id, prompt, completion) of the rollouts at `positions`, in file
    order. A file is read one row group at a time (storage/datasets.py bounds a row group's
    decoded bytes), `TEXT_READERS` groups at once, and the chosen rows of each copied out: a
    polars string gathered from a decoded row group is a view that keeps the whole group's text
    alive; its Arrow export holds only the chosen texts, which polars then views."""
    if not isinstance(rollouts, str | Path):
        chosen = pl.DataFrame({"rollout_pos": positions.unique().cast(pl.UInt32)})
        frame = lazy_frame(rollouts, ROLLOUT_TEXTS).with_row_index("rollout_pos")
        return frame.join(chosen.lazy(), on="rollout_pos", how="semi").collect()
    wanted = positions.unique().sort().cast(pl.UInt32).to_numpy()
    scan = lazy_frame(rollouts, ROLLOUT_TEXTS)
    metadata = pq.ParquetFile(rollouts).metadata
    sizes = [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(wanted.dtype)
    bounds = np.searchsorted(wanted, starts)

    def chosen_of(group: int) -> pl.DataFrame | None:  # polars decodes without the GIL
        low, high = bounds[group], bounds[group + 1]
        if high == low:
            return None
        start = int(starts[group])
        taken = scan.slice(start, sizes[group]).collect().gather(wanted[low:high] - start)
        copied = pl.from_arrow(taken.to_arrow())  # Arrow strings of the chosen rows only
        return copied.select(pl.Series("rollout_pos", wanted[low:high]), *ROLLOUT_TEXTS)

    with ThreadPoolExecutor(TEXT_READERS) as pool:  # results in group order
        parts = [part for part in pool.map(chosen_of, range(len(sizes))) if part is not None]
    empty = pl.DataFrame(schema={"rollout_pos": pl.UInt32, **ROLLOUT_TEXTS})
    return pl.concat([empty, *parts]) if parts else empty


def verified_rows(rollouts: Any, verdicts: Any, problems: pl.DataFrame,
                  max_answers: int) -> pl.DataFrame:
    """SFT solver rows: the first `max_answers` verified answers (reward 1) per problem."""
    chosen = ranked_rollouts(rewarded_rollouts(rollouts, verdicts, [1.0]), problems, 1.0).filter(
        pl.col("sub") < max_answers)
    texts = rollout_texts(rollouts, chosen["rollout_pos"])
    return chosen.join(texts, on="rollout_pos", how="left", maintain_order="left").select(
        "pos", "sub", "prompt", "completion", pl.lit(None, dtype=pl.String).alias("rejected"),
        pl.lit(1.0).alias("weight"), "rollout_id", pl.lit(None, dtype=pl.String).alias("label"))


def dpo_pairs(rollouts: Any, verdicts: Any, problems: pl.DataFrame, max_pairs: int,
              min_margin: float = 1.0) -> pl.DataFrame:
    """DPO solver rows: per problem, its judged answers best first and worst first (ties in
    sample order), the i-th of each paired while the reward gap is at least `min_margin`."""
    rewarded = rewarded_rollouts(rollouts, verdicts, None)
    best = ranked_by_reward(rewarded, problems, descending=True)
    worst = ranked_by_reward(rewarded, problems, descending=False)
    pairs = best.join(worst.select("pos", "sub", pl.col("rollout_pos").alias("rejected_pos"),
                                   pl.col("reward").alias("rejected_reward")),
                      on=["pos", "sub"], how="inner", maintain_order="left").filter(
        (pl.col("sub") < max_pairs) & (pl.col("reward") > pl.col("rejected_reward"))
        & (pl.col("reward") - pl.col("rejected_reward") >= min_margin - MARGIN_TOLERANCE))
    texts = rollout_texts(rollouts, pl.concat([pairs["rollout_pos"], pairs["rejected_pos"]]))
    rejected = texts.select(pl.col("rollout_pos").alias("rejected_pos"),
                            pl.col("completion").alias("rejected"))
    return pairs.join(texts, on="rollout_pos", how="left", maintain_order="left").join(
        rejected, on="rejected_pos", how="left", maintain_order="left").select(
        "pos", "sub", "prompt", "completion", "rejected", pl.lit(1.0).alias("weight"),
        "rollout_id", pl.lit(None, dtype=pl.String).alias("label"))


def ranked_by_reward(rewarded: pl.DataFrame, problems: pl.DataFrame, *,
                     descending: bool) -> pl.DataFrame:
    """The judged rollouts of `problems` (rollout_pos, sample_index, reward, pos, sub), ranked
    within each problem by reward (`descending`: best first), ties by (sample_index, file
    position)."""
    joined = with_positions(rewarded.select("rollout_pos", "problem_id", "sample_index"),
                            problems).join(rewarded.select("rollout_pos", "reward"),
                                           on="rollout_pos", how="left", maintain_order="left")
    ordered = joined.sort(["pos", "reward", "sample_index", "rollout_pos"],
                          descending=[False, descending, False, False], maintain_order=True)
    return ordered.with_columns(rank_in_runs("pos").alias("sub"))


def grpo_prompts(domain: Domain, problems: pl.DataFrame, verdicts: Any) -> pl.DataFrame:
    """GRPO solver rows: one per kept problem with a label (the first non-null verdict label of
    the problem, else its reference)."""
    labels = lazy_frame(verdicts, VERDICTS).filter(pl.col("label").is_not_null()).group_by(
        "problem_id", maintain_order=True).agg(pl.col("label").first()).collect()
    labelled = problems.join(labels, on="problem_id", how="left", maintain_order="left")
    labelled = labelled.with_columns(pl.coalesce("label", "reference").alias("reference")).filter(
        pl.col("reference").is_not_null())
    return reference_rows(domain, labelled, teach=False)


def proposer_rows(domain: Domain, problems: pl.DataFrame, verdicts: Any, curation: CurateConfig,
                  penalties: dict[str, float] | None, *, weighted: bool) -> pl.DataFrame:
    """Proposer rows of `problems` (weight 1 when not `weighted`), heaviest first (ties in
    problem order), at most `max_proposer_rows`."""
    frame = problems
    if weighted and curation.proposer_reward == "regret":
        spread = lazy_frame(verdicts, VERDICTS).group_by("problem_id").agg(
            pl.col("reward").max().alias("reward_max"),
            pl.col("reward").min().alias("reward_min")).collect()
        frame = frame.join(spread, on="problem_id", how="left", maintain_order="left")
    pen = pl.DataFrame({"problem_id": list((penalties or {}).keys()),
                        "penalty": list((penalties or {}).values())},
                       schema={"problem_id": pl.String, "penalty": pl.Float64})
    frame = frame.join(pen, on="problem_id", how="left", maintain_order="left").with_columns(
        pl.col("penalty").fill_null(0.0))
    weight = proposer_weight_expr(curation) if weighted else pl.lit(1.0)
    prompts = {level: domain.proposer_prompt(level) for level in frame["level"].unique().to_list()}
    # An empty mapping (no rows) would leave the Int64 levels in place of the prompts.
    prompt = (pl.col("level").replace_strict(prompts, return_dtype=pl.String) if prompts
              else pl.lit(None, dtype=pl.String))
    return frame.with_columns(weight.alias("weight")).sort(
        "weight", descending=True, maintain_order=True).head(curation.max_proposer_rows).select(
        "pos", prompt.alias("prompt"),
        pl.col("text").alias("completion"), "weight")


def problem_json(reference: pl.Expr) -> pl.Expr:
    """A problem row as JSON (`domains.base.problem_row`'s columns), judged against `reference`."""
    return pl.struct(pl.col("text"), reference.alias("reference"), pl.col("level"),
                     pl.col("task"), pl.col("payload")).struct.json_encode()


def train_frame(problems: pl.DataFrame, solver: pl.DataFrame,
                proposer: pl.DataFrame | None) -> pl.DataFrame:
    """`train_rows` columns: solver rows in (problem, rank) order, then proposer rows; lineage
    (run, round, problem, proposal) from the problem row at `pos` (`problems` is
    `positioned_problems`: pos is the row index), ids over the whole columns. A solver row's
    `problem` is its problem row as JSON (`problem_json`), judged against its `label` where it
    has one (GRPO rows), else the problem's reference."""
    parts = [solver.sort("pos", "sub").select(
        pl.lit("solver").alias("role"), "pos", "prompt", "completion", "rejected", "weight",
        "rollout_id", "label")]
    if proposer is not None:
        parts.append(proposer.select(
            pl.lit("proposer").alias("role"), "pos", "prompt", "completion",
            pl.lit(None, dtype=pl.String).alias("rejected"), "weight",
            pl.lit(None, dtype=pl.String).alias("rollout_id"),
            pl.lit(None, dtype=pl.String).alias("label")))
    rows = pl.concat(parts)
    lineage = problems.select(pl.col("run_id", "round", "problem_id", "proposal_id", "text",
                                     "reference", "level", "task", "payload").gather(rows["pos"]))
    rows = pl.concat([rows, lineage], how="horizontal").with_columns(
        pl.when(pl.col("role") == "solver").then(problem_json(
            pl.coalesce("label", "reference"))).alias("problem"))
    ids = row_ids("train_row", [rows["run_id"], rows["round"], rows["role"], rows["problem_id"],
                                rows["rollout_id"]])
    return rows.with_columns(ids.alias("train_row_id")).select(TRAIN_COLUMNS)
