"""Verify: score every rollout against a label, the domain's reference or a majority vote.

`verify.labels` chooses the label a reward compares against:

    reference  the problem's executed reference (the default); reward null when there is none
    majority   the most common answer among the problem's k samples (TTRL / R-Zero style
               pseudo-labels, tasks/curriculum/votes.py); reward null when no sample had an
               extractable answer

`reward` is in [0, 1], or null when the verifier cannot judge; nulls are kept and counted, never
silently turned into 0. `method` says how the reward was obtained (reference | majority), or
why there is none: `none` (no label), or in the free-form domains (reasoning_gym, dataset, whose
answers are extracted and compared by domains/checking.py) `no_answer` (no extractor of
`verify.extract` found one), `verifier_timeout` or `verifier_error` (math-verify could not
decide); the verify metrics count each as `unjudged_<reason>`.
`label` is what it was compared against, `agreement` is the share of the problem's samples that
gave its majority answer (recorded in both modes: with references it shows how confident the
solver is; with votes it is the pass rate).

Pseudo-labels drift as the model drifts (EVE; TTRL issue #29), so where the domain also has
references, majority mode records per round how often the vote is right:

    label_precision            majority label == reference, over problems with both
    label_precision_confident  the same over problems whose label more than half the samples gave
    labelled_problems          problems with both a label and a reference

With one sample per problem every answered sample is its own majority (reward 1): majority
labels need k >= 2 (the warm-up round's single samples are not trained on, so it does not matter
there). `flywheel audit RUN labels` shows the same per round (in either mode) and over kept
problems. Rollout by rollout, majority mode also records (rounds >= 1) `label_reward_precision`
and `label_reward_recall` (the majority label's rewards against the reference's), and with
`verify.canary = n` (rounds >= 1) the verifier's false-positive and false-negative rates on n
known-answer problems mixed into the round (tasks/verifier_rates.py; their verdicts are in the
file, their problems in none, and the round's other metrics leave them out). Departure from
TTRL: the vote is over exact extracted answers (the domain's `extract`), not a math-equivalence
grader; a tie goes to the smallest answer and is counted (`tied_share`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from math import fsum
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from configs import ScaleConfig
from configs.domain import incumbent_judges
from configs.settings import VerifySettings, WarmupVerifySettings, stage_settings
from domains.base import Domain
from domains.judge_rows import JUDGED_COLUMNS, judgement_frame, model_judge_of
from storage.datasets import DatasetWriter, WrittenDataset, dataset_path, read_table
from tasks.context import Checkpoint, RunContext
from tasks.curriculum.columns import lazy_frame
from tasks.curriculum.votes import majority_frame
from tasks.judgements import judgements_beside
from tasks.shards import grouped_ranges, map_shards
from tasks.stage import StageOutput, StageResult, run_stage
from tasks.verifier_rates import (
    CANARY_STREAM,
    confusion,
    error_rates,
    label_rates,
    round_canaries,
)

VERSION = 3  # 3: judged by `Domain.judge` on stored problem rows; 2: labels, agreement
VERDICT_METRIC_COLUMNS = {"problem_id": pl.String, "answer": pl.String, "reward": pl.Float64,
                          "method": pl.String, "label": pl.String}
CHUNK_ROWS = 16384  # rollouts verified at once (whole problems): their texts are held
GROUP_ROWS = 65536  # verdicts per row group of the file, whatever the chunks and shards
VERDICT_INPUTS = {"rollout_id": pl.String, "run_id": pl.String, "round": pl.Int64,
                  "problem_id": pl.String, "completion": pl.String}
PROBLEM_INPUTS = {"problem_id": pl.String, "text": pl.String, "reference": pl.String,
                  "level": pl.Int64, "task": pl.String, "payload": pl.String}


def verdict_rows(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]],
                 labels: str = "reference") -> list[dict[str, Any]]:
    """`verdict_frame` over rows, as rows."""
    return verdict_frame(domain, rollouts, problems, labels).to_dicts()


def verdict_frame(domain: Domain, rollouts: Any, problems: Any,
                  labels: str = "reference") -> pl.DataFrame:
    """One verdict per rollout, in rollout order; `labels` is "reference" or "majority" (see the
    module docstring).

    Parameters
    ----------
    domain
        Extracts each completion's answer and judges it against its problem row (`judge`,
        over the completion column; the votes, labels and joins are columnar).
    rollouts, problems
        Frames, Arrow tables or rows (tasks/curriculum/columns.py: lazy_frame); only the
        columns `VERDICT_INPUTS` and `PROBLEM_INPUTS` are read. A problem's vote is over its
        rollouts here, so a caller splitting rollouts keeps each problem's together.

    Returns
    -------
    pl.DataFrame
        The `verdicts` columns.

    Raises
    ------
    ValueError
        `labels` is neither mode, or a rollout's problem is not among `problems`.
    """
    if labels not in ("reference", "majority"):
        msg = f"verify.labels = {labels!r}: use 'reference' or 'majority'"
        raise ValueError(msg)
    table = lazy_frame(rollouts, VERDICT_INPUTS).collect()
    completions = table["completion"].to_list()
    answers = pl.Series("answer", domain.answers(completions), dtype=pl.String)
    keyed = table.select("rollout_id", "run_id", "round", "problem_id").with_columns(answers)
    votes = majority_frame(keyed.lazy()).collect().select("problem_id", "label", "agreement")
    known = lazy_frame(problems, PROBLEM_INPUTS).collect().unique(
        "problem_id", keep="last").with_columns(pl.lit(True).alias("known"))
    joined = keyed.join(votes, on="problem_id", how="left", maintain_order="left").join(
        known, on="problem_id", how="left", maintain_order="left")
    unknown = joined.filter(pl.col("known").is_null())
    if len(unknown):
        rollout_id, problem_id = unknown["rollout_id"][0], unknown["problem_id"][0]
        msg = (f"rollout {rollout_id}: its problem {problem_id} is not among the problems; "
               "the rollouts and the problems must come from the same round (a round with "
               "verify.canary > 0 also sampled its canaries: pass them, `round_canaries`)")
        raise ValueError(msg)
    compared = joined["label"] if labels == "majority" else joined["reference"]
    rewards, methods, outcomes, scores = judge_rollouts(
        domain, completions, problem_rows(joined.with_columns(compared.alias("reference"))),
        labels)
    return joined.select(
        "rollout_id", "run_id", "round", "problem_id", "answer",
        pl.Series("reward", rewards, dtype=pl.Float64), pl.Series("method", methods,
                                                                   dtype=pl.String),
        compared.alias("label"), "agreement", pl.Series("outcome", outcomes, dtype=pl.String),
        pl.lit(domain.verifier(), dtype=pl.String).alias("verifier"),
        pl.Series("score", scores, dtype=pl.Float64))


def problem_rows(joined: pl.DataFrame) -> list[dict[str, Any]]:
    """The problem row (`JUDGED_COLUMNS`) of each rollout of `joined`, one dict per run of a
    problem's rollouts shared by them (a problem's k samples are judged against one row)."""
    problem_id = pl.col("problem_id")
    starts = joined.select(problem_id.ne_missing(problem_id.shift()).fill_null(True).alias(
        "start"))["start"]
    firsts = joined.filter(starts).select(JUDGED_COLUMNS).to_dicts()
    runs = (starts.cast(pl.Int64).cum_sum() - 1).to_list()
    return [firsts[run] for run in runs]


def judge_rollouts(domain: Domain, completions: list[str], problems: list[dict[str, Any]],
                   method: str) -> tuple[list[float | None], list[str], list[str | None],
                                         list[float | None]]:
    """(reward, method, sandbox outcome, raw score) per completion, from `domain.judge`: the
    method is `method` (reference | majority) where a reward was given, else the judgement's
    reason (none, no_answer, verifier_timeout, ...); the outcome is null where nothing ran; the
    raw score is a reward model's (domains/reward_model.py), null for every other verifier."""
    judged = domain.judge(completions, problems)
    return ([j.reward for j in judged],
            [method if j.reward is not None else (j.reason or "none") for j in judged],
            [j.outcome for j in judged], [j.score for j in judged])


