"""The exit-status table (flows/exit_codes.py): each outcome of a real tiny run through the CLI
gives its documented status, and `flywheel status` of the stopped run exits as the run did,
its first line naming the stage, the error and the resume command.

    outcome          command    exit   how it is caused
    gate failed      run        1      gates.min_rows above the baseline's held-out rows
    validate failed  validate   5      the same strict threshold, re-checked on stored data
    stage crashed    run        4      the base model's builder raises ENOSPC
    locked           run        3      another holder of the run's lock
    unknown run      status     2      a run id the catalog does not have
    interrupted      status     130    a run recorded running whose lock has no live holder
"""

from __future__ import annotations

import errno
import time

import pytest
from typer.testing import CliRunner

from flows import exit_codes
from storage.catalog import Catalog

TINY = """
rounds = 0
[domain]
seed_problems = 40
min_level = 1
max_level = 2
heldout_per_level = 3
"""


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """invoke(*args) -> (exit status, output) of `flywheel ARGS --data-root DATA`, in-process."""
    for key, value in {"PREFECT_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1",
                       "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error",
                       "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}.items():
        monkeypatch.setenv(key, value)  # the CLI sets them with setdefault: undone afterwards
    from flows.cli import app

    def invoke(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, [*args, "--data-root", str(tmp_path / "data")])
        return result.exit_code, result.output

    return invoke


def _config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "run.toml"
    path.write_text(TINY + extra)
    return str(path)


def test_gate_failure_exits_1_and_validate_of_its_data_exits_5(tmp_path, cli, prefect_server):
    strict = _config(tmp_path, "[gates]\nmin_rows = 1000\n")
    code, output = cli("run", "--config", strict, "--run-id", "g")
    assert code == exit_codes.GATE_FAILED == 1, output
    assert "failed its data gate" in output and "Traceback" not in output

    code, output = cli("validate", "g")
    assert code == exit_codes.VALIDATE_FAILED == 5, output
    assert "expect_table_row_count_to_be_between" in output

    code, output = cli("status", "g")
    assert code == exit_codes.GATE_FAILED, output
    first = output.splitlines()[0]
    assert first.startswith("run g: gate failed at stage baseline (round 0): ")
    assert "min_rows" in first or "row_count" in first, first
    assert "`flywheel resume g --config FILE`" in first


def test_stage_crash_exits_4_and_status_names_stage_error_and_resume(tmp_path, cli,
                                                                     prefect_server, monkeypatch):
    import models.tiny

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(models.tiny, "build_tiny_model", full_disk)
    code, output = cli("run", "--config", _config(tmp_path), "--run-id", "crash")
    assert code == exit_codes.STAGE_FAILED == 4, output
    assert "stage base (round 0) failed: the disk is full" in output

    code, output = cli("status", "crash")
    assert code == exit_codes.STAGE_FAILED, output
    first = output.splitlines()[0]
    assert first.startswith("run crash: failed at stage base (round 0): OSError: ")
    assert "No space left on device" in first and "traceback in " in first
    assert "`flywheel resume crash` continues" in first

    code, output = cli("status", "crash", "--json")
    assert code == exit_codes.STAGE_FAILED and '"exit_status": 4' in output


def test_a_locked_run_exits_3_and_an_unknown_run_exits_2(tmp_path, cli):
    from storage.lock import RunLock

    with RunLock(tmp_path / "data", "busy", command="flywheel run --run-id busy"):
        code, output = cli("run", "--config", _config(tmp_path), "--run-id", "busy")
    assert code == exit_codes.LOCKED == 3, output
    assert "busy" in output and "Traceback" not in output

    Catalog(tmp_path / "data").ensure_run("other", "{}")
    for command in (["status", "nope"], ["resume", "nope"], ["validate", "nope"]):
        code, output = cli(*command)
        assert code == exit_codes.USER_ERROR == 2, (command, output)
        assert "unknown run id 'nope'" in output, (command, output)


@pytest.mark.parametrize(
    ("recorded", "stage_error", "code", "first_line"),
    [
        ("completed", None, 0, "run r: completed"),
        ("running", "tasks.interruption.Interrupted: SIGINT", 130,
         "run r: interrupted during rollout (round 2); `flywheel resume r` continues"),
        ("running", None, 130, "run r: interrupted between stages; `flywheel resume r`"),
        ("interrupted", "tasks.interruption.Interrupted: SIGTERM", 130,
         "run r: interrupted during rollout (round 2)"),
        ("failed", "RuntimeError: CUDA error:\n  device-side assert", 4,
         "run r: failed at stage rollout (round 2): RuntimeError: CUDA error: device-side "
         "assert; no log file; `flywheel resume r` continues once the cause is fixed"),
    ],
)
def test_status_exit_follows_how_the_run_stopped(tmp_path, cli, recorded, stage_error, code,
                                                 first_line):
    catalog = Catalog(tmp_path / "data")
    catalog.ensure_run("r", "{}")
    catalog.record_completed(run_id="r", round_index=2, stage="synthesize", fingerprint="a" * 32,
                             started_at=time.time(), outputs=[], inputs={})
    if stage_error is not None:
        catalog.record_failed(run_id="r", round_index=2, stage="rollout", fingerprint="b" * 32,
                              started_at=time.time(), error=stage_error)
    if recorded != "running":
        catalog.set_run_status("r", recorded)
    status, output = cli("status", "r")
    assert status == code, output
    assert output.splitlines()[0].startswith(first_line), output
