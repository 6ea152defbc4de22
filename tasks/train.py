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
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NONE

from models.passes import TrainJob, plan_training, train_metrics, train_passes
from storage.datasets import read_rows, round_dir
from storage.seeds import replay_indices
from tasks.context import Checkpoint, RunContext
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.rows import split_for
from tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

if TYPE_CHECKING:
    from configs import RunConfig, TrainConfig
    from models.trainer import TrainResult

VERSION = 2
# Settings marked "Not part of the fingerprint" in configs: they change how a training runs
# (checkpoint cadence, the micro-batch after running out of memory), never what it computes, so
# changing one (say, after an out-of-memory crash) keeps finished work.
OPERATIONAL_KEYS = frozenset({"save_steps", "oom_retry_batch_size"})
# The sub-sections of [train]; a stage mode reads some of them (`sections_read`).
SUB_SECTIONS = frozenset({"warmup", "grpo", "dpo", "proposer"})


def sections_read(train: TrainConfig, *, warmup: bool) -> list[str]:
    """The `[train]` sub-sections the train stage reads in its mode.

    The warm-up (round 0) is one SFT pass with `[train.warmup]` and reads no other. A later round
    reads `[train.grpo]` when the solver or the proposer trains by GRPO, `[train.dpo]` under DPO
    and `[train.proposer]` when the proposer trains by GRPO (under SFT its settings are unread, and
    the section's absence from the fingerprint says `proposer.algorithm = "sft"`).

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
    if warmup:
        return ["warmup"]
    proposer_grpo = train.proposer.algorithm == "grpo"
    read = {"grpo": train.algorithm == "grpo" or proposer_grpo, "dpo": train.algorithm == "dpo",
            "proposer": proposer_grpo}
    return [name for name, used in read.items() if used]


def train_settings(config: RunConfig, *, warmup: bool) -> dict[str, Any]:
    """The config slice the train stage reads, as its fingerprint covers it.

    `[train]` without its operational settings (`OPERATIONAL_KEYS`) and with the sub-sections of
    `sections_read`, so arms that differ only in a section the stage does not read (say
    `train.grpo.beta` under SFT, or any algorithm section in round 0) share that stage. The
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
    settings = train.model_dump(mode="json", exclude=OPERATIONAL_KEYS | SUB_SECTIONS)
    read = sections_read(train, warmup=warmup)
    settings.update({name: getattr(train, name).model_dump(mode="json") for name in read})
    out: dict[str, Any] = {"train": settings, "warmup": warmup}
    if "proposer" in read:
        out["online_reward"] = {**config.slice("rollout", "curate"), "labels": config.verify.labels,
                                "max_completion_length": config.synthesize.max_new_tokens}
    return out


def with_replay(rows: list[dict[str, Any]], earlier: list[list[dict[str, Any]]], *, ratio: float,
                seed: int, proposer_rows: bool = True) -> list[dict[str, Any]]:
    """This round's rows plus the pool rows at `replay_indices` (storage/seeds.py): about
    `ratio * len(rows)` rows sampled evenly from the earlier rounds (their solver rows only when
    `proposer_rows` is false). The audit redraws the same indices (storage/audit/lineage.py)."""
    pool = [row for rows_of_round in earlier for row in rows_of_round
            if proposer_rows or row["role"] != "proposer"]
    return rows + [pool[i] for i in replay_indices(len(pool), len(rows), ratio=ratio, seed=seed)]


def train_pass(ctx: RunContext, kind: str, *, base: Path, rows: list[dict[str, Any]],
               warmup: bool, incumbent: Path, **common: Any) -> TrainResult:
    """One trainer pass of the train stage: `kind` sft, grpo, dpo or proposer-grpo with the
    run's settings; `common` are the arguments every trainer takes (models/passes.py)."""
    cfg = ctx.config.train
    if kind == "grpo":
        from models.grpo import train_grpo, verifier_reward

        grpo = cfg.grpo
        return train_grpo(base=base, rows=rows, reward=verifier_reward(ctx.domain),
                          learning_rate=grpo.learning_rate, batch_size=cfg.batch_size,
                          num_generations=grpo.num_generations, temperature=grpo.temperature,
                          max_completion_length=grpo.max_completion_length, beta=grpo.beta,
                          **common)
    if kind == "proposer-grpo":
        return train_proposer_grpo(ctx, base=base, rows=rows, incumbent=incumbent, **common)
    if kind == "dpo":
        from models.dpo import train_dpo

        return train_dpo(base=base, rows=rows, learning_rate=cfg.dpo.learning_rate,
                         batch_size=cfg.batch_size, max_length=cfg.max_length, beta=cfg.dpo.beta,
                         **common)
    from models.trainer import train_sft

    return train_sft(base=base, rows=rows,
                     learning_rate=cfg.warmup.learning_rate if warmup else cfg.learning_rate,
                     batch_size=cfg.batch_size, max_length=cfg.max_length, **common)


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


def scratch_dir(ctx: RunContext, round_index: int, fingerprint: str) -> Path:
    """The train stage's work folder: it belongs to the fingerprint and survives a crash, so a
    training resumes from its last trainer checkpoint (models/passes.py)."""
    return round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"


def train_round(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
                earlier: list[StageOutput], fingerprint: str) -> StageResult:
    """The train stage's computation: the round's rows plus replay, through the planned passes."""
    cfg = ctx.config.train
    seed = ctx.stage_seed("train", round_index)
    rows = with_replay(read_rows(curated.path("train_rows")),
                       [read_rows(o.path("train_rows")) for o in earlier],
                       ratio=cfg.replay_ratio, seed=seed, proposer_rows=cfg.replay_proposer_rows)
    plan = plan_training(cfg, rows, round_index, split=split_for)
    job = TrainJob(
        train_pass=partial(train_pass, ctx, warmup=plan.warmup, incumbent=incumbent.path),
        base=incumbent.path, scratch=scratch_dir(ctx, round_index, fingerprint), seed=seed,
        save_steps=cfg.save_steps, label=f"round {round_index} train",
        pause_prefix=f"train:{round_index}", progress_bar=progress_bar)
    outcome = train_passes(plan, job, batch_size=cfg.batch_size,
                           oom_retry_batch_size=cfg.oom_retry_batch_size)
    # the replay's inputs, for the audit to redraw the sample (storage/audit/lineage.py); a
    # 32-bit seed is exact in the catalog's float metrics
    replay = {"replay_seed": float(seed), "replay_ratio": cfg.replay_ratio,
              "replay_proposer_rows": float(cfg.replay_proposer_rows)}
    return StageResult(checkpoint=job.scratch / "model", checkpoint_rows=len(rows),
                       metrics={**train_metrics(plan, outcome, rows, round_index), **replay})


@task(name="train", cache_policy=NONE, persist_result=False, **TRANSIENT)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
          earlier: list[StageOutput]) -> Checkpoint:
    """Train `incumbent` on the curated rows and a replay of the `earlier` rounds' rows."""
    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config=train_settings(ctx.config, warmup=round_index == 0),
        inputs={"checkpoint": incumbent.fingerprint, "train_rows": curated.fingerprint,
                **{f"replay_round_{o.round}": o.fingerprint for o in earlier}},
        compute=partial(train_round, ctx, round_index, incumbent, curated, earlier),
    )
    shutil.rmtree(scratch_dir(ctx, round_index, out.fingerprint), ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint),
                      fingerprint=out.fingerprint)