def verdict_metrics(rows: Any, problems: Any, labels: str = "reference") -> dict[str, float]:
    """The verify stage's catalog metrics: counts, mean reward, agreement, label precision.

    `rows` and `problems`: the verdicts and problems as a Parquet path, a frame or rows
    (tasks/curriculum/columns.py: lazy_frame); computed over columns. The means are exactly
    rounded sums (`math.fsum`) over the count, so no summation order, polars' or a row-by-row
    loop's, changes their last bit."""
    verdicts = lazy_frame(rows, VERDICT_METRIC_COLUMNS)
    reward = pl.col("reward")
    rewards = verdicts.select(reward).collect()["reward"]
    count, judged = len(rewards), rewards.count()
    metrics: dict[str, float] = {"verdicts": count, "unjudged": count - judged,
                                 "mean_reward": fsum(rewards.drop_nulls()) / judged if judged
                                 else 0.0}
    reasons = verdicts.filter(reward.is_null() & (pl.col("method") != "none")).group_by(
        "method", maintain_order=True).len().collect()
    for method, n in reasons.iter_rows():  # why the free-form domains could not judge
        metrics[f"unjudged_{method}"] = n
    votes = majority_frame(verdicts).collect()
    if len(votes):
        metrics["mean_agreement"] = fsum(votes["agreement"]) / len(votes)
        metrics["tied_share"] = int(votes["tie"].sum()) / len(votes)
    if labels == "majority":
        metrics.update(label_metrics(verdicts, problems, votes))
    return metrics


