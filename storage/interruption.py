"""Whether the run was asked to stop: the state behind SIGINT/SIGTERM (flows/interrupts.py).

The signal handler raises `Interrupted` in the main thread, but a library may turn that
exception into its own (DuckDB answers it with `RuntimeError: Query interrupted`; a retry loop
may catch that). So the request is also remembered here, and `check()` raises it again where a
swallowed interruption would do harm: before every stage (tasks/stage.py), before a gate
reports a failure (validators/gate.py) and before an unreadable Parquet footer is called
damaged (storage/catalog/views.py, storage/recovery.py); no retry starts once it is set
(tasks/retry.py). It lives in `storage`, the package every other imports.

Inside a Prefect flow (all of a run's stages) a SIGTERM first reaches Prefect's own handler,
which raises its `TerminationSignal` instead of calling ours; ours runs only once the flow has
ended. So `interrupted_by` reads a `TerminationSignal` as the interruption it is, and the run's
recorded status (`stop_status`) says how it stopped: `interrupted` (SIGINT, Ctrl-C) or
`terminated` (SIGTERM), never `failed`.
"""

from __future__ import annotations

import signal
import sys


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by a signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM

    @property
    def run_status(self) -> str:
        """The run's recorded status after this stop: `terminated` for SIGTERM, else
        `interrupted` (flows/exit_codes.py `STATUS_EXIT` maps them to 143 and 130)."""
        return "terminated" if self.signum == signal.SIGTERM else "interrupted"


_requested: list[Interrupted] = []


def request(signum: int) -> Interrupted:
    """Remember that `signum` asked the run to stop; returns the exception to raise."""
    interrupted = Interrupted(signum)
    _requested.append(interrupted)
    return interrupted


def requested() -> Interrupted | None:
    """The first stop request, or None."""
    return _requested[0] if _requested else None


def check() -> None:
    """Raise the stop request, if there is one."""
    if _requested:
        raise Interrupted(_requested[0].signum)


def interrupted_by(exc: BaseException) -> Interrupted | None:
    """The interruption behind `exc`: `exc` itself (or Prefect's `TerminationSignal`), one it
    was raised from or while handling, or (whatever a library made of it) the stop request."""
    prefect_exceptions = sys.modules.get("prefect.exceptions")  # not imported: none was raised
    termination = getattr(prefect_exceptions, "TerminationSignal", ())
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current
        if isinstance(current, termination):  # Prefect's SIGTERM (module docstring)
            return Interrupted(current.signal)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return requested()


def stop_status(exc: BaseException) -> str:
    """The status to record for a run that `exc` stopped: `interrupted` or `terminated` when a
    signal stopped it (`Interrupted.run_status`), else `failed`."""
    interrupted = interrupted_by(exc)
    return "failed" if interrupted is None else interrupted.run_status
