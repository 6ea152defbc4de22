"""How `flywheel run` and `flywheel resume` execute a run once its config and data root passed
their checks: the lock, the config record, the log file, the temporary Prefect server, the
signals, and one line for whatever stops the run.

    <data-root>/logs/<run_id>.log    every invocation appends: a header line, the flywheel and
                                     Prefect log records, and the traceback of a failure

What the terminal shows when a run stops early (flows/exit_codes.py):

    error: stage verify (round 1) failed: the disk is full ([Errno 28] No space left on
    device); traceback in flywheel-data/logs/demo.log; `flywheel resume demo` continues once
    the cause is fixed                                                    (exit 4, one line)
    interrupted by SIGINT during rollout (round 2); `flywheel resume demo` continues from
    the last finished stage                                               (exit 130)

Prefect's own error records (a failed task or flow run, with its traceback) go to the log file
only; the line above says what they would.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flows import exit_codes
from flows.interrupts import stop_on_signals
from storage.interruption import interrupted_by

Echo = Callable[[str], None]


def log_path(data_root: Path, run_id: str) -> Path:
    """The run's log file (a bad run id raises storage.paths.InvalidRunId: the one rule)."""
    from storage.paths import check_run_id

    return Path(data_root) / "logs" / f"{check_run_id(run_id)}.log"


class _PrefectErrorsToFileOnly(logging.Filter):
    """Keeps Prefect's error records (failed task/flow runs and their tracebacks) off the
    terminal; the CLI prints one line instead and the log file keeps the records."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("prefect") and record.levelno >= logging.ERROR)


def start_log(path: Path, command: str) -> None:
    """Append this invocation's header line to the log file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {command} (pid {os.getpid()})\n")


def attach_log_file(path: Path) -> None:
    """Send every flywheel record (INFO and up) and Prefect's (WARNING and up) to `path` too,
    and keep Prefect's errors off the console. Call it after Prefect set up its logging (which
    replaces the root logger's handlers)."""
    from flows.log_lines import file_handler

    handler = file_handler(path)
    handler.setLevel(logging.INFO)
    quiet = _PrefectErrorsToFileOnly()
    root = logging.getLogger()
    for console in root.handlers:
        console.addFilter(quiet)
    root.addHandler(handler)
    logging.getLogger("flywheel.recovery").addHandler(handler)  # it does not propagate


def cause(exc: BaseException) -> str:
    """What went wrong, in a few words, for the one-line failure message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    lowered = text.lower()
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) or (
            "no space left on device" in lowered):
        return f"the disk is full ({text})"
    if isinstance(exc, MemoryError) or "can't allocate memory" in lowered or (
            "out of memory" in lowered):
        return f"out of memory ({type(exc).__name__}: {text})"
    return f"{type(exc).__name__}: {text}"


def _record_traceback(path: Path, exc: BaseException) -> Path | None:
    """Append the traceback to the log file; returns the file, or None when that failed too
    (a full disk)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def _where(exc: BaseException) -> str | None:
    from tasks.stage import failed_stage

    found = failed_stage(exc)
    return None if found is None else f"{found[0]} (round {found[1]})"


def stopped_line(exc: BaseException, run_id: str, log: Path | None) -> tuple[str, int]:
    """(the line to print, the exit status) for an exception that stopped the run."""
    where = _where(exc)
    interrupted = interrupted_by(exc)
    if interrupted is not None:
        during = f"during {where}" if where else "between stages"
        return (f"interrupted by {interrupted} {during}; `flywheel resume {run_id}` continues "
                "from the last finished stage", interrupted.exit_code)
    what = f"stage {where}" if where else "the run"
    details = f"traceback in {log}" if log else "its traceback could not be written either"
    return (f"error: {what} failed: {cause(exc)}; {details}; `flywheel resume {run_id}` "
            "continues once the cause is fixed", exit_codes.STAGE_FAILED)


_own_server: Any = None  # the TemporaryServer this process launched (start_server)


def start_server(data_root: Path) -> Any:
    """The run's own temporary Prefect server, unless PREFECT_API_URL names one
    (flows/prefect_server.py): launched on the first call, returned (not yet answering, maybe)
    on every later one in this process while it runs; None when PREFECT_API_URL names another.

    The CLI calls it as early as it can (`flywheel run`/`resume` on an existing data root, before
    their checks): the server's start, about 3 s of imports in its own process, then overlaps
    the checks and this process's imports instead of following them. `execute` calls it again
    for the server, and launches it there for a data root that the run creates."""
    global _own_server
    if _own_server is not None and _own_server.process is not None:
        return _own_server
    if os.environ.get("PREFECT_API_URL"):
        return None
    from flows.prefect_server import TemporaryServer

    server = TemporaryServer(log_path=Path(data_root) / "logs" / "prefect-server.log")
    os.environ["PREFECT_API_URL"] = server.start()
    _own_server = server
    return server


@contextlib.contextmanager
def no_heartbeats_to(server: Any) -> Iterator[None]:
    """Flow runs send no heartbeats to the run's own temporary server (`server` not None).
    Heartbeats let a server outliving a run mark it crashed; ours dies with the run, and each
    flow run's end waited up to a second for its heartbeat thread (bench/round_overhead.py).
    A server named by PREFECT_API_URL gets them as usual."""
    if server is None:
        yield
        return
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def execute(data_root: Path, run_id: str, config: Any, *, command: str, echo: Echo) -> int:
    """Run (or resume) `run_id` with `config` to its end or to the first thing that stops it.

    Parameters
    ----------
    data_root
        The data root (already checked).
    run_id
        The run.
    config
        The validated RunConfig.
    command
        The command line, for the log file's header.
    echo
        Prints one line on stderr.

    Returns
    -------
    The exit status (flows/exit_codes.py).
    """
    from storage.lock import RunLocked
    from storage.recovery import guarded_run, pause_point
    from storage.run_record import write_run_config
    from validators.gate import GateFailed
    from validators.summary import print_gate_failure, quiet_gate_tracebacks

    log = log_path(data_root, run_id)
    with stop_on_signals(echo):
        try:  # the run lock is taken before the heavy imports, so a refusal is instant (exit 3)
            with guarded_run(data_root, run_id):
                write_run_config(data_root, run_id, config.model_dump_json())
                pause_point("run:recorded")  # test hook: the config is recorded, no catalog yet
                start_log(log, command)
                server = start_server(data_root)
                from flows.run import (  # torch, Prefect: while it starts
                    RunSpec,
                    resume_without_work,
                    run_flywheel,
                )
                from tasks.libraries import freeze_imports

                freeze_imports()  # and the stages' libraries before their first computation
                attach_log_file(log)
                quiet_gate_tracebacks()
                spec = RunSpec(data_root=str(Path(data_root).resolve()), run_id=run_id,
                               config=config)
                if resume_without_work(spec):  # the server is never waited for
                    return exit_codes.OK
                if server is not None:
                    server.wait_ready()
                with no_heartbeats_to(server):
                    run_flywheel(spec)
        except RunLocked as exc:
            echo(f"error: {exc}")
            return exit_codes.LOCKED
        except (Exception, KeyboardInterrupt) as exc:
            if isinstance(exc, GateFailed) and interrupted_by(exc) is None:
                print_gate_failure(exc, run_id, echo=echo)  # the report, not a traceback
                return exit_codes.GATE_FAILED
            line, code = stopped_line(exc, run_id, _record_traceback(log, exc))
            echo(line)
            return code
    return exit_codes.OK