def label_metrics(verdicts: pl.LazyFrame, problems: Any, votes: pl.DataFrame) -> dict[str, float]:
    """labelled_problems, label_precision(_confident): each problem's label (its first verdict's)
    against its reference (the last problem row of its id)."""
    first = verdicts.group_by("problem_id", maintain_order=True).agg(pl.col("label").first())
    reference = lazy_frame(problems, {"problem_id": pl.String, "reference": pl.String}).collect(
        ).unique("problem_id", keep="last")
    both = first.collect().join(reference, on="problem_id", how="inner").join(
        votes.select("problem_id", "agreement"), on="problem_id", how="left").filter(
        pl.col("label").is_not_null() & pl.col("reference").is_not_null()).with_columns(
        (pl.col("label") == pl.col("reference")).alias("match"))
    out: dict[str, float] = {"labelled_problems": len(both)}
    if len(both):
        out["label_precision"] = int(both["match"].sum()) / len(both)
        confident = both.filter(2 * pl.col("agreement") > 1)
        if len(confident):
            out["label_precision_confident"] = int(confident["match"].sum()) / len(confident)
    return out


def verify_shards(domain: Domain, rollouts: pl.DataFrame, problems: pl.DataFrame, labels: str,
                  shards: int) -> list[dict[str, Any]]:
    """`verdict_frame` keyword arguments per shard: whole problems, rollouts in stored order."""
    out = []
    for start, end in grouped_ranges(rollouts["problem_id"].to_list(), shards):
        part = rollouts.slice(start, end - start)
        ids = part["problem_id"].unique().implode()
        out.append({"domain": domain, "rollouts": part, "labels": labels,
                    "problems": problems.filter(pl.col("problem_id").is_in(ids))})
    return out


def rollout_chunks(path: Path, rows: int = CHUNK_ROWS,
                   columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The rollouts file (`columns` of it, default all) in tables of at least `rows` rows (the
    last one: the rest) that never split a problem's run of rollouts, in stored order; a file of
    fewer rows, or one whose problems' rollouts are not stored together, is one table."""
    ids = pl.scan_parquet(path).select("problem_id")
    runs = ids.select(
        ((pl.col("problem_id") != pl.col("problem_id").shift()).sum() + 1).alias("runs"),
        pl.col("problem_id").n_unique().alias("problems")).collect()
    grouped = runs.row(0)[1] == 0 or runs.row(0)[0] == runs.row(0)[1]
    if not grouped:
        yield read_table(path, columns=columns)
        return
    pending: list[pa.Table] = []  # read, not yet verified
    count = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=columns):
        pending.append(pa.Table.from_batches([batch]))
        count += batch.num_rows
        if count < rows:
            continue
        table = pa.concat_tables(pending)
        last = table.column("problem_id")[-1]
        split = len(table) - int(pc.sum(pc.equal(table.column("problem_id"), last)).as_py())
        if split:  # the last problem's run may continue in the next batch: hold it back
            yield table.slice(0, split)
            table = table.slice(split)
        pending, count = [table], len(table)
    if count:
        yield pa.concat_tables(pending)


def judged_problems(problem_file: Path, canaries: pl.DataFrame | None) -> pl.DataFrame:
    """The problem rows (`PROBLEM_INPUTS`) the round's rollouts are judged against: the round's
    problems, then its canaries (tasks/verifier_rates.py), if any."""
    table = lazy_frame(problem_file, PROBLEM_INPUTS).collect()
    if canaries is None:
        return table
    return pl.concat([table, lazy_frame(canaries, PROBLEM_INPUTS).collect()])


