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

Settings (configs/settings.py; `train_settings` builds them with the training dtype resolved on
this machine): round 0's `WarmupTrainSettings` (the domain, dtype, batch and replay keys,
`[train.warmup]`, `[train.lora]`) and later rounds' `TrainSettings` (those plus the algorithm's
keys, `[train.grpo]`, `[train.dpo]`, `[train.proposer]` and what the GRPO passes sample and
reward with: `[rollout]`, `[curate]`, `verify.labels`). The whole object is the stage's
fingerprint; `TrainOperations` (`save_steps`, `oom_retry_batch_size`) and the runtime keys
(device, activation recomputation, process count, reporting: models/runtime.py) are in none.

Algorithms (`train.algorithm`): sft, grpo, dpo. Round 0, the warm-up, always trains SFT (with
`[train.warmup]`) on what its curate kept: the seed references by default (the untrained model
samples no right answers, so GRPO would get no reward and DPO no chosen answer), or under
`[warmup] mode = "self_samples"` the model's own verified answers to the seed problems, the same
settings either way (the rows differ, and with them the stage's input fingerprint); under
`mode = "none"` round 0 has no train stage (flows/run.py). In later rounds the algorithm's trainer
(models/grpo.py, dpo.py) takes the rows it can train (tasks/rows.py `split_for`) and a weighted
SFT pass on the rest follows it in the same stage, into the same checkpoint: the proposer rows
(and, for DPO, replayed rows without a pair). With `train.proposer.algorithm = "grpo"` the
proposer rows go to a GRPO pass of their own instead (Absolute Zero, R-Zero), between the two,
whose reward is the incumbent solver's online pass rate on each proposed problem
(tasks/curriculum/online.py).
Passes after the first restart from the previous pass's saved model after a crash (they are
short: proposer rows are capped by `curate.max_proposer_rows`, the proposer's GRPO pass by
`train.proposer.max_steps`); the first resumes from its trainer checkpoints like SFT.

Under an LLM judge (`verify.compare = "judge"`) the GRPO reward's judgements are data as
verify's are: each reward call journals them in the pass's work folder (models/grpo_journal.py
`JudgementJournal`) and the stage stores them as its `judgements` dataset, with the judge's cost
in its metrics (`judge_*`).

models/passes.py plans the passes, runs them one after another and retries after running out of
memory; this module binds them to the run's config, domain and data (`train_pass`).

The training curve: every logged step (each `logging_steps`, 10) of every pass is recorded as
catalog metrics of the stage, `curve/<key>/<step>` for key loss, learning_rate and grad_norm,
the steps of later passes counted on after the earlier ones' (`curve_metrics`):

    SELECT round, CAST(split_part(name, '/', 3) AS INTEGER) AS step, value AS loss
    FROM metrics WHERE stage = 'train' AND name LIKE 'curve/loss/%' ORDER BY round, step

With `[train] report_to = "tensorboard"`, `"mlflow"` or `"wandb"` this curve, its steps counted
on across rounds, goes to the run's one tracker run at the end of each round
(tasks/tracking.py); the trainers themselves report to none of them.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NONE

from configs.domain import incumbent_judges
from configs.settings import (
    TrainOperations,
    TrainSettings,
    WarmupTrainSettings,
    stage_settings,
)
from domains.judge_rows import model_judge_of
from models.grpo import grpo_generation
from models.grpo_journal import JOURNAL, read_journal
from models.passes import TrainJob, plan_training, train_metrics, train_passes
from storage.datasets import read_rows, round_dir
from storage.seeds import replay_indices
from storage.train_stages import PROPOSER_TRAIN_STAGE
from tasks.context import Checkpoint, RunContext
from tasks.model_card import checkpoint_meta, write_card
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.rows import split_for
from tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

if TYPE_CHECKING:
    from configs import RunConfig
    from domains.base import Domain
    from models.runtime import TrainRuntime
    from models.trainer import TrainResult

VERSION = 4  # 3: the GRPO reward judges each row's stored problem (None when unjudged); 4: and
#              an LLM judge's judgements are stored (`judgements`)


def train_settings(config: RunConfig, round_index: int) -> WarmupTrainSettings:
    """The train stage's settings in round `round_index` (round 0: `WarmupTrainSettings`) with
    the training dtype resolved on this machine (`auto` is bfloat16 on a CUDA machine, float32
    on a CPU one, so a run resumed on other hardware retrains the stage)."""
    from models.runtime import resolve_precision

    dtype = resolve_precision(config.train.device, config.train.dtype).dtype
    return stage_settings(config, "train", round_index, dtype=dtype)


