"""The report's pieces that need no run: the Wilson interval, the stage timings and held-out
tables on a hand-made snapshot, and the page's templates (escaping, shipped in the wheel)."""

from __future__ import annotations

import duckdb
import pytest

from storage.audit.report import stage_timings_table, wilson_interval
from storage.audit.report_accuracy import level_accuracy_table


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


def test_a_table_escapes_user_text_and_breaks_long_column_names():
    from storage.audit.report import _table
    from storage.audit.snapshot import Result

    html = str(_table(Result("t", ["question", "ci95_low"],
                             [{"question": "<script>x</script> & y", "ci95_low": 0.25}],
                             ["a note <i>"])))
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt; &amp; y" in html
    assert '<p class="note">a note &lt;i&gt;</p>' in html
    assert "<th>ci95_<wbr>low</th>" in html
    assert '<td class="text">&lt;script&gt;' in html and '<td class="">0.25' in html
    assert "no rows" in str(_table(Result("t", ["a"], [], [])))
