"""Where a round's seconds go: named spans of work, summed per (stage, part), exclusive.

The stage runner (tasks/stage.py) marks its parts (the done check, the stage's own work, the
Parquet writes, checkpoint hashing, gates, the catalog row) and bench/round_overhead.py wraps
the model (sampling, training) and Prefect's log handlers the same way. Outside `recording()`
a span costs one context lookup and records nothing, so the runner keeps its marks on.

    with recording() as spans:           # the benchmark
        run_the_round()
    spans.seconds()                       # {("rollout", "sampling"): 25.4,
                                          #  ("rollout", "own work"): 0.8,
                                          #  ("rollout", "gates"): 0.2, ...}

Spans are exclusive: a span's seconds leave out the spans opened inside it (the model's
sampling inside a stage's work is counted once, as sampling), so a recording's seconds add up
to the time it covered, and what no span covers (between stages: Prefect's task orchestration,
the flows' own steps) is the wall time minus their sum. The innermost `stage(...)` names the
stage a span belongs to ("-" outside every stage). A thread sees the recording only where it
runs in a copy of the context that opened it (Prefect's task runners copy it); its spans are
not taken out of the span open in the thread that started it, since they ran beside it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

OUTSIDE = "-"


@dataclass
class Recording:
    """Seconds and calls per (stage, part); thread-safe."""

    _seconds: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    _calls: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: tuple[str, str], seconds: float) -> None:
        with self._lock:
            self._seconds[key] += seconds
            self._calls[key] += 1

    def seconds(self) -> dict[tuple[str, str], float]:
        with self._lock:
            return dict(self._seconds)

    def calls(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._calls)


@dataclass
class _Open:
    """An open span: what it is, and the seconds of the spans opened inside it."""

    key: tuple[str, str]
    thread: int
    inner: float = 0.0


_recording: ContextVar[Recording | None] = ContextVar("flywheel_spans", default=None)
_stage: ContextVar[str] = ContextVar("flywheel_span_stage", default=OUTSIDE)
_open: ContextVar[_Open | None] = ContextVar("flywheel_open_span", default=None)


@contextmanager
def recording() -> Iterator[Recording]:
    """Record every span opened in this context (and the contexts copied from it)."""
    spans = Recording()
    token = _recording.set(spans)
    try:
        yield spans
    finally:
        _recording.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Spans opened inside belong to stage `name`."""
    token = _stage.set(name)
    try:
        yield
    finally:
        _stage.reset(token)


@contextmanager
def spent(part: str) -> Iterator[None]:
    """Count the seconds inside, less those of the spans opened inside, as `part` of the
    current stage."""
    spans = _recording.get()
    if spans is None:
        yield
        return
    outer = _open.get()
    mine = _Open((_stage.get(), part), threading.get_ident())
    token = _open.set(mine)
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _open.reset(token)
        spans.add(mine.key, elapsed - mine.inner)
        if outer is not None and outer.thread == mine.thread:
            outer.inner += elapsed


def current() -> tuple[str, str] | None:
    """The (stage, part) of the innermost span open in this context; None outside every span."""
    mine = _open.get()
    return None if mine is None else mine.key
