"""The report's pieces that need no run: the Wilson interval, the curve chart, the stage
timings and held-out tables on a hand-made snapshot."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import duckdb
import pytest

from storage.audit.report import level_accuracy_table, stage_timings_table, wilson_interval
from storage.audit.svg import curve_chart

NS = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("correct", "n", "low", "high"), [
    (0, 40, 0.0, 0.0876),     # p = 0 still has an interval above 0
    (20, 40, 0.3520, 0.6480),
    (40, 40, 0.9124, 1.0),
    (3, 3, 0.4385, 1.0),
])
def test_wilson_interval_matches_the_formula_and_stays_in_0_1(correct, n, low, high):
    lo, hi = wilson_interval(correct, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)
    assert wilson_interval(0, 0) == (None, None)


def test_curve_chart_places_points_on_a_numeric_step_axis():
    svg = curve_chart({"round 0": [(10, 2.0), (20, 1.0), (40, 0.5)], "round 1": [(10, 0.8)]},
                      title="training loss per round", y_label="loss")
    root = ET.fromstring(svg)
    dots = [c for c in root.iter(f"{NS}circle")]
    assert [d.find(f"{NS}title").text for d in dots] == [
        "round 0, step 10: 2", "round 0, step 20: 1", "round 0, step 40: 0.5",
        "round 1, step 10: 0.8"]
    xs = [float(d.get("cx")) for d in dots[:3]]
    assert xs[2] - xs[1] == pytest.approx(2 * (xs[1] - xs[0]))  # steps, not categories


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("CREATE TABLE stages (round INTEGER, stage VARCHAR, fingerprint VARCHAR,"
                " status VARCHAR, started_at DOUBLE, finished_at DOUBLE, seconds DOUBLE,"
                " rows BIGINT)")
    con.execute("INSERT INTO stages VALUES (0, 'base', 'b', 'completed', 1, 2, 1.0, 1),"
                " (0, 'train', 't0', 'completed', 3, 9, 6.0, 10),"
                " (1, 'train', 't1', 'failed', 10, 11, 0.5, NULL),"
                " (1, 'train', 't1', 'completed', 12, 20, 8.0, 12)")
    con.execute("CREATE TABLE evals (round INTEGER, checkpoint VARCHAR, level INTEGER,"
                " item_id VARCHAR, correct BOOLEAN)")
    con.execute("INSERT INTO evals SELECT 0, 'b', 1, 'h' || i, i < 1 FROM range(4) t(i)")
    con.execute("INSERT INTO evals SELECT 0, 't0', 1, 'h' || i, i < 3 FROM range(4) t(i)")
    return con


def test_stage_timings_take_each_stages_latest_execution(con):
    table = stage_timings_table(con)
    assert table.columns == ["round", "base", "train", "total", "not completed"]
    assert [(r["round"], r.get("base"), r["train"], r["total"]) for r in table.rows] == [
        (0, 1.0, 6.0, 7.0), (1, None, 8.0, 8.0)]


def test_held_out_accuracy_per_level_tells_the_base_model_from_candidates(con):
    rows = level_accuracy_table(con).rows
    assert [(r["model"], r["level"], r["n"], r["correct"], r["accuracy"]) for r in rows] == [
        ("base", 1, 4, 1, 0.25), ("0", 1, 4, 3, 0.75)]
    assert rows[1]["ci95_low"] < 0.75 < rows[1]["ci95_high"]
