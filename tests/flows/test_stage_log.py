"""Every stage logs a line when it starts and when it ends (tasks/stage.py): round, stage,
duration and rows per dataset kind, `reused` when its output already existed. The handlers
stamp each line (tests/flows/test_log_lines.py)."""

from __future__ import annotations

import logging
import re

import pytest

from configs import GatesConfig, RunConfig
from configs.settings import StageSettings
from tasks.context import RunContext
from tasks.stage import StageResult, run_stage
from tests.validators.test_gate import make_round


class Knob(StageSettings):
    """A stage's settings in these tests: one field."""

    k: int = 0


@pytest.fixture(scope="module")
def rollouts():
    return make_round(1, seed=1)["rollouts"]


def _stage(tmp_path, compute):
    ctx = RunContext(data_root=tmp_path, run_id="log", config=RunConfig(
        gates=GatesConfig(enabled=False)))
    ctx.catalog.ensure_run("log", "{}")
    return run_stage(ctx, stage="rollout", version=1, round_index=1, settings=Knob(), inputs={},
                     compute=compute)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flywheel"]


def test_a_computed_stage_logs_start_and_end_with_time_duration_and_rows(tmp_path, caplog,
                                                                          rollouts):
    caplog.set_level(logging.INFO, logger="flywheel")
    out = _stage(tmp_path, lambda fp: StageResult(datasets={"rollouts": rollouts}))
    started, ended = _lines(caplog)
    assert re.fullmatch(rf"round 1 rollout: started \(fingerprint {out.fingerprint[:12]}\)",
                        started), started
    assert re.fullmatch(rf"round 1 rollout: completed in \d+\.\d s; "
                        rf"rows rollouts={len(rollouts)}", ended), ended


def test_a_stage_found_done_logs_reused_with_its_recorded_rows(tmp_path, caplog, rollouts):
    calls = []

    def compute(fp):
        calls.append(fp)
        return StageResult(datasets={"rollouts": rollouts})

    _stage(tmp_path, compute)
    caplog.set_level(logging.INFO, logger="flywheel")
    caplog.clear()
    out = _stage(tmp_path, compute)
    assert out.skipped and len(calls) == 1
    (line,) = _lines(caplog)
    assert re.fullmatch(rf"round 1 rollout: reused \(fingerprint {out.fingerprint[:12]}\); "
                        rf"rows rollouts={len(rollouts)}", line), line


def test_a_failing_stage_logs_its_failure_and_duration(tmp_path, caplog):
    def compute(fp):
        raise RuntimeError("the sampler broke")

    caplog.set_level(logging.INFO, logger="flywheel")
    with pytest.raises(RuntimeError):
        _stage(tmp_path, compute)
    started, ended = _lines(caplog)
    assert "started" in started
    assert re.fullmatch(r"round 1 rollout: failed after \d+\.\d s: "
                        "RuntimeError: the sampler broke", ended), ended


def test_evaluation_reports_its_progress_off_a_terminal(tmp_path, caplog):
    from models.tiny import build_tiny_model
    from tasks.context import Checkpoint
    from tasks.evaluate import evaluate

    model = build_tiny_model(tmp_path / "model", hidden_size=32, num_layers=1, head_dim=8,
                             intermediate_size=64, init_seed=0)
    config = RunConfig.model_validate({"gates": {"enabled": False},
                                       "domain": {"heldout_per_level": 2},
                                       "evaluate": {"max_new_tokens": 2}})
    ctx = RunContext(data_root=tmp_path / "data", run_id="log", config=config)
    ctx.catalog.ensure_run("log", "{}")
    caplog.set_level(logging.INFO, logger="flywheel")
    result = evaluate.fn(ctx, 1, Checkpoint(model, "m"))
    items = len(ctx.domain.heldout(2))
    assert re.fullmatch(rf"round 1 evaluate: {items}/{items} \(100%\), "
                        r"([\d.]+ answers/s|[\d.]+ s/answer), took .+",
                        [line for line in _lines(caplog) if "(100%)" in line][-1])
    assert 0.0 <= result["accuracy"] <= 1.0
