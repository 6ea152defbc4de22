"""bench/learning.py's summary (bench/learning_summary.py): per-level totals, gains, paired
differences from measured runs; and the wide held-out set and arm roots of bench/learning.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bench import learning_measure, learning_summary

_SPEC = importlib.util.spec_from_file_location(
    "learning_bench", Path(__file__).resolve().parents[2] / "bench" / "learning.py")
learning = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(learning)


def run(accuracies: list[float], kept: list[dict[str, int]], rolled: list[dict[str, int]]) -> dict:
    rounds = [{"accuracy": a, "accuracy_per_level": {"1": a, "2": a / 2},
               "kept_per_level": k, "rolled_out_per_level": r}
              for a, k, r in zip(accuracies, kept, rolled, strict=True)]
    return {"rounds": rounds, "gain": accuracies[-1] - accuracies[0], "generated_tokens": 10,
            "trained_tokens": 20, "train_steps": 30}


NONE: dict[str, int] = {}


def test_summary_totals_levels_over_rounds_after_the_warmup_and_pairs_gains_by_seed():
    runs = {
        "default": {0: run([0.1, 0.2, 0.4], [{"2": 99}, {"2": 5, "3": 1}, {"2": 7}],
                           [{"2": 99}, {"2": 10, "3": 8}, {"2": 9, "3": 2}]),
                    1: run([0.2, 0.2, 0.3], [NONE, {"2": 1}, {"2": 3, "3": 2}],
                           [NONE, {"2": 4}, {"2": 6, "3": 5}])},
        "uniform": {0: run([0.1, 0.1, 0.2], [NONE, NONE, NONE], [NONE, NONE, NONE]),
                    1: run([0.2, 0.3, 0.4], [NONE, NONE, NONE], [NONE, NONE, NONE])},
    }
    summary = learning_summary.summarize(runs, 2)
    default = summary["arms"]["default"]
    # round 0 not counted
    assert default["kept_per_level"]["2"]["mean"] == pytest.approx((12 + 4) / 2)
    assert default["kept_per_level"]["3"]["mean"] == pytest.approx((1 + 2) / 2)
    assert default["rolled_out_per_level"]["3"]["mean"] == pytest.approx((10 + 5) / 2)
    assert default["final_accuracy_per_level"]["2"]["mean"] == pytest.approx((0.2 + 0.15) / 2)
    assert default["gain"]["mean"] == pytest.approx(0.2)
    difference = summary["paired_gain_difference"]["default-uniform"]
    assert difference["mean"] == pytest.approx(0.05)  # seed 0: 0.3 - 0.1, seed 1: 0.1 - 0.2
    assert difference["wins"] == 1
    assert summary["ratios"]["default/uniform"] == pytest.approx(0.2 / 0.15)
    assert summary["warmups_identical"]


def test_report_prints_every_arm_and_level(capsys):
    runs = {"default": {0: run([0.1, 0.3], [NONE, {"2": 4}], [NONE, {"2": 8}])},
            "uniform": {0: run([0.1, 0.2], [NONE, {"2": 2}], [NONE, {"2": 8}])}}
    learning_summary.report(learning_summary.summarize(runs, 1), 1)
    out = capsys.readouterr().out
    assert "L2 8->4" in out and "L2 8->2" in out
    assert "final-gain ratio default/uniform: 2.00" in out


def test_wide_eval_items_are_unseen_distinct_and_start_with_the_gate_set():
    from domains.arithmetic import ArithmeticDomain

    domain = ArithmeticDomain()
    gate = domain.heldout(5)
    seen = {p.text for p in domain.heldout(200) if p.level != 1} | {gate[0].text}
    items = learning_measure.wide_items(domain, 30, seen=seen, gate=gate)
    texts = [p.text for p in items]
    assert len(texts) == len(set(texts)) and not set(texts) & seen
    per_level = {level: [p for p in items if p.level == level] for level in domain.levels}
    assert all(len(v) == 30 for v in per_level.values())
    assert [p.text for p in per_level[1][:4]] == [p.text for p in gate if p.level == 1][1:]
    everything_seen = {f"{a}{op}{b}" for a in range(10) for b in range(10) for op in "+-"}
    assert not [p for p in learning_measure.wide_items(domain, 30, seen=everything_seen, gate=gate,
                                               attempts=3)
                if p.level == 1]  # a level with nothing left ends, however many were asked for


def test_wide_eval_items_take_a_mixs_tasks_in_turn():
    """A small wide set still holds every task of a mix: the gate's items are taken a task at
    a time, in turn (they are stored task by task)."""
    from types import SimpleNamespace

    gate = [SimpleNamespace(text=f"{task}{i}", level=1, task=task)
            for task in ("count_bits", "gcd", "spell_backward") for i in range(4)]
    domain = SimpleNamespace(levels=(1,))
    items = learning_measure.wide_items(domain, 4, seen={"gcd0"}, gate=gate)
    assert [p.text for p in items] == ["count_bits0", "spell_backward0", "count_bits1", "gcd1"]


def test_wide_summary_pairs_final_accuracy_by_seed():
    accuracy = {"learning-default-s0": 0.30, "learning-default-s1": 0.20,
                "learning-uniform-s0": 0.25, "learning-uniform-s1": 0.22}
    wide = learning_summary.wide_summary({"accuracy": accuracy}, ["default", "uniform"], [0, 1])
    assert wide["final_accuracy"]["default"]["mean"] == pytest.approx(0.25)
    paired = wide["paired_difference"]["default-uniform"]
    assert paired["mean"] == pytest.approx(0.015) and paired["wins"] == 1
    assert paired["min"] == pytest.approx(-0.02) and paired["max"] == pytest.approx(0.05)


def test_paired_interval_is_the_student_t_interval_of_the_mean():
    d = learning_summary.paired([0.01, 0.02, 0.03], [0, 1, 2])
    half = 4.302653 * 0.01 / 3**0.5  # t(0.975, df 2) * sd / sqrt(n)
    assert d["ci95"] == pytest.approx([0.02 - half, 0.02 + half])
    assert d["wins"] == 3 and d["seeds"] == [0, 1, 2]
    assert learning_summary.paired([0.05], [0])["ci95"] is None  # one seed: no interval
    wins_and_losses = learning_summary.paired([0.07, -0.01, -0.015], [0, 1, 2])
    assert wins_and_losses["ci95"][0] < 0 < wins_and_losses["ci95"][1]  # cannot tell the arms apart


def test_report_prints_the_interval_of_paired_differences(capsys):
    runs = {"default": {s: run([0.1, 0.1 + g], [NONE, NONE], [NONE, NONE])
                        for s, g in ((0, 0.2), (1, 0.3))},
            "uniform": {s: run([0.1, 0.2], [NONE, NONE], [NONE, NONE]) for s in (0, 1)}}
    learning_summary.report(learning_summary.summarize(runs, 1), 1)
    out = capsys.readouterr().out
    assert "95% CI [" in out and "default higher in 2/2 seeds" in out


def test_arm_roots_name_the_arm_and_the_folder(tmp_path):
    assert learning.parse_arm_roots([f"no_self_play={tmp_path}"], ["default", "no_self_play"]) == {
        "no_self_play": tmp_path}
    for bad in ["no_self_play", f"nsp={tmp_path}", "no_self_play="]:
        with pytest.raises(SystemExit,
                           match="expected ARM=DIR with ARM one of default, no_self_play"):
            learning.parse_arm_roots([bad], ["default", "no_self_play"])
