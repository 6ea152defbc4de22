"""Train: fine-tune the incumbent on the round's training rows; the output is a checkpoint.

Training only on the edge of the model's ability makes it forget what it already solves (the
easy problems are dropped as too_easy). Like ReST-EM, which trains on the data of every
iteration so far, each round also replays rows of earlier rounds: `replay_ratio` replayed rows
per new row, drawn evenly (seeded: storage/seeds.py) from all earlier rounds' `train_rows`.
Replayed rows keep their own ids and round, so lineage still leads back to where they were made;
the stage records its replay seed, ratio and pool (metrics `replay_seed`, `replay_ratio`,
`replay_proposer_rows`), from which the audit redraws the sample.

Crash safety: the trainer works in `<round>/.train-<fingerprint12>/` and saves a resumable
checkpoint every `train.save_steps` steps; a killed training resumes from the last complete one
(weights, optimizer, scheduler, RNG states and data position), so it takes the same steps an
uninterrupted one does. The finished model is renamed into `checkpoint-<fingerprint12>/` last.
With `train.oom_retry_batch_size` set, an out-of-memory error retries once from step 0 with that
micro-batch and gradient accumulation up to `batch_size` (same optimizer batch).

Algorithms (`train.algorithm`): sft, grpo, dpo. Round 0, the warm-up, always trains SFT on the
seed references (with `[train.warmup]`): the untrained model samples no right answers, so GRPO
would get no reward and DPO no chosen answer. In later rounds the algorithm's trainer
(models/grpo.py, dpo.py) takes the rows it can train (tasks/rows.py `split_for`) and a weighted
SFT pass on the rest follows it in the same stage, into the same checkpoint: the proposer rows
(and, for DPO, replayed rows without a pair). With `train.proposer.algorithm = "grpo"` the
proposer rows go to a GRPO pass of their own instead (Absolute Zero, R-Zero), between the two,
whose reward is the incumbent solver's online pass rate on each proposed problem
(tasks/curriculum/online.py).
Passes after the first restart from the previous pass's saved model after a crash (they are
short: proposer rows are capped by `curate.max_proposer_rows`, the proposer's GRPO pass by
`train.proposer.max_steps`); the first resumes from its trainer checkpoints like SFT.

models/passes.py plans the passes, runs them one after another and retries after running out of
memory; this module binds them to the run's config, domain and data (`train_pass`).

The training curve: every logged step (each `logging_steps`, 10) of every pass is recorded as
catalog metrics of the stage, `curve/<key>/<step>` for key loss, learning_rate and grad_norm,
the steps of later passes counted on after the earlier ones' (`curve_metrics`):

    SELECT round, CAST(split_part(name, '/', 3) AS INTEGER) AS step, value AS loss
    FROM metrics WHERE stage = 'train' AND name LIKE 'curve/loss/%' ORDER BY round, step

With `[train] report_to = "tensorboard"` the trainers' event files are kept in
`<data-root>/logs/tensorboard/<run_id>/round-<NNN>/` (`tensorboard --logdir` that folder).
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NONE

from models.grpo import grpo_generation
from models.passes import TrainJob, plan_training, train_metrics, train_passes
from storage.datasets import read_rows, round_dir
from storage.seeds import replay_indices
from tasks.context import Checkpoint, RunContext
from tasks.model_card import checkpoint_meta, write_card
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.rows import split_for
from tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

if TYPE_CHECKING:
    from configs import RunConfig, TrainConfig
    from models.trainer import TrainResult

VERSION = 2
# Settings marked "Not part of the fingerprint" in configs: they change how a training runs
# (checkpoint cadence, the micro-batch after running out of memory, the device, activation
# recomputation, the process count, where steps are reported), never what it computes, so
# changing one (say, after an out-of-memory crash) keeps finished work. `dtype` enters
# resolved (`precision_setting`).
OPERATIONAL_KEYS = frozenset({"save_steps", "oom_retry_batch_size", "device",
                              "gradient_checkpointing", "num_processes", "report_to"})
# The sub-sections of [train]; a stage mode reads some of them (`sections_read`).
SUB_SECTIONS = frozenset({"warmup", "grpo", "dpo", "proposer", "lora"})


def sections_read(train: TrainConfig, *, warmup: bool) -> list[str]:
    """The `[train]` sub-sections the train stage reads in its mode.

    The warm-up (round 0) is one SFT pass with `[train.warmup]` and reads no other. A later round
    reads `[train.grpo]` when the solver or the proposer trains by GRPO, `[train.dpo]` under DPO
    and `[train.proposer]` when the proposer trains by GRPO (under SFT its settings are unread, and
    the section's absence from the fingerprint says `proposer.algorithm = "sft"`). Every pass, the
    warm-up's too, reads `[train.lora]` when it is enabled (its absence says full fine-tuning).

    Parameters
    ----------
    train
        The run's `[train]` section.
    warmup
        Whether the stage is round 0's.

    Returns
    -------
    list of str
        Names among `SUB_SECTIONS`.
    """
    lora = ["lora"] if train.lora.enabled else []
    if warmup:
        return ["warmup", *lora]
    proposer_grpo = train.proposer.algorithm == "grpo"
    read = {"grpo": train.algorithm == "grpo" or proposer_grpo, "dpo": train.algorithm == "dpo",
            "proposer": proposer_grpo}
    return [name for name, used in read.items() if used] + lora


def precision_setting(train: TrainConfig) -> dict[str, str]:
    """The training dtype as the fingerprint covers it: resolved (`auto` is bfloat16 on a CUDA
    machine, float32 on a CPU one, so a run resumed on other hardware retrains the stage), and
    left out when float32, whose absence it means (as a section's absence means its mode is off).
    """
    from models.runtime import resolve_precision

    dtype = resolve_precision(train.device, train.dtype).dtype
    return {} if dtype == "float32" else {"dtype": dtype}


def train_settings(config: RunConfig, *, warmup: bool) -> dict[str, Any]:
    """The config slice the train stage reads, as its fingerprint covers it.

    `[train]` without its operational settings (`OPERATIONAL_KEYS`), with the resolved dtype
    (`precision_setting`) and the sub-sections of `sections_read`, so arms that differ only in a
    section the stage does not read (say `train.grpo.beta` under SFT, or any algorithm section
    in round 0) share that stage. The
    proposer's GRPO pass also reads what its online reward samples and scores with: `[rollout]`
    (the solver's backend and sampling), `[curate]` (the reward and its diversity penalty),
    `verify.labels` and `synthesize.max_new_tokens` (the longest proposal).

    Parameters
    ----------
    config
        The run's config.
    warmup
        Whether the stage is round 0's.

    Returns
    -------
    dict
        {"train": ..., "warmup": bool} and, with the proposer's GRPO pass, "online_reward".
    """
    train = config.train
    settings = train.model_dump(mode="json", exclude=OPERATIONAL_KEYS | SUB_SECTIONS | {"dtype"})
    settings.update(precision_setting(train))
    read = sections_read(train, warmup=warmup)
    settings.update({name: getattr(train, name).model_dump(mode="json") for name in read})
    out: dict[str, Any] = {"train": settings, "warmup": warmup}
    generation = grpo_generation(config.rollout, config.prompt.stop)
    if not warmup and train.algorithm == "grpo" and generation:
        out["grpo_generation"] = generation  # TRL's vLLM, stop strings (models/grpo.py)
    if "proposer" in read:
        out["online_reward"] = {**config.slice("rollout", "curate"), "labels": config.verify.labels,
                                "max_completion_length": config.synthesize.max_new_tokens}
    return out


def replayed_rows(paths: list[Path], own_size: int, *, ratio: float, seed: int,
                  proposer_rows: bool = True) -> list[dict[str, Any]]:
    """The earlier rounds' rows a train stage replays beside its own `own_size` rows: the rows
    of the pool (the files' rows in round order, their solver rows only when `proposer_rows` is
    false) at `replay_indices` (storage/seeds.py: about `ratio * own_size` rows sampled evenly),
    in draw order. The pool is sized by a count and only the drawn rows are kept while the
    files stream, so a run of many large rounds does not hold its earlier rows to replay a share
    of them. The audit redraws these indices (storage/audit/training_plan.py)."""
    import polars as pl

    if not paths:
        return []
    pool = pl.concat([pl.scan_parquet(path) for path in paths], how="diagonal_relaxed")
    if not proposer_rows:
        pool = pool.filter(pl.col("role") != "proposer")
    size = pool.select(pl.len()).collect().item()
    indices = replay_indices(size, own_size, ratio=ratio, seed=seed)
    if not indices:
        return []
    draws = pl.LazyFrame({"at": indices, "draw": range(len(indices))},
                         schema={"at": pl.UInt32, "draw": pl.Int64})
    picked = pool.with_row_index("at").join(draws, on="at", how="inner").collect(
        engine="streaming")
    return picked.sort("draw").drop("at", "draw").to_dicts()


def pass_settings(train: TrainConfig, kind: str, *, warmup: bool) -> dict[str, Any]:
    """The trainer settings of a `kind` pass (sft, grpo or dpo) from `[train]`: the arguments
    of its trainer (models/trainer.py, grpo.py, dpo.py) besides rows, folders and steps."""
    if kind == "grpo":
        grpo = train.grpo
        return {"learning_rate": grpo.learning_rate, "batch_size": train.batch_size,
                "num_generations": grpo.num_generations, "temperature": grpo.temperature,
                "max_completion_length": grpo.max_completion_length, "beta": grpo.beta}
    if kind == "dpo":
        return {"learning_rate": train.dpo.learning_rate, "batch_size": train.batch_size,
                "max_length": train.max_length, "beta": train.dpo.beta}
    return {"learning_rate": train.warmup.learning_rate if warmup else train.learning_rate,
            "batch_size": train.batch_size, "max_length": train.max_length}


def train_pass(ctx: RunContext, kind: str, *, base: Path, rows: list[dict[str, Any]],
               warmup: bool, incumbent: Path, **common: Any) -> TrainResult:
    """One trainer pass of the train stage: `kind` sft, grpo, dpo or proposer-grpo with the
    run's settings; `common` are the arguments every trainer takes (models/passes.py), to which
    the runtime of `[train]` (device, dtype, LoRA: models/runtime.py) is added. With
    `train.num_processes > 1` the pass runs in that many processes (models/launch.py)."""
    from models.launch import launch_pass, trainer_of
    from models.runtime import train_runtime

    cfg = ctx.config.train
    common = {**common, "runtime": train_runtime(cfg)}
    if kind == "proposer-grpo":
        return train_proposer_grpo(ctx, base=base, rows=rows, incumbent=incumbent, **common)
    settings = pass_settings(cfg, kind, warmup=warmup)
    if kind == "grpo":
        settings.update(grpo_generation(ctx.config.rollout, ctx.config.prompt.stop))
    if cfg.num_processes > 1:
        return launch_pass(kind, base=base, rows=rows, settings=settings,
                           run_config=ctx.config.model_dump(mode="json"), **common)
    return trainer_of(kind, ctx.domain)(base=base, rows=rows, **settings, **common)


def train_proposer_grpo(ctx: RunContext, *, base: Path, rows: list[dict[str, Any]],
                        incumbent: Path, **common: Any) -> TrainResult:
    """The proposer's GRPO pass: its reward is the online pass rate of the incumbent solver on
    each proposed problem through `curate.proposer_reward` (tasks/curriculum/online.py)."""
    from models.backends import SamplingParams, backend_for
    from models.grpo import train_grpo
    from tasks.curriculum.online import online_proposer_reward

    cfg, rollout = ctx.config.train, ctx.config.rollout
    solver = backend_for(rollout, incumbent)

    def solve(prompts: list[str], n: int, seed: int) -> list[list[str]]:
        params = SamplingParams(n=n, temperature=rollout.temperature,
                                max_new_tokens=rollout.max_new_tokens, seed=seed)
        return [[c.text for c in group] for group in solver.generate(prompts, params)]

    reward = online_proposer_reward(ctx.domain, solve, ctx.config.curate,
                                    samples=cfg.proposer.samples, seed=common["seed"],
                                    labels=ctx.config.verify.labels)
    try:
        return train_grpo(base=base, rows=rows, reward=reward, learning_rate=cfg.grpo.learning_rate,
                          batch_size=cfg.batch_size, num_generations=cfg.grpo.num_generations,
                          temperature=cfg.grpo.temperature,
                          max_completion_length=ctx.config.synthesize.max_new_tokens,
                          beta=cfg.grpo.beta, **{**common, "max_steps": cfg.proposer.max_steps})
    finally:
        solver.close()


CURVE_PREFIX = "curve/"


def curve_metrics(results: list[TrainResult]) -> dict[str, float]:
    """The passes' training curves as metrics `curve/<key>/<step>`, the steps of each pass
    counted on after those of the passes before it (one x axis for the stage)."""
    metrics: dict[str, float] = {}
    offset = 0
    for result in results:
        for point in result.curve:
            step = offset + int(point["step"])
            metrics.update({f"{CURVE_PREFIX}{key}/{step}": value
                            for key, value in point.items() if key != "step"})
        offset += result.steps
    return metrics


def keep_reports(scratch: Path, ctx: RunContext, round_index: int) -> None:
    """Copy the tensorboard event files the trainers wrote in the work folder (removed after
    the stage) to `<data-root>/logs/tensorboard/<run_id>/round-<NNN>/`."""
    kept = Path(ctx.data_root) / "logs" / "tensorboard" / ctx.run_id / f"round-{round_index:03d}"
    for events in sorted(scratch.glob("trainer*/runs")):  # one trainer folder per pass
        shutil.copytree(events, kept / events.parent.name, dirs_exist_ok=True)


def data_inputs(curated: StageOutput, earlier: list[StageOutput]) -> dict[str, str]:
    """The fingerprints of the datasets the train stage reads: the round's rows and the replay's
    earlier rounds (part of its fingerprint, and of the checkpoint's model card)."""
    return {"train_rows": curated.fingerprint,
            **{f"replay_round_{o.round}": o.fingerprint for o in earlier}}


def scratch_dir(ctx: RunContext, round_index: int, fingerprint: str) -> Path:
    """The train stage's work folder: it belongs to the fingerprint and survives a crash, so a
    training resumes from its last trainer checkpoint (models/passes.py)."""
    return round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"


def train_round(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
                earlier: list[StageOutput], fingerprint: str) -> StageResult:
    """The train stage's computation: the round's rows plus replay, through the planned passes."""
    cfg = ctx.config.train
    seed = ctx.stage_seed("train", round_index)
    rows = read_rows(curated.path("train_rows"))
    rows += replayed_rows([o.path("train_rows") for o in earlier], len(rows),
                          ratio=cfg.replay_ratio, seed=seed,
                          proposer_rows=cfg.replay_proposer_rows)
    plan = plan_training(cfg, rows, round_index, split=split_for)
    job = TrainJob(
        train_pass=partial(train_pass, ctx, warmup=plan.warmup, incumbent=incumbent.path),
        base=incumbent.path, scratch=scratch_dir(ctx, round_index, fingerprint), seed=seed,
        save_steps=cfg.save_steps, label=f"round {round_index} train",
        pause_prefix=f"train:{round_index}", progress_bar=progress_bar)
    outcome = train_passes(plan, job, batch_size=cfg.batch_size,
                           oom_retry_batch_size=cfg.oom_retry_batch_size)
    keep_reports(job.scratch, ctx, round_index)
    write_card(job.scratch / "model", checkpoint_meta(
        ctx, stage="train", round_index=round_index, fingerprint=fingerprint, parent=incumbent,
        config=train_settings(ctx.config, warmup=round_index == 0),
        data=data_inputs(curated, earlier), rows=len(rows)))
    # the replay's inputs, for the audit to redraw the sample (storage/audit/training_plan.py); a
    # 32-bit seed is exact in the catalog's float metrics
    replay = {"replay_seed": float(seed), "replay_ratio": cfg.replay_ratio,
              "replay_proposer_rows": float(cfg.replay_proposer_rows)}
    return StageResult(checkpoint=job.scratch / "model", checkpoint_rows=len(rows),
                       metrics={**train_metrics(plan, outcome, rows, round_index), **replay,
                                **curve_metrics(outcome.results)})


@task(name="train", cache_policy=NONE, persist_result=False, **TRANSIENT)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
          earlier: list[StageOutput]) -> Checkpoint:
    """Train `incumbent` on the curated rows and a replay of the `earlier` rounds' rows."""
    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config=train_settings(ctx.config, warmup=round_index == 0),
        inputs={"checkpoint": incumbent.fingerprint, **data_inputs(curated, earlier)},
        compute=partial(train_round, ctx, round_index, incumbent, curated, earlier),
    )
    shutil.rmtree(scratch_dir(ctx, round_index, out.fingerprint), ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint),
                      fingerprint=out.fingerprint)
