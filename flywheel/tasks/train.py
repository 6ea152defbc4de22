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
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NONE

from flywheel.storage.datasets import read_rows, round_dir
from flywheel.storage.recovery import Discarded, notice, pause_point, remove
from flywheel.tasks.context import Checkpoint, RunContext
from flywheel.tasks.progress import progress_bar
from flywheel.tasks.retry import TRANSIENT
from flywheel.tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

if TYPE_CHECKING:
    from flywheel.models.trainer import TrainResult

VERSION = 1
# Train settings that change how training runs, not what it computes; left out of the
# fingerprint so that changing them (say, after an out-of-memory crash) keeps finished work.
OPERATIONAL_KEYS = ("save_steps", "oom_retry_batch_size")
PLAN_FILE = "plan.json"


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
    from flywheel.models.trainer import last_checkpoint

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


def with_replay(rows: list[dict[str, Any]], earlier: list[list[dict[str, Any]]], *, ratio: float,
                seed: int) -> list[dict[str, Any]]:
    """This round's rows plus `ratio * len(rows)` rows sampled evenly from earlier rounds."""
    pool = [row for rows_of_round in earlier for row in rows_of_round]
    count = min(len(pool), round(ratio * len(rows)))
    return rows + random.Random(seed).sample(pool, count)


@task(name="train", cache_policy=NONE, persist_result=False, **TRANSIENT)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput,
          earlier: list[StageOutput]) -> Checkpoint:
    from flywheel.models.trainer import planned_steps, train_sft

    cfg = ctx.config.train
    warmup = round_index == 0

    def compute(fingerprint: str) -> StageResult:
        seed = ctx.stage_seed("train", round_index)
        rows = with_replay(read_rows(curated.path("train_rows")),
                           [read_rows(o.path("train_rows")) for o in earlier],
                           ratio=cfg.replay_ratio, seed=seed)
        # The scratch folder belongs to this fingerprint and survives a crash: training resumes
        # from its last trainer checkpoint (see resumable_training).
        scratch = round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"
        epochs = cfg.warmup_epochs if warmup else cfg.epochs
        max_steps = cfg.warmup_max_steps if warmup else cfg.max_steps
        steps = planned_steps(sum(r["weight"] > 0 for r in rows), epochs=epochs,
                              batch_size=cfg.batch_size, max_steps=max_steps)
        label = f"round {round_index} train"

        def attempt(accumulation: int) -> TrainResult:
            resume_from = resumable_training(scratch, accumulation, label)
            with progress_bar(label, steps) as advance:
                def on_step(step: int, total: int, loss: float | None) -> None:
                    advance(1, "" if loss is None else f"loss {loss:.3f}")
                    pause_point(f"train:{round_index}:step-{step}")

                return train_sft(
                    base=incumbent.path, rows=rows, out_dir=scratch / "model",
                    learning_rate=cfg.warmup_learning_rate if warmup else cfg.learning_rate,
                    batch_size=cfg.batch_size, epochs=epochs, max_steps=max_steps,
                    max_length=cfg.max_length, seed=seed, work_dir=scratch / "trainer",
                    progress=on_step, save_steps=cfg.save_steps,
                    gradient_accumulation_steps=accumulation, resume_from=resume_from,
                )

        accumulation = recorded_accumulation(scratch)
        try:
            result = attempt(accumulation)
        except Exception as exc:
            if not (is_out_of_memory(exc) and cfg.oom_retry_batch_size and accumulation == 1):
                raise
            accumulation = cfg.batch_size // cfg.oom_retry_batch_size
            notice(f"flywheel: {label}: out of memory at batch {cfg.batch_size}; retrying from "
                   f"step 0 with batch {cfg.oom_retry_batch_size} x {accumulation} accumulation steps")
            shutil.rmtree(scratch, ignore_errors=True)
            result = attempt(accumulation)
        return StageResult(
            checkpoint=scratch / "model", checkpoint_rows=len(rows),
            metrics={"steps": result.steps, "final_loss": result.final_loss or 0.0,
                     "trained_tokens": result.trained_tokens, "train_rows": len(rows),
                     "replayed_rows": sum(r["round"] != round_index for r in rows),
                     "gradient_accumulation_steps": accumulation},
        )

    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config={"train": {key: value for key, value in ctx.config.slice("train")["train"].items()
                          if key not in OPERATIONAL_KEYS}, "warmup": warmup},
        inputs={"checkpoint": incumbent.fingerprint, "train_rows": curated.fingerprint,
                **{f"replay_round_{o.round}": o.fingerprint for o in earlier}},
        compute=compute,
    )
    shutil.rmtree(round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{out.fingerprint[:12]}",
                  ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint), fingerprint=out.fingerprint)
