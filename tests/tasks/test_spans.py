"""Spans (tasks/spans.py): exclusive seconds per (stage, part), nothing outside a recording."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from tasks import spans


def test_a_span_leaves_out_the_spans_opened_inside_it():
    with spans.recording() as recording:
        with spans.stage("rollout"), spans.spent("own work"):
            time.sleep(0.05)
            with spans.spent("sampling"):
                time.sleep(0.10)
    seconds = recording.seconds()
    assert set(seconds) == {("rollout", "own work"), ("rollout", "sampling")}
    assert seconds[("rollout", "sampling")] == pytest.approx(0.10, abs=0.03)
    assert seconds[("rollout", "own work")] == pytest.approx(0.05, abs=0.03)


def test_parts_outside_every_stage_and_calls_are_counted():
    with spans.recording() as recording:
        for _ in range(3):
            with spans.spent("log forwarding"):
                pass
        with spans.stage("verify"), spans.spent("gates"):
            pass
    assert recording.calls() == {("-", "log forwarding"): 3, ("verify", "gates"): 1}


def test_nothing_is_recorded_outside_a_recording():
    with spans.recording() as recording:
        pass
    with spans.stage("train"), spans.spent("training"):
        pass
    assert recording.seconds() == {}


def test_a_failing_block_still_counts_its_seconds():
    with spans.recording() as recording, pytest.raises(ValueError):
        with spans.spent("gates"):
            raise ValueError("gate")
    assert list(recording.seconds()) == [("-", "gates")]


def test_a_thread_in_a_copied_context_records_beside_its_parent_not_inside_it():
    with spans.recording() as recording:
        with spans.stage("rollout"), spans.spent("own work"):
            context = contextvars.copy_context()

            def shard() -> None:
                with spans.spent("sampling"):
                    time.sleep(0.10)

            worker = threading.Thread(target=context.run, args=(shard,))
            worker.start()
            worker.join()
    seconds = recording.seconds()
    assert seconds[("rollout", "sampling")] == pytest.approx(0.10, abs=0.03)
    # the parent waited for the thread: its own seconds are not reduced by the thread's
    assert seconds[("rollout", "own work")] >= 0.09
