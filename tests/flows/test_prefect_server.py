"""The run's temporary Prefect server never outlives its run: a recorded server whose run died
is ended at the next start, a live run's server and a reused pid are left alone, and the real
server dies with a killed parent (its parent-death signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flows.prefect_server import TemporaryServer, end_leftovers, is_alive, process_start_time


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