def replayed_rows(paths: list[Path], own_size: int, *, ratio: float, seed: int,
                  proposer_rows: bool = True, solver_rows: bool = True) -> list[dict[str, Any]]:
    """The earlier rounds' rows a train stage replays beside its own `own_size` rows: the rows
    of the pool (the files' rows in round order, without their proposer rows when
    `proposer_rows` is false, without their solver rows when `solver_rows` is) at
    `replay_indices` (storage/seeds.py: about `ratio * own_size` rows sampled evenly),
    in draw order. The pool is sized by a count and only the drawn rows are kept while the
    files stream, so a run of many large rounds does not hold its earlier rows to replay a share
    of them. The audit redraws these indices (storage/audit/training_plan.py)."""
    import polars as pl

    if not paths:
        return []
    pool = pl.concat([pl.scan_parquet(path) for path in paths], how="diagonal_relaxed")
    if not proposer_rows:
        pool = pool.filter(pl.col("role") != "proposer")
    if not solver_rows:
        pool = pool.filter(pl.col("role") == "proposer")
    size = pool.select(pl.len()).collect().item()
    indices = replay_indices(size, own_size, ratio=ratio, seed=seed)
    if not indices:
        return []
    draws = pl.LazyFrame({"at": indices, "draw": range(len(indices))},
                         schema={"at": pl.UInt32, "draw": pl.Int64})
    picked = pool.with_row_index("at").join(draws, on="at", how="inner").collect(
        engine="streaming")
    return picked.sort("draw").drop("at", "draw").to_dicts()


def pass_settings(settings: WarmupTrainSettings, kind: str) -> dict[str, Any]:
    """The trainer settings of a `kind` pass (sft, grpo or dpo) from the stage's settings: the
    arguments of its trainer (models/trainer.py, grpo.py, dpo.py) besides rows, folders and
    steps. The warm-up (`WarmupTrainSettings`) trains SFT with `[train.warmup]`'s rate."""
    if not isinstance(settings, TrainSettings):
        return {"learning_rate": settings.warmup.learning_rate,
                "batch_size": settings.batch_size, "max_length": settings.max_length}
    if kind == "grpo":
        grpo = settings.grpo
        return {"learning_rate": grpo.learning_rate, "batch_size": settings.batch_size,
                "num_generations": grpo.num_generations, "temperature": grpo.temperature,
                "max_completion_length": grpo.max_completion_length, "beta": grpo.beta,
                **grpo_generation(settings.rollout, settings.domain.prompt.stop)}
    if kind == "dpo":
        return {"learning_rate": settings.dpo.learning_rate, "batch_size": settings.batch_size,
                "max_length": settings.max_length, "beta": settings.dpo.beta}
    return {"learning_rate": settings.learning_rate, "batch_size": settings.batch_size,
            "max_length": settings.max_length}


def train_pass(domain: Domain, settings: WarmupTrainSettings, runtime: TrainRuntime, kind: str,
               *, base: Path, rows: list[dict[str, Any]], incumbent: Checkpoint,
               **common: Any) -> TrainResult:
    """One trainer pass of the train stage: `kind` sft, grpo, dpo or proposer-grpo with the
    stage's settings; `common` are the arguments every trainer takes (models/passes.py), to
    which `runtime` (device, dtype, LoRA: models/runtime.py) is added. With
    `runtime.num_processes > 1` the pass runs in that many processes (models/launch.py), which
    get the stage's settings (serialized) to rebuild the domain from, and the incumbent where it
    judges (`[verify.judge] incumbent`: `domain` is then judged by it already)."""
    from models.launch import launch_pass, trainer_of

    common = {**common, "runtime": runtime}
    if kind == "proposer-grpo":
        return train_proposer_grpo(domain, settings, base=base, rows=rows,
                                   incumbent=incumbent.path, **common)
    arguments = pass_settings(settings, kind)
    if runtime.num_processes > 1:
        judge = ((incumbent.path, incumbent.fingerprint)
                 if incumbent_judges(settings.domain.answer_checking) else None)
        return launch_pass(kind, base=base, rows=rows, settings=arguments,
                           train_settings=settings, judge=judge, **common)
    return trainer_of(kind, domain)(base=base, rows=rows, **arguments, **common)


