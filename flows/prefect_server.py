"""The run's own temporary Prefect server: it never outlives the `flywheel` process that
started it.

Without `PREFECT_API_URL`, Prefect would start a temporary server of its own as a child of the
run; a run killed with SIGKILL leaves that child running (an orphaned uvicorn holding a port and
the Prefect database), and Ctrl-C in a terminal reaches it too, so the dying run retries API
calls against a server that is already gone. Instead, `flywheel run`/`resume` start the server
themselves (`temporary_server`):

- in its own session and process group, so a terminal's Ctrl-C reaches the run only and the
  server keeps answering while the run records its interruption;
- with the kernel's parent-death signal (Linux `PR_SET_PDEATHSIG`): when the run dies, however
  it dies, the kernel sends the server SIGTERM;
- stopped at interpreter exit, after Prefect's own exit handlers have flushed their logs and
  events to it (it is registered before Prefect is imported, and exit handlers run last first);
- recorded in `$PREFECT_HOME/flywheel-servers/<pid>.json` (its pid, its start time, the run's
  pid): the next start ends any recorded server whose run is gone (`end_leftovers`), in case the
  parent-death signal was lost (a server stuck in the kernel, a platform without it).

A process is identified by its pid *and* its start time (`/proc/<pid>/stat`), so a reused pid is
never signalled. With `PREFECT_API_URL` set, the run uses that server and starts none.

The child is `python -m flows.prefect_server PARENT_PID PORT`: it arms the parent-death signal,
exits at once if its parent is already gone, and serves Prefect's API app with uvicorn on
127.0.0.1 (no UI), as Prefect's own temporary server does, with two differences: its write
transactions take SQLite's lock when they begin (`lock_when_writes_begin`), and it logs every
error its API answers with 503 ("retry"), so a client's wait shows in the server's log.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from storage.processes import die_with

log = logging.getLogger("flywheel.server")

STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STOP_WAIT_SECONDS = 5.0


class ServerUnavailable(RuntimeError):
    """The temporary server did not come up; the message says why, in one line."""


def process_start_time(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot; None when it does not exist,
    is a zombie (dead, not yet reaped), or /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces; fields after it are plain
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def is_alive(pid: int, started: int | None) -> bool:
    """Whether the process that had start time `started` is still process `pid`."""
    now = process_start_time(pid)
    return now is not None and (started is None or now == started)


def registry_dir() -> Path:
    """Where running temporary servers are recorded: `$PREFECT_HOME/flywheel-servers`."""
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    return home / "flywheel-servers"


def _stop_group(pid: int, started: int | None) -> None:
    """SIGTERM the server's process group, SIGKILL it if it is still there after a while."""
    for sig, wait in ((signal.SIGTERM, STOP_WAIT_SECONDS), (signal.SIGKILL, STOP_WAIT_SECONDS)):
        if not is_alive(pid, started):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and is_alive(pid, started):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child
            time.sleep(0.05)


