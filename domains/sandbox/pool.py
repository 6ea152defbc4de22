"""The host side of the sandbox: a pool of pre-started fork servers (domains/sandbox/worker.py).

    pool = SandboxPool(Limits(cpu_seconds=1.0, wall_seconds=2.0), workers=2)
    pool.run([Job("def f(x): return x*3+1", ("(4,)",))])
    # [Result(outcome='ok', outputs=('13',), stdout='', error='')]

A job is a program that defines `f` and the argument tuples (Python literals) to call it with;
its result is an outcome (worker.OUTCOMES) and, when ok, the canonical text of each return value.
Each worker serves one batch at a time; a batch is split over the workers and they run at once.
A worker that does not answer in time, or answers nonsense, is killed (its whole process group)
and replaced; the jobs it held get outcome "crash" with the reason.

Isolation is checked when a worker starts: a mechanism the worker could not set up (for example
namespaces without root or user namespaces) raises `IsolationError` under `isolation = "strict"`
(the default) and warns (`SandboxIsolationWarning`, and the log) under `"warn"`; it is never
silent. `mechanisms` says what is on. The seccomp filter every child installs is compiled here,
once per pool (domains/sandbox/seccomp.py, through libseccomp), and handed to each worker.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from domains.sandbox.seccomp import FilterUnavailable, allow_list_program
from domains.sandbox.worker import OUTCOMES

WORKER = Path(__file__).with_name("worker.py")
BATCH = 256  # jobs per request: a lost worker costs at most this many results
START_SECONDS = 20.0
# The worker's whole environment. LD_BIND_NOW: the dynamic linker resolves every symbol at
# start, so no forked child writes (and copies) a page of the linkers' tables on a first call.
WORKER_ENVIRONMENT = {"PYTHONHASHSEED": "0", "LD_BIND_NOW": "1"}

log = logging.getLogger(__name__)


class IsolationError(RuntimeError):
    """A sandbox mechanism is missing and `isolation = "strict"` forbids running without it."""


class SandboxIsolationWarning(UserWarning):
    """A sandbox mechanism is missing and `isolation = "warn"` runs programs without it."""


class WorkerLost(RuntimeError):
    """A worker did not answer in time or answered something that is not the protocol."""


@dataclass(frozen=True)
class Limits:
    """Per-program limits (see `configs.SandboxConfig` for each one's meaning)."""

    cpu_seconds: float = 1.0
    wall_seconds: float = 2.0
    memory_mb: int = 256
    max_file_bytes: int = 65_536
    max_output_bytes: int = 4096
    tmpfs_mb: int = 16

    def as_dict(self) -> dict[str, float | int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Job:
    """A program defining `f`, and the argument tuples to call it with (literal reprs)."""

    source: str
    calls: tuple[str, ...]


@dataclass(frozen=True)
class Result:
    """How a job ended: outcome, canonical outputs (when ok), captured prints, error text."""

    outcome: str
    outputs: tuple[str, ...] = ()
    stdout: str = ""
    error: str = ""


def _result(report: bytes) -> Result:
    """One job's report, checked: a program can write its own report (domains/sandbox/worker.py),
    so anything but a dict with a known outcome and text fields is a `crash`."""
    try:
        raw = json.loads(report)
    except ValueError:
        return Result("crash", error="unreadable report")
    if not isinstance(raw, dict) or raw.get("outcome") not in OUTCOMES:
        return Result("crash", error="malformed report")
    outputs, stdout, error = raw.get("outputs", []), raw.get("stdout", ""), raw.get("error", "")
    if not (isinstance(outputs, list) and all(isinstance(o, str) for o in outputs)
            and isinstance(stdout, str) and isinstance(error, str)):
        return Result("crash", error="malformed report")
    return Result(raw["outcome"], tuple(outputs), stdout, error)


class _Worker:
    """One fork server process and its pipes; its children install `program` (classic BPF), or
    no filter when it is empty, for the reason `missing`."""

    def __init__(self, limits: Limits, program: bytes, missing: str) -> None:
        self.root = tempfile.mkdtemp(prefix="flywheel-sandbox-")
        self.process = subprocess.Popen(
            [sys.executable, "-S", "-P", "-B", str(WORKER), json.dumps(limits.as_dict()),
             self.root, program.hex()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=WORKER_ENVIRONMENT, cwd=self.root, start_new_session=True, close_fds=True)
        ready = self.receive(time.monotonic() + START_SECONDS)
        if not ready.get("ready"):
            raise WorkerLost(f"sandbox worker did not start: {ready!r}")
        self.mechanisms: dict[str, str] = dict(ready["mechanisms"])
        if missing:
            self.mechanisms["seccomp"] = f"missing: {missing}"

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        try:
            self.process.stdin.write(struct.pack(">I", len(body)) + body)
            self.process.stdin.flush()
        except OSError as exc:
            raise WorkerLost(f"sandbox worker pipe closed: {exc}") from None

    def _read(self, size: int, deadline: float) -> bytes:
        fd, chunks, got = self.process.stdout.fileno(), [], 0
        while got < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerLost("sandbox worker did not answer in time")
            data = os.read(fd, size - got)
            if not data:
                raise WorkerLost(f"sandbox worker exited ({self.process.poll()})")
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def receive_reports(self, deadline: float) -> list[bytes]:
        """A batch's reports, each framed by its own length."""
        (size,) = struct.unpack(">I", self._read(4, deadline))
        body, reports, offset = self._read(size, deadline), [], 0
        while offset < size:
            (length,) = struct.unpack_from(">I", body, offset) if offset + 4 <= size else (size,)
            if offset + 4 + length > size:
                raise WorkerLost("sandbox worker wrote a report past its batch")
            reports.append(body[offset + 4:offset + 4 + length])
            offset += 4 + length
        return reports

    def receive(self, deadline: float) -> dict:
        (size,) = struct.unpack(">I", self._read(4, deadline))
        try:
            message = json.loads(self._read(size, deadline))
        except ValueError:
            raise WorkerLost("sandbox worker wrote something that is not JSON") from None
        if not isinstance(message, dict):
            raise WorkerLost("sandbox worker wrote something that is not a message")
        return message

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


class SandboxPool:
    """Pre-started sandbox workers; `run` spreads a batch of jobs over them.

    Parameters
    ----------
    limits
        The per-program limits.
    workers
        How many fork servers (each runs one program at a time).
    isolation
        "strict": a missing isolation mechanism raises `IsolationError` at start; "warn": it
        warns (`SandboxIsolationWarning` and the log) and runs without it.
    seccomp_program
        The classic-BPF filter every child installs. None (the default): the allow list of
        domains/sandbox/seccomp.py, compiled at start. bench/sandbox.py passes another one to
        compare two filters side by side, or one that allows everything to measure what
        children call.
    """

    def __init__(self, limits: Limits, *, workers: int = 2, isolation: str = "strict",
                 seccomp_program: bytes | None = None) -> None:
        if isolation not in ("strict", "warn"):
            msg = f"sandbox.isolation = {isolation!r}: use 'strict' or 'warn'"
            raise ValueError(msg)
        self.limits, self.size, self.isolation = limits, workers, isolation
        self._program, self._program_missing = seccomp_program, ""
        self._workers: list[_Worker] = []
        self.replaced = 0  # workers killed and replaced since start
        self.answer_slack_seconds = 10.0  # beyond the batch's wall limits, before a worker is lost

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_workers": []}  # processes do not travel; a copy starts its own

    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def mechanisms(self) -> dict[str, str]:
        """Isolation mechanism -> "on" or "missing: why" (of the first worker)."""
        self.start()
        return dict(self._workers[0].mechanisms)

    def start(self) -> None:
        if self._workers:
            return
        if self._program is None:
            try:
                self._program = allow_list_program()
            except FilterUnavailable as exc:
                self._program, self._program_missing = b"", str(exc)
        self._workers = [self._start_worker() for _ in range(self.size)]
        atexit.register(self.close)

    def _start_worker(self) -> _Worker:
        worker = _Worker(self.limits, self._program, self._program_missing)
        missing = {k: v for k, v in worker.mechanisms.items() if v != "on"}
        if missing:
            text = "; ".join(f"{k}: {v.removeprefix('missing: ')}" for k, v in missing.items())
            msg = f"sandbox isolation incomplete: {text}"
            if self.isolation == "strict":
                worker.kill()
                raise IsolationError(f"{msg} (fix the machine, or set sandbox.isolation = "
                                     "'warn' to run model-written code with less isolation)")
            log.warning(msg)
            warnings.warn(msg, SandboxIsolationWarning, stacklevel=3)
        return worker

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def run(self, jobs: list[Job]) -> list[Result]:
        """Run every job once; results in the jobs' order."""
        return self._dispatch([[(i, job) for i, job in enumerate(jobs) if i % self.size == w]
                               for w in range(self.size)], len(jobs))

    def run_twice(self, jobs: list[Job]) -> list[tuple[Result, Result]]:
        """Run every job twice, each time on a different worker where there are two or more (so
        neither a forked copy's state nor its memory layout is shared by the two runs)."""
        n, size = len(jobs), self.size
        plan = [[(i, job) for i, job in enumerate(jobs) if i % size == w]
                + [(n + i, job) for i, job in enumerate(jobs) if (i + 1) % size == w]
                for w in range(size)]
        results = self._dispatch(plan, 2 * n)
        return list(zip(results[:n], results[n:], strict=True))

    def _dispatch(self, plan: list[list[tuple[int, Job]]], total: int) -> list[Result]:
        self.start()
        out: list[Result | None] = [None] * total
        while any(plan):
            batches = [queue[:BATCH] for queue in plan]
            plan = [queue[BATCH:] for queue in plan]
            for index, batch in enumerate(batches):
                if batch:
                    self._send(index, batch)
            for index, batch in enumerate(batches):
                if batch:
                    for (position, _), result in zip(batch, self._collect(index, batch),
                                                     strict=True):
                        out[position] = result
        return [r for r in out if r is not None]

    def _send(self, index: int, batch: list[tuple[int, Job]]) -> None:
        jobs = [{"source": job.source, "calls": list(job.calls)} for _, job in batch]
        if self._workers[index].process.poll() is not None:
            self._replace(index, "exited between batches")
        try:
            self._workers[index].send({"jobs": jobs})
        except WorkerLost:
            self._replace(index, "pipe closed")
            self._workers[index].send({"jobs": jobs})

    def _collect(self, index: int, batch: list[tuple[int, Job]]) -> list[Result]:
        deadline = (time.monotonic() + len(batch) * (self.limits.wall_seconds + 0.5)
                    + self.answer_slack_seconds)
        try:
            reports = self._workers[index].receive_reports(deadline)
            if len(reports) != len(batch):
                raise WorkerLost("sandbox worker answered the wrong number of results")
            return [_result(report) for report in reports]
        except WorkerLost as exc:
            self._replace(index, str(exc))
            return [Result("crash", error=f"sandbox worker lost: {exc}") for _ in batch]

    def _replace(self, index: int, why: str) -> None:
        log.warning("sandbox worker %d killed and replaced: %s", index, why)
        self._workers[index].kill()
        self._workers[index] = self._start_worker()
        self.replaced += 1
