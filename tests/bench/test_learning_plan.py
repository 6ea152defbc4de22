"""bench/learning.py's pre-registered plans (bench/learning_plan.py), its task-mix arms, and the
per-task figures of its summary (bench/learning_summary.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench import learning_measure, learning_summary
from bench.learning_plan import BENCH_FILES, check_registered, load_plan, registration
from configs import ConfigError, load_config
from configs.settings import stage_settings
from tasks.curriculum.votes import majority_vote
from tasks.fingerprints import stage_fingerprints

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "bench" / "plans" / "reasoning-gym-curriculum.toml"
_SPEC = importlib.util.spec_from_file_location("learning_bench", ROOT / "bench" / "learning.py")
learning = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(learning)
ARMS = list(learning.ARMS)

VALID = """config = "configs/reasoning-gym-tiny.toml"
rounds = 3
arms = ["bandit", "uniform"]
reference = "bandit"
primary = "uniform"
tuning_seeds = [0, 1]
test_seeds = [4, 5]
wide_eval = 0
registered = true

[overrides]
"train.max_steps" = 10
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_the_committed_plan_loads_and_every_arm_of_it_is_a_valid_config():
    plan = load_plan(PLAN, ARMS)
    assert plan.reference == "bandit" and plan.primary == "uniform"
    assert not set(plan.tuning_seeds) & set(plan.test_seeds)
    warmups = set()
    for arm in plan.arms:
        config = load_config(plan.config, learning.arm_overrides(
            arm, plan.overrides, seed=4, rounds=plan.rounds, equal_steps=True))
        assert config.rounds == plan.rounds and config.seed == 4
        assert config.domain.reasoning_gym.tasks == plan.overrides["domain.reasoning_gym.tasks"]
        if arm != "no_self_play":  # its curate settings hold solver_targets = reference
            warmups.add(tuple(stage_settings(config, stage, 0, dtype="float32").model_dump_json()
                              for stage in ("synthesize", "rollout", "verify", "curate", "train")))
    assert len(warmups) == 1  # the generator arms' warm-ups are the same stages
    assert load_config(plan.config, learning.arm_overrides(
        "bandit", plan.overrides, seed=4, rounds=3, equal_steps=True)).synthesize.bandit.arms \
        == "task_level"
    assert load_config(plan.config, learning.arm_overrides(
        "fixed_schedule", plan.overrides, seed=4, rounds=3,
        equal_steps=True)).synthesize.level_scheduler == "fixed"


def test_the_proposer_arm_writes_majority_labelled_problems_after_the_same_warmup():
    """On a reasoning-gym mix the proposer arm's problems have no reference (majority labels);
    with curate.warmup_proposer_rows on for every arm, its warm-up draws, samples and trains
    as the generator arms' do (its verify and curate carry the arm's labels and targets; the
    warm-up's solver rows are the seed references either way)."""
    plan = load_plan(PLAN, ARMS)
    overrides = {**plan.overrides, "curate.warmup_proposer_rows": True}
    configs = {arm: load_config(plan.config, learning.arm_overrides(
        arm, overrides, seed=4, rounds=plan.rounds, equal_steps=True))
        for arm in ("proposer", "uniform", "bandit")}
    proposer = configs["proposer"]
    assert proposer.synthesize.source == "proposer" and proposer.verify.labels == "majority"
    assert proposer.curate.proposer_rows and proposer.curate.warmup_proposer_rows
    warmups = {tuple(stage_settings(config, stage, 0, dtype="float32").model_dump_json()
                     for stage in ("synthesize", "rollout", "train"))
               for config in configs.values()}
    assert len(warmups) == 1
    rounds = {arm: stage_settings(config, "verify", 1, dtype="float32").model_dump_json()
              for arm, config in configs.items()}
    assert rounds["proposer"] != rounds["uniform"]  # majority labels from round 1 on


def test_the_plans_arms_share_their_warm_up_stages_by_fingerprint():
    """What bench/learning.py forks from a seed's first arm into the others (storage/fork.py):
    every round-0 stage whose fingerprint the arm's config gives too. The generator arms share
    all of round 0; no_self_play, whose [curate] holds solver_targets = reference, shares the
    stages before its warm-up's curate."""
    plan = load_plan(PLAN, ARMS)
    warmups = {arm: stage_fingerprints(load_config(plan.config, learning.arm_overrides(
        arm, plan.overrides, seed=4, rounds=plan.rounds, equal_steps=True)), rounds=0)
        for arm in plan.arms}
    first = warmups[plan.arms[0]]
    for arm in ("uniform", "fixed_schedule"):
        assert warmups[arm] == first, arm
    alike = {stage for (stage, _), fingerprint in warmups["no_self_play"].items()
             if first[stage, 0] == fingerprint}
    assert alike == {"base", "baseline", "synthesize", "rollout", "verify"}


