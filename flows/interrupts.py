"""SIGINT and SIGTERM stop a run within seconds, leaving it resumable.

The first signal raises `Interrupted` (a KeyboardInterrupt, storage/interruption.py, which also
remembers it) in the main thread, wherever the run is: the stage in progress records a `failed`
row, Prefect marks its flow run crashed, the run's status becomes `interrupted` (SIGINT) or
`terminated` (SIGTERM, exit 143 in `flywheel status` too), and the CLI prints one line with the
resume command. Inside a flow a SIGTERM reaches Prefect's handler first, which raises its own
`TerminationSignal` and hands the signal on to this one once the flow has ended; both are read
as the same interruption (storage/interruption.py `interrupted_by`).

A watchdog ends the process if stopping takes longer than `STOP_GRACE_SECONDS`; a second
signal ends it at once. Either hard stop is as safe as kill -9 (every file is written to a
temporary name and renamed, every catalog write is one transaction, and `resume` sweeps what
is left).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from storage.interruption import request

STOP_GRACE_SECONDS = 15.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(say: Callable[[str], None], grace: float = STOP_GRACE_SECONDS
                    ) -> Iterator[None]:
    """Turn SIGINT/SIGTERM into `Interrupted` in the main thread for the body's duration.

    Parameters
    ----------
    say
        Prints one line (used only for a hard stop, where the CLI's own line never comes).
    grace
        Seconds after the first signal before the process is ended regardless.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hard_stop(signum: int, why: str) -> None:
        say(f"error: {why}; stopped hard")
        sys.stderr.flush()
        os._exit(128 + signum)

    def watchdog(signum: int) -> None:
        hard_stop(signum, f"the run did not stop within {grace:g} s of "
                          f"{signal.Signals(signum).name}")

    def handler(signum: int, frame: object) -> None:
        if received:
            hard_stop(signum, f"second {signal.Signals(signum).name}")
        received.append(signum)
        timer = threading.Timer(grace, watchdog, [signum])
        timer.daemon = True
        timer.start()
        raise request(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