def end_leftovers(registry: Path | None = None) -> list[int]:
    """End every recorded temporary server whose run is gone; forget records of dead servers.

    Parameters
    ----------
    registry
        The records' folder (default `registry_dir()`).

    Returns
    -------
    The pids of the servers ended (each also reported in one log line).
    """
    registry = registry or registry_dir()
    ended = []
    for record_path in sorted(registry.glob("*.json")):
        try:
            record = json.loads(record_path.read_text())
            pid, started = int(record["pid"]), record.get("started")
            owner, owner_started = int(record["owner"]), record.get("owner_started")
        except (OSError, ValueError, KeyError, TypeError):
            record_path.unlink(missing_ok=True)  # half written: its writer died at once
            continue
        if is_alive(owner, owner_started):
            continue  # another live run's server
        if is_alive(pid, started):
            _stop_group(pid, started)
            ended.append(pid)
            log.warning("flywheel: ended a Prefect server (pid %d) left running by a run that "
                        "was killed (pid %d)", pid, owner)
        record_path.unlink(missing_ok=True)
    return ended


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TemporaryServer:
    """A Prefect API server owned by this process (see the module docstring).

    `start()` launches it and returns its API URL at once; `wait_ready()` blocks until it
    answers, so the caller can import torch and Prefect meanwhile. `stop()` ends it; it also
    runs at interpreter exit.
    """

    def __init__(self, log_path: Path | None = None, registry: Path | None = None) -> None:
        self.registry = registry or registry_dir()
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.started: int | None = None
        self.port = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def record_path(self) -> Path:
        return self.registry / f"{self.process.pid}.json"

    def start(self) -> str:
        """Launch the server; returns its API URL (it is not answering yet)."""
        end_leftovers(self.registry)
        self.port = _free_port()
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT_API_LOG_RETRYABLE_ERRORS": "1"}
        env.pop("PREFECT_API_URL", None)
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "flows.prefect_server", str(os.getpid()), str(self.port)],
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self.started = process_start_time(self.process.pid)
        self.registry.mkdir(parents=True, exist_ok=True)
        record = {"pid": self.process.pid, "started": self.started, "owner": os.getpid(),
                  "owner_started": process_start_time(os.getpid()), "port": self.port}
        temp = self.record_path.with_suffix(".tmp")
        temp.write_text(json.dumps(record))
        temp.replace(self.record_path)
        atexit.register(self.stop)
        return self.api_url

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the server answers its health check.

        Raises
        ------
        ServerUnavailable
            It exited, or did not answer within `timeout` seconds (default
            `$PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`, else 120).
        """
        timeout = timeout or float(os.environ.get(STARTUP_TIMEOUT_ENV, "120"))
        deadline = time.monotonic() + timeout
        where = f"; its log is {self.log_path}" if self.log_path else ""
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerUnavailable(f"the temporary Prefect server exited with status "
                                        f"{self.process.returncode} while starting{where}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise ServerUnavailable(f"the temporary Prefect server did not answer within "
                                f"{timeout:.0f} s (set {STARTUP_TIMEOUT_ENV} to wait longer, or "
                                f"export PREFECT_API_URL of a running server){where}")

    def stop(self) -> None:
        """End the server and its process group and forget its record (idempotent)."""
        if self.process is None:
            return
        _stop_group(self.process.pid, self.started)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)
        self.record_path.unlink(missing_ok=True)
        self.process = None


def lock_when_writes_begin() -> None:
    """Every transaction of this server's API begins with SQLite's write lock (`BEGIN
    IMMEDIATE`) instead of on its first write.

    Prefect begins them `DEFERRED`: a request that reads and then writes (creating a task run)
    cannot take the lock once another writer committed after its read (the service recording
    the run's task-run events, busy right after a burst of quick tasks, as in a resume). SQLite
    refuses at once, `busy_timeout` does not help, the API answers 503, and Prefect's client
    retries after about 2 s: every resume lost those seconds at its first round. Taking the lock
    first, a writer waits for the other instead (up to Prefect's 60 s `busy_timeout`).
    """
    from prefect.server.database.configurations import AioSqliteConfiguration

    deferred = AioSqliteConfiguration.begin_transaction

    def immediate(self: AioSqliteConfiguration, session: Any,
                  with_for_update: bool = False) -> Any:
        return deferred(self, session, with_for_update=True)

    AioSqliteConfiguration.begin_transaction = immediate


def main(argv: list[str]) -> None:
    parent, port = int(argv[0]), int(argv[1])
    die_with(parent, signal.SIGTERM, gone_status=0)
    import uvicorn

    lock_when_writes_begin()
    uvicorn.run("prefect.server.api.server:create_app", factory=True, host="127.0.0.1",
                port=port, log_level="error", lifespan="on")


if __name__ == "__main__":
    main(sys.argv[1:])
