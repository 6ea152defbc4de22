"""Progress of the long stages (tasks/progress.py): plain lines with throughput (in the stage's
unit) and ETA every 10 % or 30 s off a terminal, a bar with them on one; inside a round's plan
both say which stage of the round it is and when the round should end."""

from __future__ import annotations

import io
import logging
import re

from rich.console import Console

from tasks.progress import (
    PlainProgress,
    RoundPlan,
    progress_bar,
    rate_text,
    round_plan,
    seconds_text,
)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_plain_lines_every_tenth_with_rate_and_eta_then_once_at_the_end():
    clock, lines = Clock(), []
    plain = PlainProgress("round 1 rollout", 1000, emit=lines.append, clock=clock)
    for _ in range(100):  # 10 per second
        clock.now += 1.0
        plain.advance(10)
    assert len(lines) == 10, lines
    assert re.fullmatch(r"round 1 rollout: 100/1000 \(10%\), 10\.0 completions/s, "
                        r"eta 1 min 30 s",
                        lines[0]), lines[0]
    assert lines[4].endswith("500/1000 (50%), 10.0 completions/s, eta 50 s")
    assert lines[-1].endswith("1000/1000 (100%), 10.0 completions/s, took 1 min 40 s")
    plain.advance(0)
    assert len(lines) == 10


def test_a_slow_stage_still_reports_every_30_seconds():
    clock, lines = Clock(), []
    plain = PlainProgress("round 2 train", 10_000, emit=lines.append, clock=clock)
    for _ in range(7):  # one step per 10 s: 0.07 % of the total
        clock.now += 10.0
        plain.advance(1, "loss 1.234")
    assert len(lines) == 2, lines  # after 30 s and after 60 s
    assert lines[0].endswith("3/10000 (0%), 10.0 s/step, eta 27 h 46 min, loss 1.234"), lines[0]


def test_a_big_step_emits_one_line_and_skips_the_tenths_it_crossed():
    clock, lines = Clock(), []
    plain = PlainProgress("round 0 rollout", 100, emit=lines.append, clock=clock)
    clock.now += 2.0
    plain.advance(45)
    clock.now += 1.0
    plain.advance(4)  # 49 %: the 40 % line was already given
    assert len(lines) == 1 and "45/100 (45%)" in lines[0]


def test_off_a_terminal_the_bar_logs_plain_lines(caplog):
    caplog.set_level(logging.INFO, logger="flywheel")
    console = Console(file=io.StringIO(), force_terminal=False)
    with progress_bar("round 1 rollout", 20, console=console) as advance:
        for _ in range(20):
            advance(1)
    lines = [r.getMessage() for r in caplog.records if r.name == "flywheel"]
    assert len(lines) == 10 and lines[-1].split(": ", 1)[1].startswith("20/20 (100%)")
    assert console.file.getvalue() == ""


def test_on_a_terminal_the_bar_shows_rate_and_time_left(caplog):
    caplog.set_level(logging.INFO, logger="flywheel")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=150)
    with progress_bar("round 1 rollout", 50, console=console) as advance:
        for _ in range(25):
            advance(1, "loss 0.5")
        console.print("")  # let the live display draw
    text = out.getvalue()
    assert "round 1 rollout" in text and "25/50" in text and "eta" in text, text
    assert "completions/s" in text, text
    assert not [r for r in caplog.records if r.name == "flywheel"]


def test_durations_read_as_seconds_minutes_or_hours():
    assert [seconds_text(s) for s in (0.4, 59, 61, 3600 * 2 + 180)] == [
        "0 s", "59 s", "1 min 1 s", "2 h 3 min"]


def test_inside_a_round_plan_lines_say_the_stage_and_the_rounds_eta():
    # round 2; round 1's verify took 5 s, curate 15 s, train 100 s, evaluate 20 s, promote 1 s
    plan = RoundPlan(2, {"rollout": 60.0, "verify": 5.0, "curate": 15.0, "train": 100.0,
                         "evaluate": 20.0, "promote": 1.0})
    clock, lines = Clock(), []
    plain = PlainProgress("round 2 rollout", 100, emit=lines.append, clock=clock, plan=plan)
    clock.now += 10.0
    plain.advance(50)  # 5 /s: 10 s left, then 141 s of later stages
    assert lines[-1].endswith(
        "round 2 rollout (stage 2 of 7): 50/100 (50%), 5.0 completions/s, eta 10 s, "
        "round eta ~2 min 31 s"), lines[-1]
    clock.now += 10.0
    plain.advance(50)
    assert lines[-1].endswith("took 20 s, round eta ~2 min 21 s"), lines[-1]
    evaluate = PlainProgress("round 2 evaluate", 4, emit=lines.append, clock=clock, plan=plan)
    clock.now += 2.0
    evaluate.advance(4)
    assert "round 2 evaluate (stage 6 of 7): 4/4 (100%), 2.0 answers/s" in lines[-1]
    assert lines[-1].endswith("round eta ~1 s")


def test_round_0_has_no_eta_and_other_rounds_or_stages_no_position():
    clock, lines = Clock(), []
    first = RoundPlan(0)  # nothing ran before the warm-up
    PlainProgress("round 0 train", 1, emit=lines.append, clock=clock, plan=first).advance(1)
    assert "round 0 train (stage 5 of 7): 1/1 (100%)" in lines[-1]
    assert "round eta" not in lines[-1]
    plan = RoundPlan(3, {"promote": 1.0})
    for description in ("round 0 baseline", "round 2 rollout", "warm-up"):
        PlainProgress(description, 1, emit=lines.append, clock=clock, plan=plan).advance(1)
        assert lines[-1].startswith(f"{description}: 1/1") and "stage" not in lines[-1], lines[-1]
        assert "round eta" not in lines[-1]


def test_the_bar_reads_the_round_plan_it_runs_in(caplog):
    caplog.set_level(logging.INFO, logger="flywheel")
    console = Console(file=io.StringIO(), force_terminal=False)
    with round_plan(RoundPlan(1, {"evaluate": 30.0, "promote": 1.0})):
        with progress_bar("round 1 train", 2, console=console) as advance:
            advance(2)
    with progress_bar("round 1 train", 1, console=console) as advance:
        advance(1)  # outside the plan
    lines = [r.getMessage() for r in caplog.records if r.name == "flywheel"]
    assert "round 1 train (stage 5 of 7): 2/2 (100%)" in lines[0], lines
    assert lines[0].endswith("round eta ~31 s"), lines
    assert "stage" not in lines[-1] and "round eta" not in lines[-1], lines


def test_a_rate_below_one_a_second_reads_as_seconds_per_one():
    assert [rate_text(r, "step") for r in (51.25, 1.0, 0.25, 0.0)] == [
        "51.2 steps/s", "1.0 steps/s", "4.0 s/step", "0.0 steps/s"]
