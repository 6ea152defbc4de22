"""Helpers for the tests that start real `flywheel` processes, stop them and compare runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.run_state import completed_state as snapshot  # noqa: F401 - re-exported


def child_env(tmp: Path, prefect_url: str | None, **extra: str) -> dict[str, str]:
    """A child's environment: the session's Prefect server (or, with None, the run's own
    temporary server with its database under tmp/prefect-home-own), one torch thread."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "FLYWHEEL_TEST_"))}
    env.update(OMP_NUM_THREADS="1", FLYWHEEL_TEST_PAUSE_FILE=str(tmp / "paused"), **extra)
    if prefect_url:
        env.update(PREFECT_API_URL=prefect_url, PREFECT_HOME=str(tmp / "prefect-home"))
    else:
        env.update(PREFECT_HOME=str(tmp / "prefect-home-own"),
                   PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    return env


def start(args: list[str], env: dict[str, str], log: Path,
          python: tuple[str, ...] = ("-m", "flows.cli")) -> subprocess.Popen:
    """Start `flywheel ARGS` in its own session, its output in `log`."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, *python, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_paused(proc: subprocess.Popen, marker: Path, point: str, log: Path) -> None:
    """Wait until the child announced the pause point (storage/recovery.py `pause_point`)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text() == point:
            return
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before reaching {point}:\n{log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"never reached {point}:\n{log.read_text()}")