def test_the_bandit_arm_needs_a_task_mix():
    with pytest.raises(ConfigError, match="domain.name is 'arithmetic'"):
        load_config(None, learning.arm_overrides("bandit", {}, seed=0, rounds=2,
                                                 equal_steps=True))


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda t: 'colour = "red"\n' + t, "unknown key 'colour'"),
    (lambda t: t.replace("rounds = 3", 'rounds = "3"'), "rounds must be a int"),
    (lambda t: t.replace("wide_eval = 0\n", ""), "missing key 'wide_eval'"),
    (lambda t: t.replace('"bandit", "uniform"]', '"bandit", "uniformm"]'),
     "primary = 'uniform' is not one of arms"),
    (lambda t: t.replace('primary = "uniform"', 'primary = "bandit"').replace(
        '"bandit", "uniform"]', '"bandit", "sideways"]'), "unknown arm 'sideways'"),
    (lambda t: t.replace("test_seeds = [4, 5]", "test_seeds = [1, 5]"),
     "seeds [1] are both tuning and test seeds"),
    (lambda t: t.replace("tuning_seeds = [0, 1]", "tuning_seeds = []"), "tuning_seeds must list"),
    (lambda t: t.replace("rounds = 3", "rounds = 0"), "rounds must be >= 1"),
    (lambda t: t.replace("[overrides]", "[overrides"), "plan.toml"),
])
def test_a_bad_plan_exits_naming_the_file_and_the_key(tmp_path, edit, needle):
    path = write(tmp_path, edit(VALID))
    with pytest.raises(SystemExit) as error:
        load_plan(path, ARMS)
    assert needle in str(error.value) and str(path) in str(error.value)


def test_test_seeds_run_only_against_a_committed_unmodified_plan(tmp_path):
    draft = load_plan(write(tmp_path, VALID.replace("registered = true", "registered = false")),
                      ARMS)
    with pytest.raises(SystemExit, match="registered = false: the method is still being fixed"):
        check_registered(draft, "test", {"plan_commit": "a" * 40, "head": "b" * 40,
                                         "uncommitted": [], "changed_since_plan": []})
    plan = load_plan(write(tmp_path, VALID), ARMS)
    outside = registration(plan)  # a plan outside the repository has no commit
    assert not outside.get("plan_commit")
    check_registered(plan, "tuning", outside)  # tuning seeds may run on a draft
    with pytest.raises(SystemExit, match="committed plan"):
        check_registered(plan, "test", outside)
    committed = {"plan_commit": "a" * 40, "head": "b" * 40, "uncommitted": [],
                 "changed_since_plan": []}
    check_registered(plan, "test", committed)
    with pytest.raises(SystemExit, match="commit bench/learning_summary.py first"):
        check_registered(plan, "test", {**committed, "uncommitted": ["bench/learning_summary.py"]})
    with pytest.raises(SystemExit, match="commit .*plan.toml first"):
        check_registered(plan, "test", {**committed, "plan_commit": None})
    with pytest.raises(SystemExit, match="bench/learning.py changed after the plan was committed"
                                         " .aaaaaaaaaaaa."):
        check_registered(plan, "test", {**committed, "changed_since_plan": ["bench/learning.py"]})


def test_the_committed_plan_is_registered_in_this_checkout():
    record = registration(load_plan(PLAN, ARMS))
    if not record:
        pytest.skip("not a git checkout")
    assert record["plan_commit"] and len(record["head"]) == 40
    assert isinstance(record["changed_since_plan"], list)
    assert "bench/learning_summary.py" in BENCH_FILES and "bench/learning_measure.py" in BENCH_FILES


