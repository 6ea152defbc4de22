"""The operator's rough edges: a closed stdout ends every printing command quietly with 141
(never 1, a failed gate); a SIGTERM-ed run is `terminated` (143) in `status`, not `failed`; log
records go to stderr, results to stdout; `flywheel catalog snapshot` gives a copy of the catalog
that reads while another process writes, where opening the catalog itself fails. Catalogs are
written by hand (no model is trained)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import time
import traceback
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from configs import load_config
from flows import exit_codes
from flows.cli import _log_handler, app
from storage.catalog import Catalog
from storage.datasets import WrittenDataset
from storage.interruption import Interrupted, stop_status
from tests.storage.test_data_root_format import _old_root

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Run `a`, completed: its base model's checkpoint folder, the baseline's accuracy, and a
    `problems` file behind the catalog's view. The commands here only read its catalog."""
    root = tmp_path_factory.mktemp("edges")
    catalog = Catalog(root)
    catalog.ensure_run("a", load_config(None, {"rounds": 0}).model_dump_json())
    folder = root / "runs" / "a" / "round-000" / ("checkpoint-" + "b" * 12)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    problems = folder.parent / ("problems-" + "p" * 12 + ".parquet")
    pq.write_table(pa.table({"run_id": ["a"] * 3, "round": [0] * 3,
                             "problem_id": ["x", "y", "z"]}), problems)
    catalog.record_completed(run_id="a", round_index=0, stage="base", fingerprint="b" * 32,
                             started_at=time.time(), inputs={},
                             outputs=[WrittenDataset("checkpoint", folder, 1, "x")])
    catalog.record_completed(run_id="a", round_index=0, stage="synthesize", fingerprint="p" * 32,
                             started_at=time.time(), inputs={},
                             outputs=[WrittenDataset("problems", problems, 3, "x")])
    catalog.record_completed(run_id="a", round_index=0, stage="baseline", fingerprint="e" * 32,
                             started_at=time.time(), outputs=[], inputs={},
                             metrics={"accuracy": 0.1})
    catalog.set_run_status("a", "completed")
    return root


# ---- a closed stdout -------------------------------------------------------------------------

PRINTING = [["status", "a"], ["status", "a", "--json"], ["runs"], ["runs", "--json"],
            ["checkpoint", "a"], ["config", "show", "a"], ["config", "show", "a", "--format",
                                                          "json"],
            ["config", "diff", "a", "a"], ["audit", "a", "funnel"],
            ["audit", "a", "funnel", "--format", "json"], ["catalog", "snapshot"],
            ["schedule", "show", "--cron", "@daily"], ["--help"], ["--version"],
            ["status", "--help"]]
NO_DATA_ROOT = {"schedule", "--help", "--version"}  # commands that take no --data-root


@pytest.mark.parametrize("command", PRINTING, ids=" ".join)
def test_a_closed_stdout_ends_every_printing_command_quietly_with_141(root, command,
                                                                      monkeypatch):
    """In-process, as `flywheel ARGS | head -0` would: stdout is a pipe whose reader is gone
    (click's echo and rich's console both meet the broken pipe)."""
    reader, writer = os.pipe()
    os.close(reader)
    stdout = open(writer, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    data_root = [] if NO_DATA_ROOT & set(command) else ["--data-root", str(root)]
    with pytest.raises(SystemExit) as exited:
        app([*command, *data_root], prog_name="flywheel")
    stdout.close()  # the closed pipe now points at /dev/null: nothing raises here either
    stderr.flush()
    assert exited.value.code == exit_codes.OUTPUT_CLOSED == 141
    assert stderr.buffer.getvalue() == b""


@pytest.mark.parametrize("command", [["status", "a"], ["runs"]], ids=" ".join)
def test_a_real_closed_pipe_exits_141_with_nothing_on_stderr(root, command):
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run([sys.executable, "-m", "flows.cli", *command, "--data-root",
                               str(root)], stdout=writer, stderr=subprocess.PIPE, cwd=ROOT,
                              timeout=120, check=False)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, b"")


# ---- SIGTERM ---------------------------------------------------------------------------------


def _sigterm_inside_prefect() -> BaseException:
    """A real SIGTERM inside Prefect's flow engine's signal scope (`capture_sigterm`, as in a
    run): the exception the run's code sees. Prefect hands the signal on to the handler it
    replaced (flows/interrupts.py's in a run; here one that only counts it)."""
    from prefect.exceptions import TerminationSignal
    from prefect.utilities.engine import capture_sigterm

    handed_on: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: handed_on.append(signum))
    seen: list[BaseException] = []
    try:
        with pytest.raises(TerminationSignal), capture_sigterm():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
            except BaseException as exc:
                seen.append(exc)
                raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert handed_on == [signal.SIGTERM]
    return seen[0]


def _stopped_run(root: Path, run_id: str, exc: BaseException) -> None:
    """The catalog as a run stopped by `exc` inside its train stage leaves it: the stage row
    tasks/stage.py records, then the run status flows/run.py records."""
    catalog = Catalog(root)
    catalog.ensure_run(run_id, "{}")
    catalog.record_completed(run_id=run_id, round_index=1, stage="curate", fingerprint="c" * 32,
                             started_at=time.time(), outputs=[], inputs={})
    error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    catalog.record_failed(run_id=run_id, round_index=1, stage="train", fingerprint="t" * 32,
                          started_at=time.time(), error=error)
    catalog.set_run_status(run_id, stop_status(exc))


