"""The run lock: at most one process runs or resumes a run id at a time.

    <data-root>/runs/<run_id>/run.lock   {"pid": 4242, "host": "box", "started_at": 1.7e9,
                                          "command": "flywheel resume demo"}

The lock is an advisory `flock` on that file, held for the life of `flywheel run`/`resume`.
The kernel drops it when its process dies, however it dies (kill -9, OOM killer), so a crashed
run never blocks its resume; the file's content says who holds it. A second process is refused
with the holder's pid and start time (`RunLocked`); a process that gets the lock and finds a
previous holder's content in the file knows that holder died without releasing it, takes the
lock over and says so in one line. A clean release empties the file.

The descriptor is not inherited by child processes (Python opens files non-inheritable), so a
child that outlives a killed parent (such as Prefect's temporary server) cannot keep the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

from storage.paths import run_folder

LOCK_NAME = "run.lock"


class RunLocked(RuntimeError):
    """Another live process holds the run's lock; the message is one line for the user."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run's lock: the content of its lock file."""

    pid: int
    host: str
    started_at: float
    command: str

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """Read a lock file's content.

        Parameters
        ----------
        text
            The file's content: a JSON object with pid, host, started_at and optionally
            command.

        Returns
        -------
        The holder; None when `text` is empty, not JSON, or lacks a field (a file being
        written, or emptied by a clean release).
        """
        try:
            data: Any = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), float(data["started_at"]),
                       str(data.get("command", "")))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        """The holder in words for a one-line message.

        Returns
        -------
        `pid <pid> on <host>, started <YYYY-MM-DD HH:MM:SS>` (local time).
        """
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"pid {self.pid} on {self.host}, started {when}"


def lock_path(data_root: Path, run_id: str) -> Path:
    """Where a run's lock file lives.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run.

    Returns
    -------
    `<data-root>/runs/<run_id>/run.lock`
    """
    return run_folder(data_root, run_id) / LOCK_NAME


def live_holder(data_root: Path, run_id: str) -> Holder | None:
    """The process holding the run's lock, or None when no live process on this host does.

    Reads the file only (never touches the lock), so `flywheel status` cannot disturb a run.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run.

    Returns
    -------
    The holder recorded in the lock file when its process is alive on this host, or when it
    runs on another host (which cannot be checked from here); None when there is no lock
    file, its content is empty or unreadable, or its process on this host has exited.
    """
    try:
        holder = Holder.parse(lock_path(data_root, run_id).read_text())
    except OSError:
        return None
    if holder is None or holder.host != socket.gethostname():
        return holder  # another host's process cannot be checked from here
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by another user
    return holder


class RunLock:
    """`with RunLock(data_root, run_id): ...` holds the run's lock or raises `RunLocked`.

    After entering, `taken_over` is the previous holder when it had died holding the lock.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run to lock.
    command
        What the lock file says the holder runs; default: `flywheel` and the first two
        command-line arguments.
    """

    def __init__(self, data_root: Path, run_id: str, command: str | None = None):
        self.run_id = run_id
        self.path = lock_path(data_root, run_id)
        self.command = command or " ".join(["flywheel", *sys.argv[1:3]])
        self.taken_over: Holder | None = None
        self._handle: IO[str] | None = None

    def acquire(self) -> Holder | None:
        """Take the lock and write this process into the lock file.

        Returns
        -------
        The previous holder found in the file, which died without releasing the lock (also
        kept as `taken_over`); None when the file was empty or its content unreadable.

        Raises
        ------
        RunLocked
            Another live process holds the lock; the one-line message names the holder (when
            the file says who) and says to wait for it or stop it, then run `flywheel resume`.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = Holder.parse(handle.read())
            handle.close()
            who = holder.describe() if holder else "another process"
            msg = (f"run {self.run_id} is already running ({who}; lock {self.path}); wait for it "
                   "to finish or stop that process, then run `flywheel resume`")
            raise RunLocked(msg) from None
        handle.seek(0)
        previous = handle.read()
        self.taken_over = Holder.parse(previous) if previous.strip() else None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(),
              "command": self.command}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(me))
        handle.flush()
        os.fsync(handle.fileno())
        self._handle = handle
        return self.taken_over

    def release(self) -> None:
        """Empty the lock file and release the lock; does nothing when it is not held.

        An empty file tells the next holder that this process released the lock cleanly.
        """
        if self._handle is None:
            return
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.flush()
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
