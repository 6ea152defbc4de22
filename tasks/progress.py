"""Progress of the long stages (rollout, training, evaluation): done/total, rate, time left.

On a terminal, a rich bar (`round 1 rollout (stage 2 of 7) ━━━━━  1024/4096  25%  51.2
completions/s  0:00:20 eta 0:01:00  round eta ~6 min 5 s`). Off a terminal (cron, CI, a
redirected log) a bar would be noise, so a plain line goes through the `flywheel` logger instead,
every 10 % of the total or every 30 s, whichever comes first, and once at the end:

    2025-01-02T03:04:35+00:00 round 1 rollout (stage 2 of 7): 1024/4096 (25%),
        51.2 completions/s, eta 60 s, round eta ~6 min 5 s          (one line in the log)

The rate names its unit: what the stage counts (`STAGE_UNITS`: completions, steps, answers),
per second, or seconds per one when slower than one a second (`10.0 s/step`).

"stage N of M" and the round's ETA come from the round's plan (`RoundPlan`), which the flywheel
flow sets around each round (tasks/tracking.py `observed_round`): the round's stages in order
(`ROUND_STAGES`) and how long each took in the latest earlier round that ran it (the catalog's
stage rows). The round ETA is this stage's time left plus those earlier times of the stages
after it, so it is an estimate (`~`) and absent in round 0, which has no earlier round; a round
with fewer stages (no training rows: no train or evaluate) ends sooner than it says. Outside a
plan (the baseline, a test, a script) the lines have neither.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

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

from storage.train_stages import TRAIN_STAGES

log = logging.getLogger("flywheel")

EVERY_FRACTION = 0.10
EVERY_SECONDS = 30.0
# the stages of a round in the order they run (flows/run.py `round_flow`)
ROUND_STAGES = ("synthesize", "rollout", "verify", "curate", "train", "evaluate", "promote")
# what a stage's progress counts (the rate's unit); any other stage counts "items"
STAGE_UNITS = {"rollout": "completion", **dict.fromkeys(TRAIN_STAGES, "step"),
               "evaluate": "answer", "baseline": "answer"}
# a progress description: "round <N> <stage>" (tasks/rollout.py, evaluate.py, train.py)
DESCRIPTION = re.compile(r"round (?P<round>\d+) (?P<stage>\S+)")


def seconds_text(seconds: float) -> str:
    """`42 s`, `7 min 5 s` or `2 h 3 min`: a duration for a log line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def rate_text(rate: float, unit: str) -> str:
    """`51.2 completions/s`, or `10.0 s/step` below one a second (a slow training reads better
    as seconds per step than as `0.1 steps/s`)."""
    if 0 < rate < 1:
        return f"{1 / rate:.1f} s/{unit}"
    return f"{rate:.1f} {unit}s/s"


@dataclass(frozen=True)
class RoundPlan:
    """The round a progress line belongs to: its index and, per stage, the seconds the stage
    took in the latest earlier round that ran it (none in round 0)."""

    round_index: int
    earlier_seconds: dict[str, float] = field(default_factory=dict)

    def position(self, stage: str) -> str | None:
        """`stage 2 of 7` for a stage of the round, else None."""
        if stage not in ROUND_STAGES:
            return None
        return f"stage {ROUND_STAGES.index(stage) + 1} of {len(ROUND_STAGES)}"

    def seconds_after(self, stage: str) -> float | None:
        """The earlier round's seconds of the stages after `stage`; None without an earlier
        round or for a stage outside the round."""
        if stage not in ROUND_STAGES or not self.earlier_seconds:
            return None
        later = ROUND_STAGES[ROUND_STAGES.index(stage) + 1:]
        return sum(self.earlier_seconds.get(name, 0.0) for name in later)


_ROUND_PLAN: ContextVar[RoundPlan | None] = ContextVar("flywheel_round_plan", default=None)


@contextmanager
def round_plan(plan: RoundPlan) -> Iterator[RoundPlan]:
    """Progress lines of the stages run inside this block belong to `plan`'s round (a context
    variable: the round flow's tasks run in the flow's thread and context)."""
    token = _ROUND_PLAN.set(plan)
    try:
        yield plan
    finally:
        _ROUND_PLAN.reset(token)