def test_a_plan_fixes_the_arms_and_needs_a_split(monkeypatch, capsys):
    for argv, needle in [(["--plan", str(PLAN), "--split", "tuning", "--rounds", "5"],
                          "--rounds: the plan"),
                         (["--plan", str(PLAN)], "--plan needs --split"),
                         (["--split", "test"], "--split needs --plan")]:
        monkeypatch.setattr(sys, "argv", ["learning.py", *argv])
        with pytest.raises(SystemExit):
            learning.parse_args()
        assert needle in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["learning.py", "--plan", str(PLAN), "--split", "tuning",
                                      "--report-only", "--data-root", "/nowhere"])
    args = learning.parse_args()
    assert args.seeds == [0, 1, 2, 3] and args.reference == "bandit" and args.wide_eval
    assert args.out.name == "reasoning-gym-curriculum-tuning.json"


def run(per_task: list[dict[str, float]], draws: list[dict[str, int]]) -> dict:
    """A measured run; its task `a`, where it has one, has two levels 0.1 below and above it."""
    rounds = [{"accuracy": sum(t.values()) / len(t), "accuracy_per_level": {},
               "accuracy_per_task": t, "kept_per_level": {}, "rolled_out_per_level": {},
               "accuracy_per_task_level": {} if "a" not in t else {"a L1": t["a"] - 0.1,
                                                                   "a L2": t["a"] + 0.1},
               "rolled_out_per_task_level": d}
              for t, d in zip(per_task, draws, strict=True)]
    return {"rounds": rounds, "gain": rounds[-1]["accuracy"] - rounds[0]["accuracy"],
            "generated_tokens": 1, "trained_tokens": 1, "train_steps": 1}


def test_summary_has_task_curves_gains_and_draw_shares_and_pairs_against_the_reference():
    runs = {
        "bandit": {0: run([{"a": 0.1, "b": 0.0}, {"a": 0.3, "b": 0.0}],
                          [{}, {"a L1": 30, "a L2": 30, "b L1": 20}]),
                   1: run([{"a": 0.2, "b": 0.1}, {"a": 0.6, "b": 0.1}],
                          [{}, {"a L1": 50, "b L2": 50}])},
        "uniform": {0: run([{"a": 0.1, "b": 0.0}, {"a": 0.2, "b": 0.0}],
                           [{}, {"a L1": 25, "b L1": 25}]),
                    1: run([{"a": 0.2, "b": 0.1}, {"a": 0.2, "b": 0.1}],
                           [{}, {"a L1": 25, "b L2": 25}])},
    }
    summary = learning_summary.summarize(runs, 1, reference="bandit")
    tasks = summary["arms"]["bandit"]["tasks"]
    assert tasks["a"]["accuracy_per_round"][1]["mean"] == pytest.approx(0.45)
    assert tasks["a"]["gain"]["mean"] == pytest.approx(0.3)  # 0.2 and 0.4
    low, high = tasks["a"]["gain"]["ci95"]
    assert low < 0.3 < high
    assert tasks["b"]["gain"]["mean"] == pytest.approx(0.0) and tasks["b"]["levels"] == {}
    level_2 = tasks["a"]["levels"]["L2"]
    assert level_2["accuracy_per_round"][0]["mean"] == pytest.approx(0.25)  # 0.2 and 0.3
    assert level_2["accuracy_per_round"][1]["mean"] == pytest.approx(0.55)  # 0.4 and 0.7
    assert level_2["gain"]["mean"] == pytest.approx(0.3)
    assert summary["arms"]["bandit"]["task_draws_per_round"] == [
        pytest.approx({"a": (0.75 + 0.5) / 2, "b": (0.25 + 0.5) / 2})]
    difference = summary["paired_gain_difference"]["bandit-uniform"]
    assert difference["mean"] == pytest.approx((0.1 - 0.05 + 0.2) / 2) and difference["wins"] == 2
    assert "uniform-bandit" not in summary["paired_gain_difference"]