def reference_pairs(domain: Domain, rollout_file: Path, problems: pl.DataFrame, verdicts: Any,
                    *, chunk_rows: int = CHUNK_ROWS) -> pl.DataFrame:
    """(problem_id, reward, truth) of every judged verdict whose problem has a reference: `reward`
    the verdict's, `truth` the same completion's reward against the reference.

    Where the verdict's label is the reference (always, with reference labels) the truth is the
    verdict's reward itself: the same row judged again gives the same reward. The other
    completions are judged by `domain.judge` against their problem rows (`problems`), read chunk
    by chunk of the rollouts file (`rollout_chunks`), so only one chunk's texts are held."""
    references = problems.filter(pl.col("reference").is_not_null()).unique(
        "problem_id", keep="last")
    judged = lazy_frame(verdicts, {"rollout_id": pl.String, "problem_id": pl.String,
                                   "reward": pl.Float64, "label": pl.String}).filter(
        pl.col("reward").is_not_null()).join(
        references.select("problem_id", "reference").lazy(), on="problem_id", how="inner",
        maintain_order="left").collect()
    agree = pl.col("label").eq_missing(pl.col("reference"))
    parts = [judged.filter(agree).select("problem_id", "reward", pl.col("reward").alias("truth"))]
    wanted = judged.filter(~agree).select("rollout_id", "problem_id", "reward")
    if wanted.is_empty():
        return parts[0]
    for chunk in rollout_chunks(rollout_file, chunk_rows,
                                columns=["rollout_id", "problem_id", "completion"]):
        part = pl.from_arrow(chunk).join(wanted, on=["rollout_id", "problem_id"], how="inner",
                                         maintain_order="left").join(
            references, on="problem_id", how="left", maintain_order="left")
        if part.is_empty():
            continue
        truth = domain.score(part["completion"].to_list(), problem_rows(part))
        parts.append(part.select("problem_id", "reward",
                                 pl.Series("truth", truth, dtype=pl.Float64)))
    return pl.concat(parts)


def error_rate_metrics(domain: Domain, rollout_file: Path, problem_file: Path, verdict_file: Path,
                       labels: str, canaries: pl.DataFrame | None) -> dict[str, float]:
    """The majority labels' `label_reward_precision` and `_recall` over the round's problems,
    and the verifier's error rates on the canaries (tasks/verifier_rates.py); nothing with
    reference labels and no canaries (the labels are the references: nothing to measure)."""
    if labels != "majority" and canaries is None:
        return {}
    is_canary = (pl.col("problem_id").is_in(canaries["problem_id"].implode())
                 if canaries is not None else pl.lit(False))
    scope = verdict_file if labels == "majority" else pl.scan_parquet(verdict_file).filter(
        is_canary)
    pairs = reference_pairs(domain, rollout_file, judged_problems(problem_file, canaries), scope)
    out: dict[str, float] = {}
    if labels == "majority":
        out.update(label_rates(confusion(pairs.filter(~is_canary))))
    if canaries is not None:
        out.update(canary_problems=len(canaries), **error_rates(confusion(pairs.filter(is_canary))))
    return out


def stream_verdicts(domain: Domain, scale: ScaleConfig, rollout_file: Path, problem_file: Path,
                    labels: str, path: Path, *, chunk_rows: int = CHUNK_ROWS,
                    canaries: pl.DataFrame | None = None) -> dict[str, WrittenDataset]:
    """Verdicts of the rollouts file written to `path` chunk by chunk (`rollout_chunks`, each in
    `[scale]` shards), so only one chunk's rows are held. The verdicts are regrouped into row
    groups of `GROUP_ROWS` rows, so the file's bytes depend neither on the chunk size nor on
    where the shards ran. `canaries`: the round's canary problems (`round_canaries`), whose
    rollouts follow the round's in the file. Where an LLM judge gives the rewards, each chunk is
    judged here first and its judgements written beside the verdicts (tasks/judgements.py): the
    written files by kind."""
    problem_table = judged_problems(problem_file, canaries)
    judge = model_judge_of(domain)
    with ExitStack() as files:
        writer = files.enter_context(DatasetWriter("verdicts", path, group_rows=GROUP_ROWS))
        judged = (files.enter_context(DatasetWriter("judgements", judgements_beside(path),
                                                    group_rows=GROUP_ROWS))
                  if judge is not None else None)
        for chunk in rollout_chunks(rollout_file, chunk_rows, columns=list(VERDICT_INPUTS)):
            rollouts = lazy_frame(chunk, VERDICT_INPUTS).collect()
            ids = rollouts["problem_id"].unique().implode()
            chunk_problems = problem_table.filter(pl.col("problem_id").is_in(ids))
            if judged is not None:  # judged here first: the shards find every reply
                judged.write(judgement_frame(judge, domain, rollouts, chunk_problems))
            parts = map_shards(  # config [scale]; a problem's rollouts stay together
                verdict_frame, verify_shards(domain, rollouts, chunk_problems, labels,
                                             scale.rollout_shards),
                scale=scale, stage="verify")
            writer.write(pl.concat(parts))
    written = {"verdicts": writer.written}
    if judged is not None:
        written["judgements"] = judged.written
    return written


