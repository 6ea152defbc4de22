"""Progress of the long stages (rollout, training, evaluation): done/total, rate, time left.

On a terminal, a rich bar (`round 1 rollout ━━━━━  1024/4096  25%  51.2/s  0:01:00 left`).
Off a terminal (cron, CI, a redirected log) a bar would be noise, so a plain line goes through
the `flywheel` logger instead, every 10 % of the total or every 30 s, whichever comes first,
and once at the end:

    2025-01-02T03:04:35+00:00 round 1 rollout: 1024/4096 (25%), 51.2/s, eta 60 s
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tasks.stage import timestamp

log = logging.getLogger("flywheel")

EVERY_FRACTION = 0.10
EVERY_SECONDS = 30.0


def seconds_text(seconds: float) -> str:
    """`42 s`, `7 min 5 s` or `2 h 3 min`: a duration for a log line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class PlainProgress:
    """Plain progress lines for a log: `advance(n, note)` counts, `line()` says where it stands.

    A line is emitted when the count crosses the next 10 % of `total`, when 30 s passed since
    the last line, and when the count reaches `total` (each at most once per advance).
    """

    def __init__(self, description: str, total: int, *, emit: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 every_fraction: float = EVERY_FRACTION, every_seconds: float = EVERY_SECONDS):
        self.description, self.total, self.emit, self.clock = description, total, emit, clock
        self.every_fraction, self.every_seconds = every_fraction, every_seconds
        self.done = 0
        self.started = self.last_emitted = clock()
        self.next_tick = 1  # the next multiple of every_fraction that earns a line
        self.finished = False

    def line(self, note: str = "") -> str:
        """`round 1 rollout: 1024/4096 (25%), 51.2/s, eta 60 s[, note]`."""
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        share = self.done / self.total if self.total else 1.0
        parts = [f"{self.done}/{self.total} ({share:.0%})", f"{rate:.1f}/s"]
        if self.done < self.total:
            parts.append("eta " + (seconds_text((self.total - self.done) / rate) if rate > 0
                                   else "unknown"))
        else:
            parts.append(f"took {seconds_text(elapsed)}")
        if note:
            parts.append(note)
        return f"{timestamp()} {self.description}: {', '.join(parts)}"

    def advance(self, n: int, note: str = "") -> None:
        if self.finished:
            return
        self.done += n
        now = self.clock()
        ticks = int(self.done / self.total / self.every_fraction + 1e-9) if self.total else 0
        self.finished = self.done >= self.total
        if not (ticks >= self.next_tick or now - self.last_emitted >= self.every_seconds
                or self.finished):
            return
        self.next_tick = max(self.next_tick, ticks + 1)
        self.last_emitted = now
        self.emit(self.line(note))


def rate_column() -> TextColumn:
    """Throughput of the bar's task (`51.2/s`), blank until rich has measured one."""
    return TextColumn("{task.fields[rate]}")


@contextmanager
def progress_bar(description: str, total: int, *,
                 console: Console | None = None) -> Iterator[Callable[..., None]]:
    """Yield `advance(n, note="")`: a bar with throughput and ETA on a terminal, plain log
    lines every 10 % or 30 s elsewhere (`PlainProgress`)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        plain = PlainProgress(description, total, emit=log.info)
        yield plain.advance
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TaskProgressColumn(), rate_column(), TimeElapsedColumn(),
                  TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                  console=console, transient=True) as progress:
        handle = progress.add_task(description, total=total, note="", rate="")

        def advance(n: int, note: str = "") -> None:
            progress.update(handle, advance=n, note=note)
            speed = progress.tasks[0].speed  # the bar's only task
            if speed:
                progress.update(handle, rate=f"{speed:.1f}/s")

        yield advance
