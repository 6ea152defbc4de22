"""Verify: score every rollout with the domain verifier.

`reward` is in [0, 1], or null when the verifier cannot judge (no reference); nulls are kept
and counted, never silently turned into 0. `method` says how the reward was obtained.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from flywheel.domains.base import Domain
from flywheel.storage.datasets import read_rows
from flywheel.tasks.context import RunContext
from flywheel.tasks.stage import StageOutput, StageResult, run_stage

VERSION = 1


def verdict_rows(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reference = {p["problem_id"]: p["reference"] for p in problems}
    refs = [reference[r["problem_id"]] for r in rollouts]
    scores = domain.score([r["completion"] for r in rollouts], refs)
    return [
        {"rollout_id": r["rollout_id"], "run_id": r["run_id"], "round": r["round"],
         "problem_id": r["problem_id"], "answer": domain.extract(r["completion"]),
         "reward": score, "method": "reference" if ref is not None else "none"}
        for r, ref, score in zip(rollouts, refs, scores, strict=True)
    ]


@task(name="verify", cache_policy=NONE, persist_result=False)
def verify(ctx: RunContext, round_index: int, problems: StageOutput, rollouts: StageOutput) -> StageOutput:
    def compute(fingerprint: str) -> StageResult:
        rows = verdict_rows(ctx.domain, read_rows(rollouts.path("rollouts")), read_rows(problems.path("problems")))
        judged = [r["reward"] for r in rows if r["reward"] is not None]
        return StageResult(
            datasets={"verdicts": rows},
            metrics={"verdicts": len(rows), "unjudged": len(rows) - len(judged),
                     "mean_reward": sum(judged) / len(judged) if judged else 0.0},
        )

    return run_stage(
        ctx, stage="verify", version=VERSION, round_index=round_index, config={"domain": ctx.domain.name},
        inputs={"problems": problems.fingerprint, "rollouts": rollouts.fingerprint}, compute=compute,
    )
