"""Train: fine-tune the incumbent on the round's training rows; the output is a checkpoint."""

from __future__ import annotations

import shutil

from prefect import task
from prefect.cache_policies import NONE

from flywheel.storage.datasets import read_rows, round_dir
from flywheel.tasks.context import Checkpoint, RunContext
from flywheel.tasks.progress import progress_bar
from flywheel.tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

VERSION = 1


@task(name="train", cache_policy=NONE, persist_result=False)
def train(ctx: RunContext, round_index: int, incumbent: Checkpoint, curated: StageOutput) -> Checkpoint:
    from flywheel.models.trainer import planned_steps, train_sft

    cfg = ctx.config.train
    warmup = round_index == 0

    def compute(fingerprint: str) -> StageResult:
        rows = read_rows(curated.path("train_rows"))
        scratch = round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"
        shutil.rmtree(scratch, ignore_errors=True)
        epochs = cfg.warmup_epochs if warmup else cfg.epochs
        steps = planned_steps(sum(r["weight"] > 0 for r in rows), epochs=epochs,
                              batch_size=cfg.batch_size, max_steps=cfg.max_steps_per_round)
        with progress_bar(f"round {round_index} train", steps) as advance:
            result = train_sft(
                base=incumbent.path, rows=rows, out_dir=scratch / "model",
                learning_rate=cfg.warmup_learning_rate if warmup else cfg.learning_rate,
                batch_size=cfg.batch_size, epochs=epochs, max_steps=cfg.max_steps_per_round,
                max_length=cfg.max_length, seed=ctx.stage_seed("train", round_index),
                work_dir=scratch / "trainer",
                progress=lambda step, total, loss: advance(1, "" if loss is None else f"loss {loss:.3f}"),
            )
        return StageResult(
            checkpoint=scratch / "model", checkpoint_rows=len(rows),
            metrics={"steps": result.steps, "final_loss": result.final_loss or 0.0,
                     "trained_tokens": result.trained_tokens, "train_rows": len(rows)},
        )

    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config={**ctx.config.slice("train"), "warmup": warmup},
        inputs={"checkpoint": incumbent.fingerprint, "train_rows": curated.fingerprint},
        compute=compute,
    )
    shutil.rmtree(round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{out.fingerprint[:12]}",
                  ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint), fingerprint=out.fingerprint)
