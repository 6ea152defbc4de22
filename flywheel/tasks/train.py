"""Train: fine-tune the incumbent on the round's training rows; the output is a checkpoint.

Training only on the edge of the model's ability makes it forget what it already solves (the
easy problems are dropped as too_easy). Like ReST-EM, which trains on the data of every
iteration so far, each round also replays rows of earlier rounds: `replay_ratio` replayed rows
per new row, drawn evenly (seeded) from all earlier rounds' `train_rows`. Replayed rows keep
their own ids and round, so lineage still leads back to where they were made.
"""

from __future__ import annotations

import shutil

from prefect import task
from prefect.cache_policies import NONE

import random
from typing import Any

from flywheel.storage.datasets import read_rows, round_dir
from flywheel.tasks.context import Checkpoint, RunContext
from flywheel.tasks.progress import progress_bar
from flywheel.tasks.stage import StageOutput, StageResult, checkpoint_dir, run_stage

VERSION = 1


def with_replay(rows: list[dict[str, Any]], earlier: list[list[dict[str, Any]]], *, ratio: float,
                seed: int) -> list[dict[str, Any]]:
    """This round's rows plus `ratio * len(rows)` rows sampled evenly from earlier rounds."""
    pool = [row for rows_of_round in earlier for row in rows_of_round]
    count = min(len(pool), round(ratio * len(rows)))
    return rows + random.Random(seed).sample(pool, count)


@task(name="train", cache_policy=NONE, persist_result=False)
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
        scratch = round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{fingerprint[:12]}"
        shutil.rmtree(scratch, ignore_errors=True)
        epochs = cfg.warmup_epochs if warmup else cfg.epochs
        max_steps = cfg.warmup_max_steps if warmup else cfg.max_steps
        steps = planned_steps(sum(r["weight"] > 0 for r in rows), epochs=epochs,
                              batch_size=cfg.batch_size, max_steps=max_steps)
        with progress_bar(f"round {round_index} train", steps) as advance:
            result = train_sft(
                base=incumbent.path, rows=rows, out_dir=scratch / "model",
                learning_rate=cfg.warmup_learning_rate if warmup else cfg.learning_rate,
                batch_size=cfg.batch_size, epochs=epochs, max_steps=max_steps,
                max_length=cfg.max_length, seed=seed,
                work_dir=scratch / "trainer",
                progress=lambda step, total, loss: advance(1, "" if loss is None else f"loss {loss:.3f}"),
            )
        return StageResult(
            checkpoint=scratch / "model", checkpoint_rows=len(rows),
            metrics={"steps": result.steps, "final_loss": result.final_loss or 0.0,
                     "trained_tokens": result.trained_tokens, "train_rows": len(rows),
                     "replayed_rows": sum(r["round"] != round_index for r in rows)},
        )

    out = run_stage(
        ctx, stage="train", version=VERSION, round_index=round_index,
        config={**ctx.config.slice("train"), "warmup": warmup},
        inputs={"checkpoint": incumbent.fingerprint, "train_rows": curated.fingerprint,
                **{f"replay_round_{o.round}": o.fingerprint for o in earlier}},
        compute=compute,
    )
    shutil.rmtree(round_dir(ctx.data_root, ctx.run_id, round_index) / f".train-{out.fingerprint[:12]}",
                  ignore_errors=True)
    return Checkpoint(path=checkpoint_dir(ctx, round_index, out.fingerprint), fingerprint=out.fingerprint)