def train_proposer_grpo(domain: Domain, settings: TrainSettings, *, base: Path,
                        rows: list[dict[str, Any]], incumbent: Path, **common: Any
                        ) -> TrainResult:
    """The proposer's GRPO pass: its reward is the online pass rate of the incumbent solver on
    each proposed problem through `curate.proposer_reward` (tasks/curriculum/online.py)."""
    from models.backends import SamplingParams, backend_for
    from models.grpo import train_grpo
    from tasks.curriculum.online import online_proposer_reward

    rollout, grpo = settings.rollout, settings.grpo
    solver = backend_for(rollout, incumbent)

    def solve(prompts: list[str], n: int, seed: int) -> list[list[str]]:
        params = SamplingParams(n=n, temperature=rollout.temperature,
                                max_new_tokens=rollout.max_new_tokens, seed=seed)
        return [[c.text for c in group] for group in solver.generate(prompts, params)]

    reward = online_proposer_reward(domain, solve, settings.curate,
                                    samples=settings.proposer.samples, seed=common["seed"],
                                    labels=settings.labels)
    try:
        return train_grpo(base=base, rows=rows, reward=reward, learning_rate=grpo.learning_rate,
                          batch_size=settings.batch_size, num_generations=grpo.num_generations,
                          temperature=grpo.temperature,
                          max_completion_length=settings.proposal_max_new_tokens,
                          beta=grpo.beta, judged=False,
                          **{**common, "max_steps": settings.proposer.max_steps})
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


def data_inputs(curated: StageOutput, earlier: list[StageOutput]) -> dict[str, str]:
    """The fingerprints of the datasets the train stage reads: the round's rows and the replay's
    earlier rounds (part of its fingerprint, and of the checkpoint's model card)."""
    return {"train_rows": curated.fingerprint,
            **{f"replay_round_{o.round}": o.fingerprint for o in earlier}}


def scratch_dir(ctx: RunContext, round_index: int, fingerprint: str, stage: str = "train"
                ) -> Path:
    """The train stage's work folder: it belongs to the fingerprint and survives a crash, so a
    training resumes from its last trainer checkpoint (models/passes.py)."""
    return round_dir(ctx.data_root, ctx.run_id, round_index) / f".{stage}-{fingerprint[:12]}"


PROPOSER_STAGE = PROPOSER_TRAIN_STAGE  # the separate proposer's train stage ([proposer] separate)


ROLES = {"both": 0.0, "solver": 1.0, "proposer": 2.0}  # metric `trained_roles` (the audit's)


def trained_roles(stage: str, *, separate_proposer: bool) -> str:
    """Whose rows `stage` trains: both roles', or with a separate proposer the solver's in
    `train` and the proposer's in `train-proposer` (its own and the replayed rows alike)."""
    if stage == PROPOSER_STAGE:
        return "proposer"
    return "solver" if separate_proposer else "both"


