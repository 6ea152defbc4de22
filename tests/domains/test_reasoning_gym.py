"""The reasoning-gym domain: tasks in every row, fixed disjoint held-out set, task scorers."""

from __future__ import annotations

import random

import pytest

from configs import load_config
from domains import get_domain
from domains.base import problem_row
from domains.reasoning_gym import GENERATOR_SEED, HELDOUT_SEED, split_text
from tasks.evaluate import accuracy, heldout_tasks
from tasks.verify import verdict_metrics, verdict_rows
from tests.domains.labels import labelled

TASKS = {"basic_arithmetic": 1.0, "spell_backward": 1.0, "lcm": 0.0}


def _domain(**overrides):
    config = load_config(None, {"domain.name": "reasoning_gym", "domain.min_level": 1,
                                "domain.max_level": 2, "domain.reasoning_gym.tasks": TASKS,
                                "verify.extract": ["whole"], **overrides})
    return get_domain("reasoning_gym", config)


@pytest.fixture(scope="module")
def domain():
    return _domain()


def test_heldout_is_fixed_per_task_and_level(domain):
    items = domain.heldout(4)
    assert items == domain.heldout(4) == _domain().heldout(4)  # another instance: the same
    counts = {}
    for p in items:
        task, level, _ = split_text(p.text)
        assert level == p.level and p.reference
        counts[(task, level)] = counts.get((task, level), 0) + 1
    assert counts == {(t, lv): 4 for t in TASKS for lv in (1, 2)}


def test_generator_never_draws_heldout_seeds(domain):
    assert GENERATOR_SEED > HELDOUT_SEED + 10**6
    heldout = {p.text for p in domain.heldout(20)}
    rng = random.Random(3)
    drawn = {domain.generate_task(rng, "lcm", 2).text for _ in range(300)}
    assert len(drawn) > 250 and not drawn & heldout


def test_generated_problems_record_their_task_and_parse_back(domain):
    rng = random.Random(0)
    problems = [domain.generate(rng, 2) for _ in range(40)]
    assert {domain.task_of(p.text) for p in problems} == {"basic_arithmetic", "spell_backward"}
    for p in problems:
        assert domain.parse(p.text) == p  # the reference comes back for the generator's text
        assert domain.solver_prompt(p.text).startswith("<solve>")
        assert domain.task_of(p.text) not in domain.solver_prompt(p.text)  # the question only


@pytest.mark.parametrize(("text", "reason"), [("", "empty"), ("no tag here", "malformed"),
                                              ("gcd L1: Find the GCD of 4, 6", "unknown_task"),
                                              ("lcm L4: Find the LCM of 4, 6", "unknown_level")])
def test_parse_rejects(domain, text, reason):
    assert domain.parse(text).reason == reason


def test_a_proposer_problem_has_no_reference(domain):
    problem = domain.parse("basic_arithmetic L1: Calculate 123456 + 1.")
    assert problem.reference is None and problem.level == 1


def test_partial_credit_passes_through_unchanged(domain):
    text = "spell_backward L2: Spell this word backward (example: sun -> nus): chess"
    entry = {"question": "", "answer": "ssehc", "metadata": {}}
    expected = domain.dataset("spell_backward", 1, GENERATOR_SEED).score_answer("ssehd", entry)
    assert 0 < expected < 1
    judged = domain.judge(["ssehd", "ssehc", "  "],
                          labelled(["ssehc", "ssehc", "ssehc"], text=text))
    assert [j.reward for j in judged] == [expected, 1.0, None]
    assert judged[2].reason == "no_answer"


def test_verdicts_record_why_an_answer_was_not_judged(domain):
    problem = domain.generate(random.Random(1), 1)
    problems = [{"problem_id": "p", **problem_row(problem)}]
    rollouts = [{"rollout_id": f"r{i}", "run_id": "run", "round": 1, "problem_id": "p",
                 "completion": c} for i, c in enumerate([problem.reference, "", "zzz"])]
    rows = verdict_rows(domain, rollouts, problems)
    assert [(r["reward"], r["method"]) for r in rows][:2] == [(1.0, "reference"),
                                                              (None, "no_answer")]
    assert rows[2]["method"] == "reference" and rows[2]["reward"] < 1
    metrics = verdict_metrics(rows, problems)
    assert metrics["unjudged"] == 1 and metrics["unjudged_no_answer"] == 1


def test_heldout_accuracy_per_task_and_level(domain):
    tasks = heldout_tasks(domain, 2)
    assert len(tasks) == 12 and set(tasks.values()) == set(TASKS)
    rows = [{"item_id": item, "level": 1 + index % 2, "correct": task == "lcm"}
            for index, (item, task) in enumerate(tasks.items())]
    out = accuracy(rows, tasks)
    assert out["accuracy_task_lcm"] == 1.0 and out["accuracy_task_spell_backward"] == 0.0
    assert out["accuracy_task_lcm_level_2"] == 1.0 and out["accuracy"] == pytest.approx(1 / 3)


def test_arithmetic_has_no_task_metrics():
    assert heldout_tasks(get_domain("arithmetic"), 2) == {}


@pytest.mark.parametrize(("tasks", "needle"),
                         [({"basic_arithmetc": 1.0}, "not a reasoning-gym dataset"),
                          ({"basic_arithmetic": 0.0}, "weight > 0")])
def test_bad_tasks_are_one_line_errors(tasks, needle):
    with pytest.raises(ValueError, match=needle) as info:
        _domain(**{"domain.reasoning_gym.tasks": tasks})
    assert "\n" not in str(info.value)


def test_the_learning_plans_families_score_their_references_in_full():
    """The families of bench/plans/reasoning-gym-curriculum.toml, and chain_sum tried beside
    them (docs/learning.md): each reference, written as the model is trained to answer, earns
    the full reward at levels 1-3, so a family that stays at 0 there is not learned, not
    mis-scored."""
    from pathlib import Path

    from bench.learning import ARMS
    from bench.learning_plan import load_plan

    root = Path(__file__).parents[2]
    plan = load_plan(root / "bench" / "plans" / "reasoning-gym-curriculum.toml", list(ARMS))
    tasks = {**plan.overrides["domain.reasoning_gym.tasks"], "chain_sum": 1.0}
    config = load_config(root / plan.config, {**plan.overrides,
                                              "domain.reasoning_gym.tasks": tasks})
    domain = get_domain("reasoning_gym", config)
    rng = random.Random(0)
    problems = [domain.generate_task(rng, task, level)
                for task in tasks for level in (1, 2, 3) for _ in range(8)]
    judged = domain.judge([domain.training_target(p.reference) for p in problems],
                          [problem_row(p) for p in problems])
    assert {(p.task, p.level) for p in problems} == {(t, lv) for t in tasks for lv in (1, 2, 3)}
    short = [(p.task, p.level, p.reference, j)
             for p, j in zip(problems, judged, strict=True) if j.reward != 1.0]
    assert len(judged) == len(problems) and not short, short
