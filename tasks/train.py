"""Train: fine-tune the incumbent on the round's training rows; the output is a checkpoint.

Training only on the edge of the model's ability makes it forget what it already solves (the
easy problems are dropped as too_easy). Like ReST-EM, which trains on the data of every
iteration so far, each round also replays rows of earlier rounds: `replay_ratio` replayed rows
per new row, drawn evenly (seeded) from all earlier rounds' `train_rows`. Replayed rows keep
their own ids and round, so lineage still leads back to where they were made.

Crash safety: the trainer works in `<round>/.train-<fingerprint12>/` and saves a resumable
checkpoint every `train.save_steps` steps; a killed training resumes from the last complete one
(weights, optimizer, scheduler, RNG states and data position), so it takes the same steps an
uninterrupted one does. The finished model is renamed into `checkpoint-<fingerprint12>/` last.
With `train.oom_retry_batch_size` set, an out-of-memory error retries once from step 0 with that
micro-batch and gradient accumulation up to `batch_size` (same optimizer batch).

Algorithms (`train.algorithm`): sft, grpo, dpo. Round 0, the warm-up, always trains SFT on the
seed references: the untrained model samples no right answers, so GRPO would get no reward
and DPO no chosen answer. In later rounds the algorithm's trainer (models/grpo.py,
dpo.py) takes the rows it can train (tasks/rows.py `split_for`) and a weighted SFT pass
on the rest follows it in the same stage, into the same checkpoint: the proposer rows (and, for
DPO, replayed rows without a pair). With `train.proposer_algorithm = "grpo"` the proposer rows
go to a GRPO pass of their own instead (Absolute Zero, R-Zero), between the two, whose reward is
the incumbent solver's online pass rate on each proposed problem (tasks/curriculum/online.py).
Passes after the first restart from the previous pass's saved model after a crash (they are
short: proposer rows are capped by `curate.max_proposer_rows`, the proposer's GRPO pass by
`train.proposer_max_steps`); the first resumes from its trainer checkpoints like SFT.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NONE

from storage.datasets import read_rows, round_dir
from storage.recovery import Discarded, notice, pause_point, remove
from tasks.context import Checkpoint, RunContext
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.rows import split_for
from tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

if TYPE_CHECKING:
    from models.trainer import TrainResult

VERSION = 1
# Train settings that change how training runs, not what it computes; left out of the
# fingerprint so that changing them (say, after an out-of-memory crash) keeps finished work.
OPERATIONAL_KEYS = ("save_steps", "oom_retry_batch_size")
PLAN_FILE = "plan.json"
# Settings of the proposer's GRPO pass: they change nothing in the warm-up or while the proposer
# is trained by SFT, so then they stay out of the fingerprint too (runs made before they existed
# keep theirs, and arms that differ only in them share one warm-up).
PROPOSER_GRPO_KEYS = ("proposer_algorithm", "proposer_max_steps", "proposer_samples")


def fingerprinted_settings(train: dict[str, Any], *, warmup: bool = False) -> dict[str, Any]:
    """The `[train]` settings that decide what the train stage computes (its fingerprint's)."""
    unused = PROPOSER_GRPO_KEYS if warmup or train.get("proposer_algorithm", "sft") == "sft" else ()
    if train.get("replay_proposer_rows", True):
        unused += ("replay_proposer_rows",)  # as before the key existed: same fingerprints
    return {key: value for key, value in train.items() if key not in OPERATIONAL_KEYS + unused}


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, a CPU allocator failure, or MemoryError."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def recorded_accumulation(scratch: Path) -> int:
    """Gradient accumulation of the training whose checkpoints are in `scratch` (1 if none):
    a resumed training continues with the micro-batch it was started with."""
    try:
        return int(json.loads((scratch / PLAN_FILE).read_text())["gradient_accumulation_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def resumable_training(scratch: Path, accumulation: int, label: str) -> Path | None:
    """Prepare `scratch` for a training run; return the trainer checkpoint to resume from.

    Incomplete trainer checkpoints (a crash during a save) and a half-saved final model are
    discarded with a one-line notice; a complete checkpoint is announced and resumed from.
    """
    from models.trainer import last_checkpoint

    if (scratch / "model").exists():
        remove(scratch / "model")
    checkpoint, incomplete = last_checkpoint(scratch / "trainer")
    for folder in incomplete:
        remove(folder)
        notice(str(Discarded(folder, "incomplete trainer checkpoint (interrupted while saving)")))
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / PLAN_FILE).write_text(json.dumps({"gradient_accumulation_steps": accumulation}))
    if checkpoint is not None:
        notice(f"flywheel: {label}: resuming from the trainer's checkpoint at step "
               f"{checkpoint.name.removeprefix('checkpoint-')} ({checkpoint})")
    return checkpoint


def quarters(name: str, rewards: Sequence[float]) -> dict[str, float]:
    """Mean reward of the first and the last quarter of a pass's logged steps (none: {})."""
    if not rewards:
        return {}
    quarter = max(1, len(rewards) // 4)
    return {f"{name}_first_quarter": sum(rewards[:quarter]) / quarter,
            f"{name}_last_quarter": sum(rewards[-quarter:]) / quarter}


def with_replay(rows: list[dict[str, Any]], earlier: list[list[dict[str, Any]]], *, ratio: float,
                seed: int, proposer_rows: bool = True) -> list[dict[str, Any]]:
    """This round's rows plus `ratio * len(rows)` rows sampled evenly from earlier rounds (their
    solver rows only when `proposer_rows` is false)."""
    pool = [row for rows_of_round in earlier for row in rows_of_round
            if proposer_rows or row["role"] != "proposer"]
    count = min(len(pool), round(ratio * len(rows)))
    return rows + random.Random(seed).sample(pool, count)


def train_pass(ctx: RunContext, kind: str, *, base: Path, rows: list[dict[str, Any]], warmup: bool,
               **common: Any) -> TrainResult:
    """One trainer pass of the train stage: `kind` sft, grpo or dpo with the run's settings."""
    cfg = ctx.config.train
    if kind == "grpo":
        from models.grpo import train_grpo, verifier_reward

        return train_grpo(base=base, rows=rows, reward=verifier_reward(ctx.domain),
                          learning_rate=cfg.grpo_learning_rate, batch_size=cfg.batch_size,
                          num_generations=cfg.num_generations, temperature=cfg.grpo_temperature,
                          max_completion_length=cfg.max_completion_length, beta=cfg.grpo_beta,
                          **common)
    if kind == "proposer-grpo":
        return train_proposer_grpo(ctx, base=base, rows=rows, **common)
    if kind == "dpo":
        from models.dpo import train_dpo

        return train_dpo(base=base, rows=rows, learning_rate=cfg.dpo_learning_rate,
                         batch_size=cfg.batch_size, max_length=cfg.max_length, beta=cfg.dpo_beta,
                         **common)
    from models.trainer import train_sft

    return train_sft(base=base, rows=rows, learning_rate=cfg.warmup_learning_rate if warmup else cfg.learning_rate,
                     batch_size=cfg.batch_size, max_length=cfg.max_length, **common)


def train_proposer_grpo(ctx: RunContext, *, base: Path, rows: list[dict[str, Any]], incumbent: Path,
                        **common: Any) -> TrainResult:
    """The proposer's GRPO pass: its reward is the online pass rate of the incumbent solver on each
    proposed problem through `curate.proposer_reward` (tasks/curriculum/online.py)."""
    from tasks.curriculum.online import online_proposer_reward
    from models.backends import SamplingParams, backend_for
    from models.grpo import train_grpo

    cfg, rollout = ctx.config.train, ctx.config.rollout
    solver = backend_for(rollout, incumbent)

    def solve(prompts: list[str], n: int, seed: int) -> list[list[str]]:
        params = SamplingParams(n=n, temperature=rollout.temperature, max_new_tokens=rollout.max_new_tokens,
                                seed=seed)
        return [[c.text for c in group] for group in solver.generate(prompts, params)]

    reward = online_proposer_reward(ctx.domain, solve, ctx.config.curate, samples=cfg.proposer_samples,
                                    seed=common["seed"], labels=ctx.config.verify.labels)
    try:
        return train_grpo(base=base, rows=rows, reward=reward, learning_rate=cfg.grpo_learning_rate,
                          batch_size=cfg.batch_size, num_generations=cfg.num_generations,
                          temperature=cfg.grpo_temperature,
                          max_completion_length=ctx.config.synthesize.max_new_tokens, beta=cfg.grpo_beta,
                          **{**common, "max_steps": cfg.proposer_max_steps})
    finally:
        solver.close()


def plan_passes(algorithm: str, proposer_algorithm: str, rows: list[dict[str, Any]], round_index: int
                ) -> list[tuple[str, list[dict[str, Any]]]]:
    """The trainer passes of one train stage, in order: (kind, rows), empty passes left out.

    The algorithm's own pass first, then the rows it does not take in a weighted SFT pass. With
    proposer GRPO a `proposer-grpo` pass comes between them: it takes the prompts of every
    proposer row, and the proposer rows leave the other passes, except that under SFT the
    replayed proposer rows of earlier rounds stay in the solver's pass, as its replayed rows do:
    without them 800 SFT steps on solver rows make the model forget how to write a problem at
    all (measured: 3469 of 4096 proposals empty one round later; GRPO cannot recover from
    rewards that are all 0). Under GRPO or DPO they would form an SFT pass of their own at the
    SFT learning rate, which cost the solver held-out accuracy (0.040 -> 0.015 and 0.060 -> 0.020
    on the absolute-zero and r-zero presets at full size), so there they go to GRPO only.
    """
    proposer = [r for r in rows if r["role"] == "proposer"] if proposer_algorithm == "grpo" else []

    def anchor(row: dict[str, Any]) -> bool:
        return algorithm == "sft" and row["round"] != round_index

    kept = [r for r in rows if r["role"] != "proposer" or anchor(r)] if proposer else rows
    takes, rest = split_for(algorithm, kept)
    passes = [(algorithm, takes), ("proposer-grpo", proposer), ("sft", rest)]
    return [(kind, part) for kind, part in passes if any(r["weight"] > 0 for r in part)] or [("sft", rows)]


@task(name="train", cache_policy=NONE, persist_result=False, **TRANSIENT)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
          earlier: list[StageOutput]) -> Checkpoint:
    from models.trainer import planned_steps

    cfg = ctx.config.train
    warmup = round_index == 0
    algorithm = "sft" if warmup else cfg.algorithm

    def compute(fingerprint: str) -> StageResult:
        seed = ctx.stage_seed("train", round_index)
        rows = with_replay(read_rows(curated.path("train_rows")),
                           [read_rows(o.path("train_rows")) for o in earlier],
                           ratio=cfg.replay_ratio, seed=seed, proposer_rows=cfg.replay_proposer_rows)
        # The scratch folder belongs to this fingerprint and survives a crash: training resumes
        # from its last trainer checkpoint (see resumable_training).
        scratch = round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"
        epochs = cfg.warmup_epochs if warmup else cfg.epochs
        max_steps = cfg.warmup_max_steps if warmup else cfg.max_steps
        passes = plan_passes(algorithm, "sft" if warmup else cfg.proposer_algorithm, rows, round_index)
        per_step = {"grpo": cfg.num_generations, "proposer-grpo": cfg.num_generations}  # completions
        cap = {"proposer-grpo": cfg.proposer_max_steps}
        steps = sum(planned_steps(sum(r["weight"] > 0 for r in part) * per_step.get(kind, 1),
                                  epochs=epochs, batch_size=cfg.batch_size, max_steps=cap.get(kind, max_steps))
                    for kind, part in passes)
        label = f"round {round_index} train"

        def attempt(accumulation: int) -> list[TrainResult]:
            resume_from = resumable_training(scratch, accumulation, label)
            results = []
            with progress_bar(label, steps) as advance:
                def on_step(step: int, total: int, loss: float | None) -> None:
                    advance(1, "" if loss is None else f"loss {loss:.3f}")
                    pause_point(f"train:{round_index}:step-{step}")

                base = incumbent.path
                for index, (kind, part) in enumerate(passes):
                    last = index == len(passes) - 1
                    out = scratch / ("model" if last else f"model-{kind}")
                    if not last and out.exists():  # finished before a crash; renamed in complete
                        base = out
                        continue
                    temp = out if last else scratch / f".model-{kind}.tmp"
                    results.append(train_pass(
                        ctx, kind, base=base, rows=part, out_dir=temp, warmup=warmup,
                        **({"incumbent": incumbent.path} if kind == "proposer-grpo" else {}),
                        epochs=epochs, max_steps=max_steps, seed=seed,
                        work_dir=scratch / ("trainer" if index == 0 else f"trainer-{kind}"),
                        progress=on_step, save_steps=cfg.save_steps if index == 0 else 0,
                        gradient_accumulation_steps=accumulation,
                        resume_from=resume_from if index == 0 else None))
                    if not last:
                        temp.rename(out)
                    base = out
            return results

        accumulation = recorded_accumulation(scratch)
        try:
            results = attempt(accumulation)
        except Exception as exc:
            if not (is_out_of_memory(exc) and cfg.oom_retry_batch_size and accumulation == 1):
                raise
            accumulation = cfg.batch_size // cfg.oom_retry_batch_size
            notice(f"flywheel: {label}: out of memory at batch {cfg.batch_size}; retrying from "
                   f"step 0 with batch {cfg.oom_retry_batch_size} x {accumulation} accumulation steps")
            shutil.rmtree(scratch, ignore_errors=True)
            results = attempt(accumulation)
        main = results[0]
        kinds = [kind for kind, _ in passes]
        rewards = list(main.rewards) if kinds[0] == "grpo" else []
        proposer = results[kinds.index("proposer-grpo")].rewards if "proposer-grpo" in kinds else ()
        return StageResult(
            checkpoint=scratch / "model", checkpoint_rows=len(rows),
            metrics={"steps": sum(r.steps for r in results), "final_loss": main.final_loss or 0.0,
                     "trained_tokens": sum(r.trained_tokens for r in results),
                     "train_rows": len(rows),
                     "replayed_rows": sum(r["round"] != round_index for r in rows),
                     "gradient_accumulation_steps": accumulation,
                     **({f"{passes[0][0]}_rows": len(passes[0][1])} if len(passes) > 1 else {}),
                     **({"sft_pass_rows": len(passes[-1][1]), "sft_pass_steps": results[-1].steps}
                        if len(passes) > 1 and kinds[-1] == "sft" else {}),
                     **({"proposer_grpo_rows": len(passes[kinds.index("proposer-grpo")][1]),
                         "proposer_grpo_steps": results[kinds.index("proposer-grpo")].steps}
                        if "proposer-grpo" in kinds else {}),
                     **quarters("grpo_reward", rewards), **quarters("proposer_reward", proposer)},
        )

    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config={"train": fingerprinted_settings(ctx.config.slice("train")["train"], warmup=warmup),
                "warmup": warmup},
        inputs={"checkpoint": incumbent.fingerprint, "train_rows": curated.fingerprint,
                **{f"replay_round_{o.round}": o.fingerprint for o in earlier}},
        compute=compute,
    )
    shutil.rmtree(round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{out.fingerprint[:12]}",
                  ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint), fingerprint=out.fingerprint)
