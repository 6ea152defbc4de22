"""Promote: the candidate replaces the incumbent only if its held-out accuracy does not drop by
more than `promote.margin`; otherwise the round is recorded as rejected and the incumbent stays."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from flywheel.tasks.context import Checkpoint, RunContext
from flywheel.tasks.stage import StageResult, run_stage

VERSION = 1


def should_promote(candidate_accuracy: float, incumbent_accuracy: float, margin: float) -> bool:
    return candidate_accuracy >= incumbent_accuracy - margin


@task(name="promote", cache_policy=NONE, persist_result=False)
def promote(ctx: RunContext, round_index: int, incumbent: Checkpoint, candidate: Checkpoint,
            incumbent_accuracy: float, candidate_accuracy: float) -> Checkpoint:
    promoted = should_promote(candidate_accuracy, incumbent_accuracy, ctx.config.promote.margin)

    def compute(fingerprint: str) -> StageResult:
        ctx.catalog.record_round(
            run_id=ctx.run_id, round_index=round_index, incumbent=incumbent.fingerprint,
            candidate=candidate.fingerprint, incumbent_accuracy=incumbent_accuracy,
            candidate_accuracy=candidate_accuracy, promoted=promoted,
        )
        return StageResult(metrics={"promoted": float(promoted),
                                    "incumbent_accuracy": incumbent_accuracy,
                                    "candidate_accuracy": candidate_accuracy})

    run_stage(
        ctx, stage="promote", version=VERSION, round_index=round_index,
        config=ctx.config.slice("promote"),
        inputs={"incumbent": incumbent.fingerprint, "candidate": candidate.fingerprint,
                "incumbent_accuracy": repr(incumbent_accuracy), "candidate_accuracy": repr(candidate_accuracy)},
        compute=compute,
    )
    return candidate if promoted else incumbent
