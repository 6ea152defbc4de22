"""The report shows the noise, on a hand-made snapshot: the held-out accuracy's interval as
error bars (from the evaluate metrics, or computed from the evals of a run that predates them),
promotions inside the noise marked in the table and the chart, pass@k / maj@k with intervals,
per-level intervals over items with several samples, and `flywheel status`'s added columns."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import duckdb
import pytest

from storage.audit.report import accuracy_section
from storage.audit.report_accuracy import accuracy_table, level_accuracy_table
from storage.audit.report_noise import (
    INSIDE,
    promotion_chart,
    promotion_noise_table,
    sample_figures_table,
)
from storage.audit.round_metrics import bootstrap_interval, item_interval, wilson_interval
from storage.audit.round_summary import at_k_lines, heldout_figures
from tests.storage.audit.test_charts import NS, marks, ticks, tooltip


def _snapshot(metrics, evals, rounds):
    """evals: (checkpoint, round, level, item_id, correct); rounds: (round, incumbent,
    candidate, promoted); the base model is checkpoint 'b'."""
    con = duckdb.connect()
    con.execute("CREATE TABLE runs (config_json VARCHAR)")
    con.execute("INSERT INTO runs VALUES ('{}')")
    con.execute("CREATE TABLE stages (round INTEGER, stage VARCHAR, fingerprint VARCHAR,"
                " status VARCHAR, finished_at DOUBLE)")
    con.execute("INSERT INTO stages VALUES (0, 'base', 'b', 'completed', 1)")
    con.execute("CREATE TABLE evals (checkpoint VARCHAR, round INTEGER, level INTEGER,"
                " item_id VARCHAR, correct BOOLEAN)")
    if evals:
        con.executemany("INSERT INTO evals VALUES (?, ?, ?, ?, ?)", evals)
    con.execute("CREATE TABLE rounds (round INTEGER, incumbent VARCHAR, candidate VARCHAR,"
                " incumbent_accuracy DOUBLE, candidate_accuracy DOUBLE, promoted BOOLEAN,"
                " reason VARCHAR)")
    if rounds:
        con.executemany("INSERT INTO rounds VALUES (?, ?, ?, NULL, NULL, ?, 'r')", rounds)
    con.execute("CREATE TABLE current_files (round INTEGER, stage VARCHAR, kind VARCHAR,"
                " path VARCHAR)")
    con.execute("CREATE TABLE metrics (round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE)")
    if metrics:
        con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", metrics)
    return con


def _items(checkpoint, round_index, passes, level=1):
    return [(checkpoint, round_index, level, f"h{i}", ok) for i, ok in enumerate(passes)]


# 20 items: base passes 4, round 0's candidate 5 (one more: noise), round 1's 14
BASE, NOISY, BETTER = [i < 4 for i in range(20)], [i < 5 for i in range(20)], [
    i < 14 for i in range(20)]
EVALS = _items("b", 0, BASE) + _items("c0", 0, NOISY) + _items("c1", 1, BETTER)
ROUNDS = [(0, "b", "c0", True), (1, "c0", "c1", True)]


def _accuracy_metrics(with_intervals: bool):
    rows = []
    for round_index, stage, passes in ((0, "baseline", BASE), (0, "evaluate", NOISY),
                                       (1, "evaluate", BETTER)):
        rows += [(round_index, stage, "accuracy", sum(passes) / 20),
                 (round_index, stage, "accuracy_level_1", sum(passes) / 20)]
        if with_intervals:
            low, high = wilson_interval(sum(passes), 20)
            rows += [(round_index, stage, "accuracy_low", low),
                     (round_index, stage, "accuracy_high", high)]
    return rows


@pytest.mark.parametrize("recorded", [True, False])
def test_the_accuracy_table_has_the_interval_recorded_or_computed_from_the_evals(recorded):
    table = accuracy_table(_snapshot(_accuracy_metrics(recorded), EVALS, ROUNDS))
    assert table.columns == ["round", "overall", "ci95_low", "ci95_high", "level_1", "promoted"]
    assert [r["round"] for r in table.rows] == ["base", "0", "1"]
    for row, passes in zip(table.rows, (BASE, NOISY, BETTER), strict=True):
        assert (row["ci95_low"], row["ci95_high"]) == pytest.approx(
            wilson_interval(sum(passes), 20))


def test_the_accuracy_chart_draws_the_interval_as_error_bars_not_as_lines():
    page = "\n".join(accuracy_section(_snapshot(_accuracy_metrics(True), EVALS, ROUNDS)))
    svg = page[page.index("<svg"):page.index("</svg>") + 6]
    bars = marks(svg, "interval-")
    low, high = wilson_interval(4, 20)
    assert list(bars) == ["interval-0-0", "interval-0-1", "interval-0-2"]  # overall only
    assert tooltip(bars["interval-0-0"]) == f"overall, base: 95% interval {low:.1%} to {high:.1%}"
    legend = [t.text for g in ET.fromstring(svg).iter(f"{NS}g")
              if (g.get("id") or "").startswith("legend") for t in g.iter(f"{NS}text")]
    assert legend == ["overall", "level_1"]


def test_promotions_inside_the_noise_are_marked_in_the_table_and_chart():
    table = promotion_noise_table(_snapshot(_accuracy_metrics(True), EVALS, ROUNDS))
    first, second = table.rows
    # round 0: one item of 20 flipped: a paired bootstrap over items holds 0
    assert first["difference"] == pytest.approx(0.05)
    assert (first["ci_low"], first["ci_high"]) == pytest.approx(
        bootstrap_interval([0.0] * 4 + [1.0] + [0.0] * 15))
    assert first["ci_low"] <= 0 and first["noise"] == INSIDE
    assert first["interval"] == "report: paired bootstrap over items, 95 %"
    # round 1: nine items gained, none lost: beyond the noise
    assert second["difference"] == pytest.approx(0.45) and second["noise"] == "beyond the noise"
    assert table.notes[0] == "promoted inside the noise: round 0"
    chart = promotion_chart(table)
    assert [tooltip(m) for m in marks(chart, "point-").values()] == [
        "promoted, 1: 45.0%", "promoted inside the noise, 0: 5.0%"]
    assert len(marks(chart, "interval-")) == 2
    assert ticks(chart) == ["-100%", "-50%", "0%", "50%", "100%"]  # reaches round 1's interval


def test_a_round_the_promote_stage_tested_shows_the_tests_own_interval():
    metrics = [*_accuracy_metrics(True), (0, "promote", "accuracy_difference", 0.05),
               (0, "promote", "accuracy_difference_low", 0.01),
               (0, "promote", "accuracy_difference_high", 0.09), (0, "promote", "p_value", 0.04)]
    first = promotion_noise_table(_snapshot(metrics, EVALS, ROUNDS)).rows[0]
    assert (first["difference"], first["ci_low"], first["ci_high"]) == (0.05, 0.01, 0.09)
    assert first["interval"].startswith("promote test") and first["noise"] == "beyond the noise"


def test_per_level_intervals_are_over_items_when_an_item_has_several_samples():
    # 4 samples of each of 10 items: item i passes i % 5 of them
    evals = [("c0", 0, 1, f"h{i}", k < i % 5) for i in range(10) for k in range(4)]
    (row,) = level_accuracy_table(_snapshot([], evals, [])).rows
    fractions = [min(i % 5, 4) / 4 for i in range(10)]
    assert (row["n"], row["samples"], row["correct"]) == (10, 4, sum(min(i % 5, 4)
                                                                     for i in range(10)))
    assert row["accuracy"] == pytest.approx(sum(fractions) / 10)
    assert (row["ci95_low"], row["ci95_high"]) == item_interval(fractions)


SAMPLE_METRICS = [(1, "evaluate", "samples", 4.0), (1, "evaluate", "pass_at_1", 0.5),
                  (1, "evaluate", "pass_at_1_low", 0.4), (1, "evaluate", "pass_at_1_high", 0.6),
                  (1, "evaluate", "pass_at_4", 0.8), (1, "evaluate", "pass_at_4_low", 0.7),
                  (1, "evaluate", "pass_at_4_high", 0.9), (1, "evaluate", "maj_at_4", 0.55),
                  (1, "evaluate", "maj_at_4_low", 0.45), (1, "evaluate", "maj_at_4_high", 0.65),
                  (1, "evaluate", "maj_at_4_unjudged", 3.0),
                  (1, "evaluate", "maj_at_4_no_vote", 1.0), (1, "evaluate", "accuracy", 0.5),
                  (1, "evaluate", "accuracy_low", 0.4), (1, "evaluate", "accuracy_high", 0.6)]


def test_several_sample_figures_are_a_table_and_a_chart_of_their_own():
    con = _snapshot(SAMPLE_METRICS, _items("c1", 1, BETTER), [])
    rows = sample_figures_table(con).rows
    assert [(r["model"], r["figure"], r["value"], r["ci95_low"], r["ci95_high"])
            for r in rows] == [("1", "pass@1", 0.5, 0.4, 0.6), ("1", "pass@4", 0.8, 0.7, 0.9),
                               ("1", "maj@4", 0.55, 0.45, 0.65)]
    assert (rows[2]["unjudged"], rows[2]["no_vote"]) == (3.0, 1.0)
    page = "\n".join(accuracy_section(con))
    assert 'aria-label="held-out pass@k and maj@k"' in page
    assert "pass@4, 1: 95% interval 70.0% to 90.0%" in page
    assert "pass@k" not in "\n".join(accuracy_section(_snapshot(
        _accuracy_metrics(True), EVALS, ROUNDS)))  # one sample per item: no such section


def test_status_columns_show_the_interval_and_the_several_sample_figures():
    metrics = {(stage, name): value for _, stage, name, value in SAMPLE_METRICS}
    assert heldout_figures(metrics, "evaluate") == {
        "held_out_interval": [0.4, 0.6],
        "held_out_samples": "pass@4 0.800 [0.700, 0.900]; maj@4 0.550 [0.450, 0.650], "
                            "3 unjudged left out",
        "held_out_at_k": {"pass_at_1": [0.5, 0.4, 0.6], "pass_at_4": [0.8, 0.7, 0.9],
                          "maj_at_4": [0.55, 0.45, 0.65]}}
    assert heldout_figures({("evaluate", "accuracy"): 0.5}, "evaluate") == {
        "held_out_interval": None, "held_out_samples": None, "held_out_at_k": None}


def test_status_lines_show_every_k_of_each_model_with_its_interval():
    metrics = {(stage, name): value for _, stage, name, value in SAMPLE_METRICS}
    metrics |= {("evaluate", "maj_at_2"): 0.5, ("evaluate", "maj_at_2_low"): 0.3,
                ("evaluate", "maj_at_2_high"): 0.7, ("evaluate", "pass_at_2"): 0.7}
    base = {("baseline", name): value
            for (_, name), value in metrics.items()}
    rows = [{"round": None, "model": "base", **heldout_figures(base, "baseline")},
            {"round": 1, "model": "candidate", **heldout_figures(metrics, "evaluate")},
            {"round": 2, "model": "candidate", **heldout_figures({}, "evaluate")}]
    title, header, *lines = at_k_lines(rows)
    assert "pass@k and maj@k" in title
    assert header.split() == ["round", "pass@1", "pass@2", "pass@4", "maj@2", "maj@4"]
    assert [line.split()[0] for line in lines] == ["base", "1"]  # round 2: one sample
    assert "0.700  " in lines[1] and "0.500 [0.300, 0.700]" in lines[1]
    assert "0.550 [0.450, 0.650]" in lines[1]
    assert at_k_lines(rows[2:]) == []
