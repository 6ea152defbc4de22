"""The synthesize stage drawing reasoning-gym generator problems by the (task, level) bandit
(`[synthesize.bandit] arms = "task_level"`, tasks/synthesize.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from configs import ConfigError, load_config
from configs.settings import stage_settings
from domains.reasoning_gym import split_text
from storage.datasets import read_rows, write_atomic
from tasks import synthesize as synthesize_module
from tasks.context import Checkpoint, RunContext
from tasks.stage import StageOutput

TASKS = {"basic_arithmetic": 1.0, "spell_backward": 1.0, "lcm": 0.0}
ARM_KEYS = {"synthesize.source": "generator", "synthesize.level_scheduler": "bandit",
            "synthesize.bandit.arms": "task_level"}


def _config(**overrides):
    return load_config(None, {"domain.name": "reasoning_gym", "domain.min_level": 1,
                              "domain.max_level": 2, "domain.reasoning_gym.tasks": TASKS,
                              "domain.heldout_per_level": 2, "synthesize.proposals": 60,
                              "gates.enabled": False, **overrides})


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"synthesize.bandit.arms": "task_level"}, "needs level_scheduler = 'bandit' and source"),
    ({**ARM_KEYS, "synthesize.source": "proposer"}, "they are 'bandit' and 'proposer'"),
    ({**ARM_KEYS, "domain.name": "arithmetic"}, "domain.name is 'arithmetic'"),
])
def test_task_level_arms_need_a_generator_round_of_reasoning_gym(overrides, needle):
    with pytest.raises(ConfigError, match="bandit.arms") as error:
        _config(**overrides)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_the_round_settings_hold_the_bandit_and_the_warm_up_is_shared():
    arms = stage_settings(_config(**ARM_KEYS), "synthesize", 1)
    assert arms.synthesize.bandit.arms == "task_level"
    assert stage_settings(_config(**ARM_KEYS, **{"synthesize.bandit.alpha": 0.2}),
                          "synthesize", 1) != arms
    assert stage_settings(_config(**ARM_KEYS), "synthesize", 0) == stage_settings(
        _config(), "synthesize", 0)  # the warm-up is shared


def _round(tmp_path, config, pass_rates):
    """synthesize.fn for round 2 after a round 1 whose problems of each (task, level) arm have
    the given pass rates (problems and curriculum files written here)."""
    ctx = RunContext(data_root=tmp_path, run_id="arms", config=config)
    ctx.catalog.ensure_run("arms", config.model_dump_json())
    problems, curriculum = [], []
    for (task, level), rates in pass_rates.items():
        for n, rate in enumerate(rates):
            pid = f"{task}-{level}-{n}"
            problems.append({"problem_id": pid, "run_id": "arms", "round": 1,
                             "text": f"{task} L{level}: item {n}", "reference": "1",
                             "level": level, "source": "generator", "proposal_id": f"p{pid}"})
            curriculum.append({"problem_id": pid, "run_id": "arms", "round": 1, "level": level,
                               "samples": 4, "judged": 4, "passed": round(4 * rate),
                               "pass_rate": rate, "reward_std": 0.0,
                               "reward_mad": 2 * rate * (1 - rate), "kept": True,
                               "drop_reason": None})
    write_atomic("problems", problems, tmp_path / "problems-1.parquet")
    write_atomic("curriculum", curriculum, tmp_path / "curriculum-1.parquet")
    earlier_problems = [StageOutput("synthesize", 1, "problems-round-1",
                                    {"problems": tmp_path / "problems-1.parquet"}, True)]
    curated = [StageOutput("curate", 1, f"c{sorted(pass_rates.items())}",
                           {"curriculum": tmp_path / "curriculum-1.parquet"}, True)]
    out = synthesize_module.synthesize.fn(ctx, 2, Checkpoint(tmp_path, "ckpt"), earlier_problems,
                                          curated)
    metrics = {r["name"]: r["value"] for r in ctx.catalog.query(
        "SELECT name, value FROM metrics WHERE stage = 'synthesize'")}
    return out, metrics, read_rows(out.path("proposals"))


EDGE_AT_SPELL_2 = {("basic_arithmetic", 1): [1.0, 1.0], ("basic_arithmetic", 2): [0.0, 1.0],
                   ("spell_backward", 1): [0.0, 0.0], ("spell_backward", 2): [0.5, 0.5]}


def test_generator_problems_follow_the_arms_the_bandit_draws(tmp_path):
    out, metrics, proposals = _round(tmp_path / "a", _config(**ARM_KEYS), EDGE_AT_SPELL_2)
    drawn = Counter(split_text(p["text"])[:2] for p in proposals)
    arms = [(t, lv) for t in ("basic_arithmetic", "spell_backward") for lv in (1, 2)]
    assert {arm: metrics[f"requested_task_{arm[0]}_level_{arm[1]}"] for arm in arms} == {
        arm: drawn[arm] for arm in arms}  # the metrics count the problems written
    assert sum(drawn.values()) == 60 and set(drawn) <= set(arms)  # no weight-0 task (lcm)
    assert drawn[("spell_backward", 2)] > 30
    assert (metrics["bandit_q_task_spell_backward_level_2"]
            > metrics["bandit_q_task_basic_arithmetic_level_1"]
            == metrics["bandit_q_task_spell_backward_level_1"])
    assert all(p["source"] == "generator" and p["prompt"] == f"<propose>L{p['level']}:"
               for p in proposals)
    again, _, repeated = _round(tmp_path / "b", _config(**ARM_KEYS), EDGE_AT_SPELL_2)
    assert again.fingerprint == out.fingerprint and repeated == proposals  # resume: same draws
    flat = {arm: [0.5, 0.5] for arm in EDGE_AT_SPELL_2}
    other, _, _ = _round(tmp_path / "c", _config(**ARM_KEYS), flat)
    assert other.fingerprint != out.fingerprint  # the curricula replayed are in it


def test_without_the_key_the_generator_round_is_the_uniform_curriculum(tmp_path):
    uniform = _config(**{"synthesize.source": "generator"})
    out, metrics, proposals = _round(tmp_path / "a", uniform, EDGE_AT_SPELL_2)
    assert not any(name.startswith(("bandit_", "requested_")) for name in metrics)
    assert Counter(p["level"] for p in proposals) == {1: 30, 2: 30}  # levels in equal shares
    flat = {arm: [0.5, 0.5] for arm in EDGE_AT_SPELL_2}
    assert _round(tmp_path / "b", uniform, flat)[0].fingerprint == out.fingerprint


def test_the_fixed_schedule_draws_its_rounds_level_only(tmp_path):
    fixed = _config(**{"synthesize.source": "generator", "synthesize.level_scheduler": "fixed"})
    out, metrics, proposals = _round(tmp_path / "a", fixed, EDGE_AT_SPELL_2)
    assert Counter(p["level"] for p in proposals) == {2: 60}  # round 2: min_level + 1
    assert {split_text(p["text"])[1] for p in proposals} == {2}
    assert {split_text(p["text"])[0] for p in proposals} == {"basic_arithmetic", "spell_backward"}
    assert not any(name.startswith(("bandit_", "requested_")) for name in metrics)
    uniform = _config(**{"synthesize.source": "generator"})
    assert _round(tmp_path / "b", uniform, EDGE_AT_SPELL_2)[0].fingerprint != out.fingerprint
