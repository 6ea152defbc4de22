"""Whether the run was asked to stop: the state behind SIGINT/SIGTERM (flows/interrupts.py).

The signal handler raises `Interrupted` in the main thread, but a library may turn that
exception into its own (DuckDB answers it with `RuntimeError: Query interrupted`; a retry loop
may catch that). So the request is also remembered here, and `check()` raises it again where a
swallowed interruption would do harm: before every stage (tasks/stage.py), before a gate
reports a failure (validators/gate.py) and before an unreadable Parquet footer is called
damaged (storage/catalog/views.py, storage/recovery.py); no retry starts once it is set
(tasks/retry.py). It lives in `storage`, the package every other imports.
"""

from __future__ import annotations

import signal


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by a signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


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
    """The interruption behind `exc`: `exc` itself, one it was raised from or while handling,
    or (whatever a library made of it) the stop request itself."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return requested()
