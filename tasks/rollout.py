"""Rollout: the solver samples k answers per problem through a rollout backend.

In round 0 (the warm-up) the model is untrained and its answers are not trained on, so it
samples one answer per seed problem, enough to record its pass@1; under `[warmup] mode =
"self_samples"` the warm-up trains on its verified answers, so it samples k like later rounds
(configs/settings.py `samples_per_problem`).

With `verify.canary = n` (rounds >= 1) the round's n canaries (tasks/verifier_rates.py:
known-answer generator problems, never trained on) are sampled after the round's problems, k
answers each, in batches of their own: the round's own rollouts keep the seeds of their
positions and their batches, so they are the rows a run without canaries samples.

The rows are written as they are sampled: each shard samples its problems in chunks of about
`CHUNK_ROWS` rollouts (whole batches of the backend, so the rows are those of one call), and
the stage appends every chunk (in process) or every finished shard (on Ray), in prompt order,
to the rollouts file in row groups of `CHUNK_ROWS` rows (the same bytes however the rows
arrived); a round of millions of rollouts is never held whole.

With `rollout.backend = "vllm"` on Ray the stage runs here and only the sampling is spread: each
chunk's prompts are cut into `rollout_shards` pieces for the run's `vllm_engines` warm engine
actors (models/vllm_actors.py), whose seeded requests give the rows of one engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NONE

from configs import RolloutConfig, ScaleConfig
from configs.settings import RolloutSettings, WarmupRolloutSettings, stage_settings
from domains.base import Domain
from models.backends import ProgressCallback, RolloutBackend, SamplingParams
from storage.datasets import DatasetWriter, dataset_path, read_rows
from tasks.context import Checkpoint, RunContext
from tasks.curriculum.columns import row_ids
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.shards import batch_aligned_ranges, map_shards
from tasks.stage import StageOutput, StageResult, run_stage
from tasks.verifier_rates import CANARY_STREAM, round_canaries

VERSION = 1


CHUNK_ROWS = 65536  # rollouts sampled, then written, at once (whole batches of the backend)


def rollout_rows(
    backend: RolloutBackend,
    domain: Domain,
    problems: list[dict[str, Any]],
    *,
    params: SamplingParams,
    checkpoint: str,
    run_id: str,
    round_index: int,
    progress: ProgressCallback | None = None,
) -> list[dict[str, Any]]:
    prompts = [domain.solver_prompt(p["text"]) for p in problems]
    outputs = backend.generate(prompts, params, progress=progress)
    cut = domain.cut  # [prompt] stop strings
    rows = [{"run_id": run_id, "round": round_index, "problem_id": problem["problem_id"],
             "sample_index": index, "prompt": prompt, "completion": cut(sample.text),
             "completion_tokens": sample.tokens, "checkpoint": checkpoint}
            for problem, prompt, samples in zip(problems, prompts, outputs, strict=True)
            for index, sample in enumerate(samples)]
    # row_id("rollout", run_id, round, problem_id, sample_index, checkpoint), over columns
    ids = row_ids("rollout", [
        pl.Series([run_id] * len(rows), dtype=pl.String),
        pl.Series([round_index] * len(rows), dtype=pl.Int64),
        pl.Series([row["problem_id"] for row in rows], dtype=pl.String),
        pl.Series([row["sample_index"] for row in rows], dtype=pl.Int64),
        pl.Series([checkpoint] * len(rows), dtype=pl.String)])
    for row, rollout_id in zip(rows, ids.to_list(), strict=True):
        row["rollout_id"] = rollout_id
    return rows


def rollout_shard(*, rollout: RolloutConfig, checkpoint_dir: str, domain: Domain,
                  problems: list[dict[str, Any]], params: SamplingParams, checkpoint: str,
                  run_id: str, round_index: int, progress: ProgressCallback | None = None,
                  sink: Callable[[list[dict[str, Any]]], None] | None = None,
                  chunk_rows: int = CHUNK_ROWS,
                  backend: RolloutBackend | None = None) -> list[dict[str, Any]]:
    """One shard of the stage, self-contained (it may run on a Ray worker): load, sample,
    release. The problems are sampled in chunks of about `chunk_rows` rollouts that start on
    the backend's batch boundaries (`batch_aligned_ranges`, each told where it starts), so the
    rows are those of one call; with `sink` each chunk's rows go to it as they are made and
    none are returned, else all are. `backend`: one to sample with instead of one loaded from
    `rollout` (the engine actors' backend); it is closed here all the same."""
    from models.backends import backend_for

    if backend is None:
        backend = backend_for(rollout, Path(checkpoint_dir))
    rows: list[dict[str, Any]] = []
    chunks = max(1, -(-len(problems) * params.n // chunk_rows))
    try:
        for start, end in batch_aligned_ranges(len(problems), params.n, rollout.batch_size,
                                               chunks):
            part = rollout_rows(backend, domain, problems[start:end],
                                params=replace(params, first_prompt=params.first_prompt + start),
                                checkpoint=checkpoint, run_id=run_id, round_index=round_index,
                                progress=progress)
            if sink is not None:
                sink(part)
            else:
                rows.extend(part)
        return rows
    finally:
        backend.close()


def rollout_inputs(incumbent: Checkpoint, problems: StageOutput) -> dict[str, str]:
    """The fingerprints the rollout stage reads: the incumbent and the round's problems."""
    return {"checkpoint": incumbent.fingerprint, "problems": problems.fingerprint}


def rollout_round(ctx: RunContext, settings: WarmupRolloutSettings, scale: ScaleConfig,
                  round_index: int, incumbent: Checkpoint, problems: StageOutput,
                  fingerprint: str) -> StageResult:
    """The rollout stage's computation: k samples per problem (then per canary: `RolloutSettings`
    of rounds >= 1), in `[scale]` shards, streamed to the rollouts file."""
    cfg = settings.rollout
    own = read_rows(problems.path("problems"))
    canaries = round_canaries(ctx.domain, settings.domain, count=settings.canary,
                              seed=ctx.stage_seed(CANARY_STREAM, round_index),
                              problem_texts=[row["text"] for row in own]).to_dicts() if (
        isinstance(settings, RolloutSettings) and settings.canary) else []
    # 1 in the references warm-up (its answers are not trained on: one measures pass@1), else k
    params = SamplingParams(n=settings.samples_per_problem,
                            temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                            seed=ctx.stage_seed("rollout", round_index))
    whole = {"rollout": cfg, "checkpoint_dir": str(incumbent.path), "domain": ctx.domain,
             "params": params, "checkpoint": incumbent.fingerprint, "run_id": ctx.run_id,
             "round_index": round_index}
    # Shards (config [scale]) start on batch boundaries and know where: same rows as one piece.
    # The canaries are shards of their own, after the round's problems: no batch holds both, so
    # the round's own rollouts are those of a run without canaries, batch for batch.
    groups = [(0, own)] + ([(len(own), canaries)] if canaries else [])
    shards = [{**whole, "problems": group[start:end],
               "params": replace(params, first_prompt=offset + start)}
              for offset, group in groups
              for start, end in batch_aligned_ranges(len(group), params.n, cfg.batch_size,
                                                     scale.rollout_shards)]
    rows = own + canaries
    path = dataset_path(ctx.data_root, ctx.run_id, round_index, "rollouts", fingerprint)
    with progress_bar(f"round {round_index} rollout", len(rows) * params.n) as advance, \
            DatasetWriter("rollouts", path, group_rows=CHUNK_ROWS) as writer:
        if cfg.backend == "vllm" and scale.task_runner == "ray":  # the run's engine actors
            from models.vllm_actors import engine_actors_backend

            engines = engine_actors_backend(cfg, incumbent.path, engines=scale.vllm_engines,
                                            shards=scale.rollout_shards)
            for offset, group in groups:  # closing the actors' backend keeps them warm
                rollout_shard(**{**whole, "problems": group,
                                 "params": replace(params, first_prompt=offset)},
                              backend=engines, progress=advance, sink=writer.write)
        else:
            map_shards(rollout_shard, shards, scale=scale, stage="rollout", progress=advance,
                       sink=writer.write)  # chunks and shards arrive in prompt order
    tokens = pl.scan_parquet(path).select(pl.col("completion_tokens").sum()).collect().item()
    return StageResult(datasets={"rollouts": writer.written},
                       metrics={"rollouts": writer.written.rows, "generated_tokens": tokens})


@task(name="rollout", cache_policy=NONE, persist_result=False, **TRANSIENT)
def rollout(ctx: RunContext, round_index: int, incumbent: Checkpoint,
            problems: StageOutput) -> StageOutput:
    settings = stage_settings(ctx.config, "rollout", round_index)
    return run_stage(
        ctx, stage="rollout", version=VERSION, round_index=round_index, settings=settings,
        inputs=rollout_inputs(incumbent, problems),
        compute=partial(rollout_round, ctx, settings, ctx.config.scale, round_index, incumbent,
                        problems),
    )