def test_a_sigterm_inside_prefect_makes_status_say_terminated_and_exit_143(tmp_path):
    _stopped_run(tmp_path, "t", _sigterm_inside_prefect())
    code, output = _cli("status", "t", "--data-root", str(tmp_path))
    assert code == exit_codes.TERMINATED == 143, output
    assert output.splitlines()[0] == (
        "run t: terminated by SIGTERM during train (round 1); `flywheel resume t` continues "
        "from the last finished stage")
    code, output = _cli("status", "t", "--json", "--data-root", str(tmp_path))
    shown = json.loads(output)
    assert (code, shown["status"], shown["exit_status"]) == (143, "terminated", 143)
    code, output = _cli("runs", "--data-root", str(tmp_path))
    assert code == 0 and "terminated" in output and "failed" not in output, output


@pytest.mark.parametrize(("exc", "status", "code", "first_line"), [
    (Interrupted(signal.SIGTERM), "terminated", 143,
     "run r: terminated by SIGTERM during train (round 1)"),
    (Interrupted(signal.SIGINT), "interrupted", 130, "run r: interrupted during train (round 1)"),
    (RuntimeError("CUDA error"), "failed", 4,
     "run r: failed at stage train (round 1): RuntimeError: CUDA error"),
])
def test_the_recorded_status_says_how_the_run_stopped(tmp_path, exc, status, code, first_line):
    _stopped_run(tmp_path, "r", exc)
    assert Catalog(tmp_path).run_status("r") == status
    shown, output = _cli("status", "r", "--data-root", str(tmp_path))
    assert shown == code and output.splitlines()[0].startswith(first_line), output


# ---- logs on stderr --------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_log_records_go_to_stderr_never_to_stdout(monkeypatch, terminal):
    stream = _Terminal if terminal else io.StringIO
    stdout, stderr = stream(), stream()
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    logger = logging.getLogger("flywheel.test-operator-edges")
    handler = _log_handler()
    logger.addHandler(handler)
    try:
        logger.warning("stage verify (round 0) completed")
    finally:
        logger.removeHandler(handler)
    assert stdout.getvalue() == ""
    shown = re.sub(r"\x1b\[[0-9;]*m", "", stderr.getvalue())  # rich's colours on a terminal
    assert "WARNING" in shown and "stage verify (round 0) completed" in shown, shown


# ---- the catalog while a run writes ----------------------------------------------------------

HOLDER = """
import sys, time
from storage.catalog import Catalog
catalog = Catalog(sys.argv[1])
with catalog.connect() as con:  # a write in progress, held for a while
    con.execute("UPDATE runs SET updated_at = updated_at WHERE run_id = 'a'")
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
for i in range(20):  # then the run's usual short writes
    catalog.set_run_status("a", "completed")
print("wrote", flush=True)
"""


def _tables(path: Path) -> list[tuple[str, str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(con.execute("SELECT table_name, table_type FROM information_schema.tables"
                                  " WHERE table_catalog = current_database()").fetchall())
    finally:
        con.close()


def test_catalog_snapshot_is_a_read_only_copy_with_every_table_and_view(root):
    code, output = _cli("catalog", "snapshot", "--data-root", str(root))
    copy = root / "snapshots" / "catalog.duckdb"
    assert code == 0 and output.splitlines() == [str(copy.resolve())], output
    assert stat.S_IMODE(copy.stat().st_mode) == 0o444
    assert _tables(copy) == _tables(root / "catalog.duckdb")
    assert ("problems", "VIEW") in _tables(copy)
    con = duckdb.connect(str(copy), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM problems").fetchone() == (3,)
        assert con.execute("SELECT run_id, status FROM runs").fetchall() == [("a", "completed")]
    finally:
        con.close()


def test_the_snapshot_reads_while_another_process_writes_where_the_catalog_does_not(tmp_path):
    catalog = Catalog(tmp_path / "data")
    catalog.ensure_run("a", "{}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(catalog.data_root), "1.0"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(duckdb.IOException, match="lock"):  # what docs/audit.md warns of
            duckdb.connect(str(catalog.path), read_only=True)
        out = tmp_path / "mine" / "catalog.duckdb"
        code, output = _cli("catalog", "snapshot", "--out", str(out), "--data-root",
                            str(catalog.data_root))  # waits out the write, then copies
        assert code == 0 and output.strip() == str(out), output
        assert holder.stdout.readline().strip() == "wrote"  # the writer was not blocked
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    code, output = _cli("catalog", "snapshot", "--out", str(out), "--data-root",
                        str(catalog.data_root))  # the next snapshot replaces the read-only copy
    assert code == 0, output
    con = duckdb.connect(str(out), read_only=True)
    try:  # the writer's last write is in it
        assert con.execute("SELECT run_id, status FROM runs").fetchall() == [("a", "completed")]
    finally:
        con.close()


def test_catalog_snapshot_refusals_are_one_line(tmp_path, root):
    code, output = _cli("catalog", "snapshot", "--data-root", str(tmp_path / "none"))
    assert code == 2 and output.splitlines() == [
        f"error: no catalog at {(tmp_path / 'none' / 'catalog.duckdb').resolve()} "
        "(check --data-root)"], output
    (tmp_path / "folder").mkdir()
    code, output = _cli("catalog", "snapshot", "--out", str(tmp_path / "folder"), "--data-root",
                        str(root))
    assert code == 2 and output.splitlines() == [
        f"error: cannot write the catalog snapshot {tmp_path / 'folder'}: it is a folder; give "
        "another --out"], output
    assert list((tmp_path / "folder").iterdir()) == []
    old = _old_root(tmp_path / "old")  # a catalog of an earlier data root format
    before = sorted(old.rglob("*"))
    code, output = _cli("catalog", "snapshot", "--data-root", str(old))
    assert code == 2 and len(output.splitlines()) == 1, output
    assert "format 1, written by an earlier Flywheel" in output
    assert sorted(old.rglob("*")) == before  # no snapshots/ folder, no copy