def test_report_prints_task_curves_and_the_pre_registered_comparison(capsys):
    runs = {arm: {s: run([{"a": 0.1}, {"a": 0.1 + g * (s + 1)}], [{}, {"a L1": 4}])
                  for s in (0, 1)} for arm, g in (("bandit", 0.2), ("uniform", 0.1))}
    summary = learning_summary.summarize(runs, 1, reference="bandit")
    learning_summary.report(summary, 1)
    committed = {"plan_commit": "c" * 40, "head": "d" * 40, "uncommitted": []}
    learning_summary.report_primary(summary, reference="bandit", primary="uniform",
                                    plan="p.toml", split="test", record=committed)
    out = capsys.readouterr().out
    assert "held-out accuracy per task" in out and "gain 0.300 [" in out
    level_lines = [line.split() for line in out.splitlines() if line.startswith("      L")]
    assert [line[0] for line in level_lines] == ["L1", "L2", "L1", "L2"]  # bandit, then uniform
    assert level_lines[1][1] == "0.200"  # bandit's a L2 in the warm-up: 0.1 + 0.1 on both seeds
    assert "PRIMARY (p.toml, test seeds [0, 1]; plan committed in cccccccccccc" in out
    assert "final-gain difference bandit-uniform: 0.150" in out
    assert "bandit higher in 2/2 seeds" in out
    learning_summary.report_primary(summary, reference="bandit", primary="uniform",
                                    plan="p.toml", split="tuning",
                                    record={**committed, "uncommitted": ["p.toml"]})
    assert "NOT pre-registered: uncommitted p.toml" in capsys.readouterr().out
    learning_summary.report_primary(summary, reference="bandit", primary="uniform",
                                    plan="p.toml", split="test",
                                    record={**committed, "changed_since_plan": ["b.py"]})
    assert "NOT pre-registered: changed since the plan's commit b.py" in capsys.readouterr().out


def test_wide_summary_gives_per_task_finals_and_differences():
    wide = {"accuracy": {f"learning-{a}-s{s}": 0.5 for a in ("bandit", "uniform") for s in (0, 1)},
            "items_per_task": {"a": 10, "b": 10},
            "accuracy_per_task": {"learning-bandit-s0": {"a": 0.6, "b": 0.2},
                                  "learning-bandit-s1": {"a": 0.8, "b": 0.2},
                                  "learning-uniform-s0": {"a": 0.5, "b": 0.3},
                                  "learning-uniform-s1": {"a": 0.5, "b": 0.3}}}
    out = learning_summary.wide_summary(wide, ["bandit", "uniform"], [0, 1], reference="bandit")
    assert out["final_accuracy_per_task"]["bandit"]["a"]["mean"] == pytest.approx(0.7)
    per_task = out["paired_difference_per_task"]["bandit-uniform"]
    assert per_task["a"]["mean"] == pytest.approx(0.2) and per_task["a"]["wins"] == 2
    assert per_task["b"]["mean"] == pytest.approx(-0.1) and per_task["b"]["wins"] == 0


def test_a_constant_answer_scores_the_share_of_its_tasks_most_common_reference():
    from domains.base import Problem

    items = [Problem(text=f"q{i}", reference=ref, level=1, task=task)
             for i, (task, ref) in enumerate([("count", "1"), ("count", "1 "), ("count", "2"),
                                              ("count", "3"), ("day", "Sunday"),
                                              ("day", "Monday")])]
    assert learning_measure.constant_answer_accuracy(items) == {"count": 0.5, "day": 0.5}
    # the wide set's share of the model's most common answer: the answers' majority vote
    assert majority_vote(["1", "1", "1", "2"]).agreement == 0.75
    assert majority_vote([]).agreement == 0.0


def test_reports_put_the_constant_answer_beside_each_task(capsys):
    runs = {arm: {s: run([{"count": 0.56}, {"count": 0.56}], [{}, {"count L1": 4}])
                  for s in (0, 1)} for arm in ("bandit", "uniform")}
    summary = learning_summary.summarize(runs, 1, reference="bandit")
    summary["constant_answer_accuracy"] = {"count": 0.56}
    learning_summary.report(summary, 1)
    wide = {"accuracy": {f"learning-{a}-s{s}": 0.5 for a in ("bandit", "uniform") for s in (0, 1)},
            "items_per_level": {"1": 4}, "items_per_task": {"count": 4},
            "constant_answer_accuracy": {"count": 0.5},
            "accuracy_per_task": {f"learning-{a}-s{s}": {"count": 0.5}
                                  for a in ("bandit", "uniform") for s in (0, 1)},
            "modal_answer_share": {f"learning-{a}-s{s}": {"count": 1.0}
                                   for a in ("bandit", "uniform") for s in (0, 1)}}
    learning_summary.report_wide({**wide, **learning_summary.wide_summary(
        wide, ["bandit", "uniform"], [0, 1], reference="bandit")})
    out = capsys.readouterr().out
    assert "count (one constant answer scores 0.560 on these items)" in out
    assert "one constant" in out and "it answers one constant" in out
