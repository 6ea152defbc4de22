"""The (task, level) bandit over a mix of reasoning-gym tasks (tasks/curriculum/bandit.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tasks.curriculum.bandit import (
    arm_q_values,
    arm_rewards,
    q_values,
    sample_arms,
    task_level_arms,
)

ARMS = task_level_arms(["spell_backward", "basic_arithmetic"], [2, 1])


def _row(task, level, pass_rate, judged=4):
    """A curriculum row of binary rewards: its mean |advantage| is 2 p (1 - p)."""
    return {"task": task, "level": level, "pass_rate": pass_rate, "judged": judged,
            "reward_mad": 2 * pass_rate * (1 - pass_rate)}


def test_arms_are_every_task_and_level():
    assert ARMS == [("spell_backward", 1), ("spell_backward", 2), ("basic_arithmetic", 1),
                    ("basic_arithmetic", 2)]


def test_rewards_and_q_move_only_the_arms_seen():
    round_1 = [_row("spell_backward", 1, 0.5), _row("spell_backward", 1, 1.0),
               _row("basic_arithmetic", 2, 0.25), _row("basic_arithmetic", 1, 0.5, judged=1),
               _row("lcm", 1, 0.5)]
    assert arm_rewards(round_1, ARMS) == {("spell_backward", 1): 0.25,
                                          ("basic_arithmetic", 2): 0.375}
    q = arm_q_values([round_1, [_row("spell_backward", 1, 0.0)]], ARMS, alpha=0.5,
                     initial_q=0.1)
    assert q == pytest.approx({("spell_backward", 1): (0.1 + 0.5 * 0.15) / 2,
                               ("spell_backward", 2): 0.1, ("basic_arithmetic", 1): 0.1,
                               ("basic_arithmetic", 2): 0.1 + 0.5 * 0.275})


def test_one_task_gives_the_level_bandits_values():
    rounds = [[_row("lcm", 2, 0.5), _row("lcm", 3, 0.25)], [_row("lcm", 3, 0.75)]]
    by_arm = arm_q_values(rounds, task_level_arms(["lcm"], [2, 3, 4]), alpha=0.5, initial_q=0.0)
    by_level = q_values(rounds, [2, 3, 4], alpha=0.5, initial_q=0.0)
    assert {level: value for (_, level), value in by_arm.items()} == by_level


def test_draws_favour_the_arm_whose_answers_disagree_most_and_are_seeded():
    q = {arm: 0.0 for arm in ARMS} | {("basic_arithmetic", 2): 0.5}
    drawn = sample_arms(q, 400, temperature=0.1, seed=3)
    counts = Counter(drawn)
    assert counts.most_common(1)[0][0] == ("basic_arithmetic", 2)
    assert counts[("basic_arithmetic", 2)] > 300 and set(counts) <= set(ARMS)
    assert drawn == sample_arms(q, 400, temperature=0.1, seed=3)
    assert drawn != sample_arms(q, 400, temperature=0.1, seed=4)


def test_the_domain_writes_a_problem_of_each_drawn_arm():
    from configs import load_config
    from domains import get_domain

    config = load_config(None, {"domain.name": "reasoning_gym", "domain.min_level": 1,
                                "domain.max_level": 2, "domain.reasoning_gym.tasks":
                                {"spell_backward": 1.0, "basic_arithmetic": 1.0}})
    domain = get_domain("reasoning_gym", config)
    rng = random.Random(0)
    for task, level in sample_arms({arm: 0.0 for arm in ARMS}, 6, temperature=1.0, seed=0):
        problem = domain.generate_task(rng, task, level)
        assert (domain.task_of(problem.text), problem.level) == (task, level)
