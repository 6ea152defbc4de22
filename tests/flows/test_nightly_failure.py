"""A failed night: its Prefect logs carry the `flywheel resume` hint, the catalog marks the failed
stage, and the next night finishes that round (done stages skipped) before any new round.

In-process on the session's Prefect server; the fault is injected by monkeypatching the rollout
of round 1 (a ValueError, so the task's transient-error retries do not apply).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from configs import load_config
from flows.nightly import nightly_round
from schedules.deployments import deployment_parameters
from storage.catalog import Catalog

CONFIG = Path(__file__).resolve().parents[1] / "schedules" / "nightly.toml"
FAULT = "injected fault: rollout backend lost"


def _api_logs(flow_run_id) -> list[str]:
    """The flow run's log messages as stored by the Prefect server (after a flush)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # drains the queued logs to the API, blocking
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [log.message for log in logs]


def _logged(flow_run_id, needle: str) -> str:
    """The first log message of the flow run containing `needle` (logs reach the API in batches)."""
    deadline = time.monotonic() + 20
    while True:
        messages = _api_logs(flow_run_id)
        found = [m for m in messages if needle in m]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            pytest.fail(f"{needle!r} not in the flow run's Prefect logs: {messages}")
        time.sleep(0.5)


def _stages(catalog: Catalog, run_id: str) -> list[tuple]:
    return [(r["round"], r["stage"], r["fingerprint"], r["status"]) for r in catalog.query(
        "SELECT round, stage, fingerprint, status FROM stages WHERE run_id = ? ORDER BY started_at",
        [run_id])]


def test_failed_night_leaves_resume_hint_and_next_night_finishes_its_round(tmp_path, prefect_server,
                                                                          monkeypatch):
    from tasks import rollout as rollout_module

    cfg = load_config(CONFIG, {"train.warmup.max_steps": 10, "train.max_steps": 5,
                               "domain.heldout_per_level": 2})  # a smaller night: seconds
    run_id, data_root = cfg.schedule.run_id, tmp_path / "data"
    params = deployment_parameters(data_root, cfg)
    real = rollout_module.rollout_rows

    def broken(*args, round_index, **kwargs):
        if round_index == 1:
            raise ValueError(FAULT)
        return real(*args, round_index=round_index, **kwargs)

    monkeypatch.setattr(rollout_module, "rollout_rows", broken)
    first = nightly_round(**params, return_state=True)
    assert first.is_failed(), first

    # The Prefect logs of the failed night name the command that resumes it.
    hint = f"flywheel resume {run_id} --data-root {data_root.resolve()}"
    failed_line = _logged(first.state_details.flow_run_id, hint)
    assert "round 1" in failed_line and FAULT in failed_line

    # The catalog marks the failed stage (with its error) and the run.
    catalog = Catalog(data_root)
    failed = catalog.query("SELECT round, stage, error FROM stages"
                           " WHERE run_id = ? AND status = 'failed'", [run_id])
    assert [(r["round"], r["stage"]) for r in failed] == [(1, "rollout")]
    assert FAULT in failed[0]["error"]
    assert (catalog.query("SELECT status FROM runs WHERE run_id = ?", [run_id])[0]["status"]
            == "failed")
    assert catalog.last_decided_round(run_id) == 0
    done_before = {s for s in _stages(catalog, run_id) if s[3] == "completed"}

    # The next night (fault gone) finishes round 1 first; nothing done is recomputed.
    monkeypatch.setattr(rollout_module, "rollout_rows", real)
    second = nightly_round(**params, return_state=True)
    assert second.is_completed(), second
    assert second.result() == {"run_id": run_id, "round": 1}
    _logged(second.state_details.flow_run_id, "failed last time; finishing it first")
    stages = _stages(catalog, run_id)
    new = [s for s in stages if s not in done_before and s[3] != "failed"]
    assert {s[:2] for s in new} >= {(1, "rollout"), (1, "verify"), (1, "curate"), (1, "promote")}
    assert all(rnd == 1 for rnd, *_ in new), "round 0 was skipped"
    assert (1, "synthesize") not in {s[:2] for s in new}, "round 1's synthesize was skipped"
    assert max(s[0] for s in stages) == 1, "no new round before the failed one was finished"
    assert catalog.last_decided_round(run_id) == 1
    assert (catalog.query("SELECT status FROM runs WHERE run_id = ?", [run_id])[0]["status"]
            == "completed")
