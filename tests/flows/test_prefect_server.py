"""The run's temporary Prefect server never outlives its run: a recorded server whose run died
is ended at the next start, a live run's server and a reused pid are left alone, and the real
server dies with a killed parent (its parent-death signal); its API's write transactions take
SQLite's lock when they begin."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flows.prefect_server import (
    TemporaryServer,
    end_leftovers,
    is_alive,
    lock_when_writes_begin,
    process_start_time,
)
from tests.flows.runs import child_env


def _sleeper() -> subprocess.Popen:
    """A stand-in server: its own session, as the real one."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)


def _dead_pid() -> tuple[int, int | None]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = process_start_time(proc.pid)
    proc.wait()
    return proc.pid, started


def _record(registry: Path, server: subprocess.Popen, owner: int, owner_started: int | None,
            started: int | None = None) -> Path:
    registry.mkdir(parents=True, exist_ok=True)
    path = registry / f"{server.pid}.json"
    path.write_text(json.dumps({"pid": server.pid, "owner": owner, "owner_started": owner_started,
                                "started": started or process_start_time(server.pid)}))
    return path


def test_a_server_whose_run_died_is_ended_and_forgotten(tmp_path):
    server = _sleeper()
    try:
        record = _record(tmp_path, server, *_dead_pid())
        assert end_leftovers(tmp_path) == [server.pid]
        assert server.wait(timeout=10) == -signal.SIGTERM
        assert not record.exists()
    finally:
        server.kill()
        server.wait()


def test_a_live_runs_server_and_a_reused_pid_are_left_alone(tmp_path):
    live = _sleeper()
    reused = _sleeper()
    try:
        kept = _record(tmp_path, live, os.getpid(), process_start_time(os.getpid()))
        # a record whose pid now belongs to another process (other start time): not signalled
        stale = _record(tmp_path, reused, *_dead_pid(), started=1)
        assert end_leftovers(tmp_path) == []
        assert live.poll() is None and reused.poll() is None
        assert kept.exists() and not stale.exists()
    finally:
        for proc in (live, reused):
            proc.kill()
            proc.wait()


def test_a_half_written_record_is_dropped(tmp_path):
    (tmp_path / "123.json").write_text('{"pid": 1')
    assert end_leftovers(tmp_path) == []
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_server_answers_and_dies_with_a_killed_parent(tmp_path):
    """A parent starts a real server and is killed with SIGKILL: the kernel ends the server."""
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from flows.prefect_server import "
         "TemporaryServer; s = TemporaryServer(registry=Path(sys.argv[1])); url = s.start(); "
         "s.wait_ready(); print(url, s.process.pid, flush=True); time.sleep(120)",
         str(tmp_path / "registry")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PREFECT_HOME": str(tmp_path)})
    try:
        url, pid = parent.stdout.readline().split()
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert response.status == 200
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 15
        while is_alive(int(pid), None) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not is_alive(int(pid), None)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_stop_is_idempotent_and_forgets_the_record(tmp_path):
    server = TemporaryServer(registry=tmp_path)
    server.stop()  # never started: nothing to do
    server.process = _sleeper()
    server.started = process_start_time(server.process.pid)
    server.record_path.write_text("{}")
    sleeper = server.process
    server.stop()
    server.stop()
    assert sleeper.returncode is not None and not list(tmp_path.iterdir())


def test_the_servers_transactions_take_the_write_lock_when_they_begin(monkeypatch):
    """Prefect begins its API's SQLite transactions DEFERRED (a request that reads, then writes
    fails at once with 503 when another writer committed in between); the run's own server
    begins them IMMEDIATE, so that request waits for the other writer instead."""
    from prefect.server.database.configurations import SQLITE_BEGIN_MODE, AioSqliteConfiguration

    monkeypatch.setattr(AioSqliteConfiguration, "begin_transaction",  # restored after the test
                        AioSqliteConfiguration.begin_transaction)

    class Session:
        @contextlib.asynccontextmanager
        async def begin(self):
            yield SQLITE_BEGIN_MODE.get()

    async def mode() -> str:
        config = AioSqliteConfiguration(connection_url="sqlite+aiosqlite:///:memory:")
        async with config.begin_transaction(Session()) as begun:
            return begun

    assert asyncio.run(mode()) == "DEFERRED"
    lock_when_writes_begin()
    assert asyncio.run(mode()) == "IMMEDIATE"


@pytest.mark.slow
def test_a_resume_that_recomputes_nothing_is_never_told_to_retry(small_run_root, tmp_path):
    """`flywheel resume` on its own server of a run stopped after its last stage (so the flows
    run: flows/run.py `resume_without_work` finishes a `completed` one without them): every
    stage is reused, a burst of quick task runs, and the server answers no request with 503
    (which its log would show, and which cost the resume ~2 s of Prefect's client backing
    off)."""
    from storage.catalog import Catalog

    root = tmp_path / "data"
    shutil.copytree(small_run_root, root, symlinks=True)
    Catalog(root).set_run_status("small", "interrupted")
    resumed = subprocess.run(
        [sys.executable, "-m", "flows.cli", "resume", "small", "--data-root", str(root)],
        env=child_env(tmp_path, None), capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count(": reused (fingerprint") >= 7
    assert ": started (fingerprint" not in resumed.stderr
    server_log = (root / "logs" / "prefect-server.log").read_text()
    assert "Encountered retryable exception" not in server_log, server_log[-3000:]
    assert Catalog(root).run_status("small") == "completed"


def _servers_of(owner: int) -> list[int]:
    """Pids of live `python -m flows.prefect_server OWNER ...` processes."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if b"flows.prefect_server" in args:
                at = args.index(b"flows.prefect_server")
                if args[at + 1:at + 2] == [str(owner).encode()]:
                    found.append(int(cmdline.parent.name))
    return found


@pytest.mark.parametrize("args", [["resume", "nosuch"], ["resume", "nosuch", "--set", "x"],
                                  ["run", "--set", "rounds=-1"]])
def test_a_command_refused_after_its_early_server_started_leaves_no_server(tmp_path, args):
    """On a data root that holds a catalog, `run`/`resume` launch their server before their
    checks (flows/execution.py `start_server`); one refused by a check exits 2 with its line,
    and its server is gone with it: no process, no record."""
    from storage.catalog.connection import CatalogFile

    root = tmp_path / "data"
    root.mkdir()
    with CatalogFile(root).connect():  # an empty catalog: a data root Flywheel wrote
        pass
    env = child_env(tmp_path, None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *args, "--data-root", str(root)],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2, stderr
    assert "error:" in stderr and "Traceback" not in stderr
    assert (root / "logs" / "prefect-server.log").exists()  # it was launched, early
    assert not _servers_of(proc.pid)
    assert not list((tmp_path / "prefect-home-own" / "flywheel-servers").glob("*.json"))


def test_an_early_server_that_cannot_start_leaves_the_checks_to_say_why(tmp_path):
    """`logs` is a file in the data root: the early launch cannot open the server's log, and the
    command goes on to its own checks (here: no such run, one line, exit 2), no traceback."""
    from storage.catalog.connection import CatalogFile

    root = tmp_path / "data"
    root.mkdir()
    with CatalogFile(root).connect():
        pass
    (root / "logs").write_text("not a folder")
    result = subprocess.run([sys.executable, "-m", "flows.cli", "resume", "nosuch",
                             "--data-root", str(root)], env=child_env(tmp_path, None),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert "unknown run id 'nosuch'" in result.stderr and "Traceback" not in result.stderr
    assert (root / "logs").read_text() == "not a folder"