def rows_of(roles: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of `roles` (`trained_roles`) among `rows`."""
    return rows if roles == "both" else [r for r in rows if r["role"] == roles]


def train_round(ctx: RunContext, settings: WarmupTrainSettings, operations: TrainOperations,
                runtime: TrainRuntime, round_index: int, incumbent: Checkpoint,
                curated: StageOutput, earlier: list[StageOutput], fingerprint: str, *,
                stage: str = "train", base: Checkpoint | None = None) -> StageResult:
    """The train stage's computation: the round's rows plus replay, through the planned passes.
    `stage` train trains `incumbent`; train-proposer trains the separate proposer `base` (its
    GRPO reward asks `incumbent`, the solver)."""
    seed = ctx.stage_seed(stage, round_index)
    base = base or incumbent
    roles = trained_roles(stage, separate_proposer=settings.separate_proposer)
    rows = rows_of(roles, read_rows(curated.path("train_rows")))
    rows += replayed_rows([o.path("train_rows") for o in earlier], len(rows),
                          ratio=settings.replay_ratio, seed=seed,
                          proposer_rows=settings.replay_proposer_rows and roles != "solver",
                          solver_rows=roles != "proposer")
    plan = plan_training(settings, rows, round_index, split=split_for)
    domain = ctx.judging_domain(incumbent)
    judge = model_judge_of(domain)
    spent_before = replace(judge.cost) if judge is not None else None
    job = TrainJob(
        train_pass=partial(train_pass, domain, settings, runtime, incumbent=incumbent),
        base=base.path, scratch=scratch_dir(ctx, round_index, fingerprint, stage), seed=seed,
        save_steps=operations.save_steps, label=f"round {round_index} {stage}",
        pause_prefix=f"{stage}:{round_index}", progress_bar=progress_bar)
    outcome = train_passes(plan, job, batch_size=settings.batch_size,
                           oom_retry_batch_size=operations.oom_retry_batch_size)
    write_card(job.scratch / "model", checkpoint_meta(
        ctx, stage=stage, round_index=round_index, fingerprint=fingerprint, parent=base,
        config=settings.model_dump(mode="json"), data=data_inputs(curated, earlier),
        rows=len(rows)))
    # the replay's inputs, for the audit to redraw the sample (storage/audit/training_plan.py); a
    # 32-bit seed is exact in the catalog's float metrics
    replay = {"replay_seed": float(seed), "replay_ratio": settings.replay_ratio,
              "replay_proposer_rows": float(settings.replay_proposer_rows),
              "trained_roles": ROLES[roles]}
    metrics = {**train_metrics(plan, outcome, rows, round_index), **replay,
               **curve_metrics(outcome.results)}
    # the GRPO reward's judgements, as verify stores its own (models/grpo_journal.py)
    judged = read_journal(sorted(job.scratch.glob(f"*/{JOURNAL}")), ctx.run_id, round_index)
    if judge is not None and spent_before is not None:
        metrics.update(judge.cost.since(spent_before))  # this process's: not a launched pass's
    return StageResult(datasets={} if judged is None else {"judgements": judged},
                       checkpoint=job.scratch / "model", checkpoint_rows=len(rows),
                       metrics=metrics)


@task(name="train", cache_policy=NONE, persist_result=False, **TRANSIENT)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
          earlier: list[StageOutput]) -> Checkpoint:
    """Train `incumbent` on the curated rows and a replay of the `earlier` rounds' rows."""
    from models.runtime import train_runtime

    return train_stage(ctx, "train", round_index, incumbent, curated, earlier,
                       settings=train_settings(ctx.config, round_index),
                       operations=TrainOperations.from_config(ctx.config),
                       runtime=train_runtime(ctx.config.train))


@task(name=PROPOSER_STAGE, cache_policy=NONE, persist_result=False, **TRANSIENT)
def train_proposer(ctx: RunContext, round_index: int, proposer: Checkpoint, solver: Checkpoint,
                   curated: StageOutput, earlier: list[StageOutput]) -> Checkpoint:
    """Train the separate `proposer` on the round's proposer rows (and replayed ones): SFT in
    round 0 and under `train.proposer.algorithm = "sft"`, GRPO rewarded by `solver`'s online
    pass rate under "grpo". The checkpoint is the next round's proposer: a proposer has no
    held-out test, so it advances every round it has rows (R-Zero's challenger does too)."""
    from models.runtime import train_runtime

    return train_stage(ctx, PROPOSER_STAGE, round_index, solver, curated, earlier,
                       settings=train_settings(ctx.config, round_index),
                       operations=TrainOperations.from_config(ctx.config),
                       runtime=train_runtime(ctx.config.train), base=proposer)


def train_inputs(stage: str, incumbent: Checkpoint, curated: StageOutput,
                 earlier: list[StageOutput], base: Checkpoint | None = None) -> dict[str, str]:
    """The fingerprints a train stage reads: the checkpoint it trains, the rows, and for the
    proposer's the solver its GRPO reward asks."""
    trained = {"checkpoint": (base or incumbent).fingerprint}
    solver = {"solver": incumbent.fingerprint} if stage == PROPOSER_STAGE else {}
    return {**trained, **solver, **data_inputs(curated, earlier)}


def train_stage(ctx: RunContext, stage: str, round_index: int, incumbent: Checkpoint,
                curated: StageOutput, earlier: list[StageOutput], *,
                settings: WarmupTrainSettings, operations: TrainOperations,
                runtime: TrainRuntime, base: Checkpoint | None = None) -> Checkpoint:
    """Run train stage `stage` (train or train-proposer: `train_round`); its checkpoint."""
    out = run_stage(
        ctx, stage=stage, version=VERSION, round_index=round_index, settings=settings,
        inputs=train_inputs(stage, incumbent, curated, earlier, base),
        compute=partial(train_round, ctx, settings, operations, runtime, round_index, incumbent,
                        curated, earlier, stage=stage, base=base),
    )
    shutil.rmtree(scratch_dir(ctx, round_index, out.fingerprint, stage), ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint),
                      fingerprint=out.fingerprint)