def verify_inputs(problems: StageOutput, rollouts: StageOutput,
                  judge: Checkpoint | None = None) -> dict[str, str]:
    """The fingerprints the verify stage reads: the round's problems and rollouts, and the
    incumbent where it judges them (`[verify.judge] incumbent = true`)."""
    judged = {} if judge is None else {"judge": judge.fingerprint}
    return {"problems": problems.fingerprint, "rollouts": rollouts.fingerprint, **judged}


def canaries_of(domain: Domain, settings: WarmupVerifySettings, seed: int,
                problem_file: Path) -> pl.DataFrame | None:
    """The round's canaries (`verify.canary`, rounds >= 1; tasks/verifier_rates.py
    `round_canaries`, drawn from `seed`), whose rollouts follow the round's in the rollouts
    file; None without canaries."""
    count = settings.canary if isinstance(settings, VerifySettings) else 0
    if not count:
        return None
    texts = lazy_frame(problem_file, {"text": pl.String}).collect()["text"]
    return round_canaries(domain, settings.domain, count=count, seed=seed, problem_texts=texts)


def verify_round(ctx: RunContext, settings: WarmupVerifySettings, scale: ScaleConfig,
                 round_index: int, problems: StageOutput, rollouts: StageOutput,
                 incumbent: Checkpoint, fingerprint: str) -> StageResult:
    """The verify stage's computation: the verdicts streamed to their file, and their metrics
    (`VerifySettings` in rounds >= 1, with the canaries; `WarmupVerifySettings` in round 0)."""
    path = dataset_path(ctx.data_root, ctx.run_id, round_index, "verdicts", fingerprint)
    problem_file = problems.path("problems")
    domain = ctx.judging_domain(incumbent)
    canaries = canaries_of(domain, settings, ctx.stage_seed(CANARY_STREAM, round_index),
                           problem_file)
    judge = model_judge_of(domain)
    spent_before = replace(judge.cost) if judge is not None else None
    written = stream_verdicts(domain, scale, rollouts.path("rollouts"), problem_file,
                              settings.labels, path, canaries=canaries)
    metrics = verify_metrics(domain, settings, rollouts.path("rollouts"), problem_file, path,
                             canaries)
    if judge is not None and spent_before is not None:  # what judging this round cost
        metrics.update(judge.cost.since(spent_before))
    return StageResult(datasets=dict(written), metrics=metrics)


def verify_metrics(domain: Domain, settings: WarmupVerifySettings, rollout_file: Path,
                   problem_file: Path, verdict_file: Path,
                   canaries: pl.DataFrame | None) -> dict[str, float]:
    """The verify stage's metrics of a verdicts file: `verdict_metrics` over the round's own
    problems (its canaries left out) and, in rounds >= 1, `error_rate_metrics` (the warm-up's
    single samples are each their own majority: nothing to rate)."""
    own = (verdict_file if canaries is None else pl.scan_parquet(verdict_file).filter(
        ~pl.col("problem_id").is_in(canaries["problem_id"].implode())))
    metrics = verdict_metrics(own, problem_file, settings.labels)
    if isinstance(settings, VerifySettings):
        metrics.update(error_rate_metrics(domain, rollout_file, problem_file, verdict_file,
                                          settings.labels, canaries))
    return metrics


@task(name="verify", cache_policy=NONE, persist_result=False)
def verify(ctx: RunContext, round_index: int, problems: StageOutput, rollouts: StageOutput,
           incumbent: Checkpoint) -> StageOutput:
    """The round's rollouts (sampled from `incumbent`) judged; by `incumbent` itself under
    `[verify.judge] incumbent = true`."""
    settings = stage_settings(ctx.config, "verify", round_index)
    judge = incumbent if incumbent_judges(settings.domain.answer_checking) else None
    return run_stage(
        ctx, stage="verify", version=VERSION, round_index=round_index, settings=settings,
        inputs=verify_inputs(problems, rollouts, judge),
        compute=partial(verify_round, ctx, settings, ctx.config.scale, round_index, problems,
                        rollouts, incumbent),
    )
