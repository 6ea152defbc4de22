"""The run lock: one live holder per run id; a dead holder's lock is taken over."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from storage.lock import Holder, RunLock, RunLocked, live_holder, lock_path


def _hold_lock_in_child(data_root, run_id):
    """A separate process that takes the lock, says so, and waits for stdin to close."""
    code = textwrap.dedent(f"""
        import sys
        from storage.lock import RunLock
        with RunLock({str(data_root)!r}, {run_id!r}, command="flywheel run"):
            print("held", flush=True)
            sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_holder_is_refused_with_pid_and_start_time(tmp_path):
    child = _hold_lock_in_child(tmp_path, "r")
    try:
        with pytest.raises(RunLocked) as info:
            RunLock(tmp_path, "r").acquire()
        message = str(info.value)
        assert f"pid {child.pid}" in message and "started 20" in message
        assert "already running" in message and "\n" not in message
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    with RunLock(tmp_path, "r") as lock:  # released cleanly: nothing to take over
        assert lock.taken_over is None


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    child = _hold_lock_in_child(tmp_path, "r")
    assert live_holder(tmp_path, "r").pid == child.pid
    child.kill()  # SIGKILL: no cleanup runs, the file still names the dead holder
    child.wait(timeout=30)
    child.stdin.close()
    child.stdout.close()
    assert live_holder(tmp_path, "r") is None  # what `flywheel status` calls interrupted
    assert json.loads(lock_path(tmp_path, "r").read_text())["pid"] == child.pid
    with RunLock(tmp_path, "r") as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == child.pid
        assert Holder.parse(lock.path.read_text()).pid == os.getpid()
    assert lock_path(tmp_path, "r").read_text() == ""


def test_other_run_ids_are_independent(tmp_path):
    with RunLock(tmp_path, "a"), RunLock(tmp_path, "b"), pytest.raises(RunLocked):
        RunLock(tmp_path, "a").acquire()


def test_cli_refuses_a_running_run_in_one_line(tmp_path):
    child = _hold_lock_in_child(tmp_path, "busy")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "flows.cli", "run", "--run-id", "busy",
             "--data-root", str(tmp_path)],
            capture_output=True, text=True, timeout=120, check=False)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {child.pid}" in lines[0] and "already running" in lines[0]
    assert not (tmp_path / "catalog.duckdb").exists()  # refused before anything was written