@dataclass(frozen=True)
class StageLabel:
    """What a progress description says once read: its text with the stage's position, the
    rate's unit and the round's plan (None when it is not a stage of the current round)."""

    text: str
    unit: str
    stage: str | None
    plan: RoundPlan | None

    @classmethod
    def of(cls, description: str, plan: RoundPlan | None) -> StageLabel:
        match = DESCRIPTION.fullmatch(description)
        stage = match["stage"] if match else None
        unit = STAGE_UNITS.get(stage, "item")
        if match is None or plan is None or int(match["round"]) != plan.round_index \
                or plan.position(stage) is None:
            return cls(description, unit, None, None)
        return cls(f"{description} ({plan.position(stage)})", unit, stage, plan)

    def round_eta(self, stage_seconds_left: float | None) -> str | None:
        """`round eta ~6 min 5 s`: this stage's seconds left plus the later stages' earlier
        times; None without a plan, an earlier round or a rate yet."""
        after = None if self.plan is None else self.plan.seconds_after(self.stage)
        if after is None or stage_seconds_left is None:
            return None
        return f"round eta ~{seconds_text(stage_seconds_left + after)}"


class PlainProgress:
    """Plain progress lines for a log: `advance(n, note)` counts, `line()` says where it stands.

    A line is emitted when the count crosses the next 10 % of `total`, when 30 s passed since
    the last line, and when the count reaches `total` (each at most once per advance).
    """

    def __init__(self, description: str, total: int, *, emit: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 every_fraction: float = EVERY_FRACTION, every_seconds: float = EVERY_SECONDS,
                 plan: RoundPlan | None = None):
        self.label = StageLabel.of(description, plan)
        self.description, self.total, self.emit, self.clock = description, total, emit, clock
        self.every_fraction, self.every_seconds = every_fraction, every_seconds
        self.done = 0
        self.started = self.last_emitted = clock()
        self.next_tick = 1  # the next multiple of every_fraction that earns a line
        self.finished = False

    def line(self, note: str = "") -> str:
        """`round 1 rollout (stage 2 of 7): 1024/4096 (25%), 51.2 completions/s, eta 60 s,
        round eta ~6 min 5 s[, note]`."""
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        share = self.done / self.total if self.total else 1.0
        parts = [f"{self.done}/{self.total} ({share:.0%})", rate_text(rate, self.label.unit)]
        left = (self.total - self.done) / rate if rate > 0 else None
        if self.done < self.total:
            parts.append("eta " + (seconds_text(left) if left is not None else "unknown"))
        else:
            left = 0.0
            parts.append(f"took {seconds_text(elapsed)}")
        if round_eta := self.label.round_eta(left):
            parts.append(round_eta)
        if note:
            parts.append(note)
        return f"{self.label.text}: {', '.join(parts)}"

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
    """Throughput of the bar's task (`51.2 completions/s`), blank until rich has measured one."""
    return TextColumn("{task.fields[rate]}")


@contextmanager
def progress_bar(description: str, total: int, *,
                 console: Console | None = None) -> Iterator[Callable[..., None]]:
    """Yield `advance(n, note="")`: a bar with throughput and ETA on a terminal, plain log
    lines every 10 % or 30 s elsewhere (`PlainProgress`); both with the stage's position and
    the round's ETA inside a round's plan (`round_plan`)."""
    console = console or Console(stderr=True)
    plan = _ROUND_PLAN.get()
    if not console.is_terminal:
        plain = PlainProgress(description, total, emit=log.info, plan=plan)
        yield plain.advance
        return
    label = StageLabel.of(description, plan)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TaskProgressColumn(), rate_column(), TimeElapsedColumn(),
                  TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[round]}"),
                  TextColumn("{task.fields[note]}"), console=console,
                  transient=True) as progress:
        handle = progress.add_task(label.text, total=total, note="", rate="", round="")

        def advance(n: int, note: str = "") -> None:
            progress.update(handle, advance=n, note=note)
            bar = progress.tasks[0]  # the bar's only task
            if bar.speed:
                progress.update(handle, rate=rate_text(bar.speed, label.unit),
                                round=label.round_eta(bar.time_remaining) or "")

        yield advance
