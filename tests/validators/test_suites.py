"""The suites' shape: which frames each kind checks, and that storage builds every one of them."""

from __future__ import annotations

import pytest

from configs import GatesConfig
from storage.datasets import SCHEMAS
from storage.gate_data import FRAMES
from validators.suites import KIND_CHECKS, SuiteContext, build_suites

PREVIOUS = {"text_length": 10.0, "level": 2.0}


def test_every_kind_has_checks():
    assert set(KIND_CHECKS) == set(SCHEMAS)


@pytest.mark.parametrize(("kind", "context", "frames"), [
    ("proposals", SuiteContext(round=1), ["rows"]),
    ("problems", SuiteContext(round=1), ["rows"]),
    ("problems", SuiteContext(round=1, previous_problems=PREVIOUS), ["rows", "lengths"]),
    ("rollouts", SuiteContext(round=1), ["rows"]),
    ("verdicts", SuiteContext(round=0, samples_per_problem=4), ["rows"]),
    ("verdicts", SuiteContext(round=1, samples_per_problem=4), ["rows", "per_problem"]),
    ("curriculum", SuiteContext(round=1), ["rows"]),
    ("train_rows", SuiteContext(round=1), ["rows"]),
    ("evals", SuiteContext(round=1), ["rows"]),
])
def test_frames_of_each_kind_are_frames_storage_builds(kind, context, frames):
    suites = build_suites(kind, GatesConfig(), context)
    assert [s.frame for s in suites] == frames
    assert set(frames) <= set(FRAMES)
    assert all(s.expectations for s in suites)


def test_rows_suite_starts_with_the_schema_and_ends_with_the_kind_checks():
    rows = build_suites("curriculum", GatesConfig(), SuiteContext(run_id="r", round=2))[0]
    checks = [e.meta["check"] for e in rows.expectations]
    assert checks[0].startswith("columns are problem_id, run_id, round")
    assert checks[1] == f"at least {GatesConfig().min_rows} rows"
    assert checks.index("run_id is r") < checks.index("judged <= samples")
    assert checks[-1] == (f"mean pass rate strictly between {GatesConfig().min_mean_pass_rate}"
                          f" and {GatesConfig().max_mean_pass_rate}")


def test_answer_spread_needs_two_samples_per_problem():
    def per_problem(samples):
        suites = build_suites("verdicts", GatesConfig(),
                              SuiteContext(round=1, samples_per_problem=samples))
        return [e.column for e in suites[1].expectations]

    assert per_problem(1) == ["pass_rate"]
    assert per_problem(2) == ["pass_rate", "answer_spread"]


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(KeyError, match="known: proposals, problems"):
        build_suites("checkpoint", GatesConfig(), SuiteContext())
