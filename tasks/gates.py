"""Data-quality gates inside the stage runner (`run_stage`).

    compute -> write datasets -> gate each dataset -> completed row          (all passed)
                                                   -> gate_failed row, GateFailed raised

A stage whose gate failed keeps its files and its `datasets` rows (for audit; `flywheel
validate` re-checks them); its stage row says `gate_failed` and each gate run is a row of the
catalog's `gates` table with the result JSON. Nothing downstream runs: `GateFailed` propagates
through the flow and is never retried. Gate thresholds are not part of any fingerprint, so after
fixing them `flywheel resume RUN_ID --config F` finds the same fingerprint recorded as
`gate_failed` with intact files and gates them again (`regate_stored`) instead of recomputing.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from storage.catalog.gates import GateRow
from storage.datasets import SCHEMAS
from storage.recovery import check_recorded
from tasks.context import RunContext
from validators.gate import BASELINE_KINDS, GateFailed, GateResult, run_gate

log = logging.getLogger("flywheel")


def gate_outputs(ctx: RunContext, *, stage: str, round_index: int,
                 paths: dict[str, Path]) -> list[GateResult]:
    """Run the gate of every Parquet output (checkpoints have none); the caller records them
    with the stage's row (`gate_rows`)."""
    gates = ctx.config.gates
    if not gates.enabled:
        return []
    results = []
    for kind, path in paths.items():
        if kind not in SCHEMAS:
            continue
        previous = (ctx.catalog.latest_dataset(ctx.run_id, round_index - 1, kind)
                    if round_index and kind in BASELINE_KINDS else None)
        result = run_gate(path, kind, gates, run_id=ctx.run_id, round_index=round_index,
                          stage=stage, previous_path=previous)
        log.info("round %d %s: gate %s on %s (%d expectations, %.2f s)", round_index, stage,
                 "passed" if result.success else "FAILED", kind, result.evaluated, result.seconds)
        results.append(result)
    return results


def gate_rows(results: list[GateResult]) -> list[GateRow]:
    """The `gates` rows of gate runs: (kind, passed, the result as JSON), recorded in the same
    transaction as the stage row they decide (storage/catalog/gates.py `insert_gates`)."""
    return [(r.kind, r.success, json.dumps(r.to_json(), default=str)) for r in results]


def failed_gate(stage: str, round_index: int, results: list[GateResult]) -> GateFailed | None:
    return GateFailed(stage, round_index, results) if any(not r.success for r in results) else None


def regate_stored(ctx: RunContext, *, stage: str, round_index: int, fingerprint: str,
                  recorded: dict[str, dict[str, Any]]) -> dict[str, Path] | None:
    """Gate again the intact outputs `recorded` of a stage recorded as gate_failed with this
    fingerprint (`Catalog.recorded_stage`).

    Returns their paths when they now pass (the stage is recorded completed), None when there
    is nothing to re-gate (no datasets, or files damaged: then the stage is recomputed), and
    raises GateFailed when they fail again.
    """
    if not recorded or check_recorded(recorded) is not None:
        return None
    started = time.time()
    paths = {kind: Path(info["path"]) for kind, info in recorded.items()}
    results = gate_outputs(ctx, stage=stage, round_index=round_index, paths=paths)
    failed = failed_gate(stage, round_index, results)
    if failed is not None:
        ctx.catalog.record_failed(run_id=ctx.run_id, round_index=round_index, stage=stage,
                                  fingerprint=fingerprint, started_at=started, error=str(failed),
                                  status="gate_failed", gates=gate_rows(results))
        raise failed
    ctx.catalog.record_gate_passed(run_id=ctx.run_id, round_index=round_index, stage=stage,
                                   fingerprint=fingerprint, started_at=started,
                                   gates=gate_rows(results))
    log.info("round %d %s: stored outputs pass their gates now (fingerprint %s), not recomputed",
             round_index, stage, fingerprint[:12])
    return paths
