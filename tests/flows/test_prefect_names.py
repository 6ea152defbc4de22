"""What the Prefect UI shows of a run (flows/run.py): flow runs named by the run id (and round),
task runs `<stage>-r<round>` listed under them, the `run:<run_id>` tag on the flow runs (the
task runs carry none: a tag costs an API call before each task starts), and the `flywheel`
logger's stage lines stored as the runs' logs; and the train stage's curve in the catalog."""

from __future__ import annotations

import pytest

from configs import validate_config

TINY = {"rounds": 0, "domain": {"seed_problems": 40, "min_level": 1, "max_level": 2,
                                "heldout_per_level": 3}}
RUN = "named-7"


@pytest.fixture(scope="module")
def prefect_view(tmp_path_factory, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterTags,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler

    from flows.run import RunSpec, run_flywheel

    data_root = tmp_path_factory.mktemp("data")
    config = validate_config(TINY, "the test's config")
    run_flywheel(RunSpec(data_root=str(data_root), run_id=RUN, config=config))
    APILogHandler().flush()  # the log worker sends in batches
    with get_client(sync_client=True) as client:
        flows = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[f"run:{RUN}"])))
        ids = [f.id for f in flows]
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids)),
                                limit=200)
    return flows, tasks, logs, data_root


@pytest.mark.slow
def test_flow_runs_are_named_by_run_id_and_round_and_tagged(prefect_view):
    flows, *_ = prefect_view
    assert sorted(f.name for f in flows) == [RUN, f"{RUN}-round-0"]
    assert all(f"run:{RUN}" in f.tags for f in flows)
    assert all(f.state.is_completed() for f in flows)


@pytest.mark.slow
def test_task_runs_are_named_stage_and_round_under_the_tagged_flow_runs(prefect_view):
    _, tasks, *_ = prefect_view
    names = {t.name for t in tasks}
    assert {"base-model-r0", "baseline-r0", "synthesize-r0", "rollout-r0", "verify-r0",
            "curate-r0", "train-r0", "evaluate-r0", "promote-r0"} <= names, names
    stages = [t for t in tasks if not t.name.startswith("flywheel-round")]  # not a subflow's
    assert stages and all(t.tags == [] for t in stages), [(t.name, t.tags) for t in stages]


@pytest.mark.slow
def test_stage_lines_of_the_flywheel_logger_are_stored_with_the_runs(prefect_view):
    _, tasks, logs, _ = prefect_view
    lines = [log.message for log in logs if log.name == "flywheel"]
    assert any(m.startswith("round 0 rollout: started (fingerprint ") for m in lines), lines
    assert any(m.startswith("round 0 train: completed in ") and "checkpoint=" in m
               for m in lines), lines
    rollout = next(t for t in tasks if t.name == "rollout-r0")
    assert any(log.task_run_id == rollout.id and "round 0 rollout: completed" in log.message
               for log in logs)


@pytest.mark.slow
def test_the_train_stage_records_its_curve_per_logged_step(prefect_view):
    from storage.catalog import Catalog

    *_, data_root = prefect_view
    metrics = {r["name"]: r["value"] for r in Catalog(data_root).query(
        "SELECT name, value FROM metrics WHERE run_id = ? AND stage = 'train' AND round = 0",
        [RUN])}
    steps = int(metrics["steps"])
    losses = {int(n.rsplit("/", 1)[1]): v for n, v in metrics.items()
              if n.startswith("curve/loss/")}
    assert sorted(losses) == list(range(10, steps + 1, 10)), (steps, sorted(losses))
    assert losses[max(losses)] == pytest.approx(metrics["final_loss"])
    for key in ("learning_rate", "grad_norm"):
        assert {int(n.rsplit("/", 1)[1]) for n in metrics if n.startswith(f"curve/{key}/")} \
            == set(losses), key
