"""The report's held-out accuracy per task and level (domains of several tasks), on a hand-made
snapshot: the evaluate metrics `accuracy_task_*`, the evals per level, the run's config."""

from __future__ import annotations

import json

import duckdb
import pytest

from storage.audit.report import accuracy_section
from storage.audit.report_accuracy import task_accuracy_rows, task_accuracy_table

METRICS = [  # (round, stage, name, value): 4 items per task and level
    (0, "baseline", "accuracy", 0.25),
    (0, "baseline", "accuracy_level_1", 0.25),
    (0, "baseline", "accuracy_task_spell_backward", 0.25),
    (0, "baseline", "accuracy_task_spell_backward_level_1", 0.25),
    (0, "baseline", "accuracy_task_basic_arithmetic", 0.25),
    (0, "baseline", "accuracy_task_basic_arithmetic_level_1", 0.25),
    (1, "evaluate", "accuracy", 0.5),
    (1, "evaluate", "accuracy_task_spell_backward", 0.75),
    (1, "evaluate", "accuracy_task_spell_backward_level_1", 0.75),
    (1, "evaluate", "accuracy_task_basic_arithmetic", 0.25),
    (1, "evaluate", "accuracy_task_basic_arithmetic_level_1", 0.25),
    (1, "train", "accuracy_task_spell_backward_level_1", 0.0),  # not an evaluation
]


def _snapshot(per_level=4, base_items=8, candidate_items=8, metrics=METRICS):
    con = duckdb.connect()
    con.execute("CREATE TABLE runs (config_json VARCHAR)")
    con.execute("INSERT INTO runs VALUES (?)",
                [json.dumps({"domain": {"name": "reasoning_gym", "heldout_per_level": per_level}})])
    con.execute("CREATE TABLE stages (round INTEGER, stage VARCHAR, fingerprint VARCHAR,"
                " status VARCHAR, started_at DOUBLE, finished_at DOUBLE, seconds DOUBLE,"
                " rows BIGINT)")
    con.execute("INSERT INTO stages VALUES (0, 'base', 'b', 'completed', 1, 2, 1.0, 8)")
    con.execute("CREATE TABLE evals (round INTEGER, checkpoint VARCHAR, level INTEGER,"
                " item_id VARCHAR, correct BOOLEAN)")
    con.execute(f"INSERT INTO evals SELECT 0, 'b', 1, 'h' || i, i < 2 FROM range({base_items})"
                " t(i)")
    con.execute(f"INSERT INTO evals SELECT 1, 'c1', 1, 'h' || i, i < 4"
                f" FROM range({candidate_items}) t(i)")
    con.execute("CREATE TABLE rounds (round INTEGER, promoted BOOLEAN)")
    con.execute("CREATE TABLE metrics (round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE)")
    con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", metrics)
    return con


def test_a_row_per_model_task_and_level_with_n_and_the_wilson_interval():
    rows = task_accuracy_table(_snapshot()).rows
    assert [(r["model"], r["task"], r["level"], r["n"], r["correct"], r["accuracy"])
            for r in rows] == [
        ("base", "basic_arithmetic", 1, 4, 1, 0.25),
        ("base", "basic_arithmetic", "all", 4, 1, 0.25),
        ("base", "spell_backward", 1, 4, 1, 0.25), ("base", "spell_backward", "all", 4, 1, 0.25),
        ("1", "basic_arithmetic", 1, 4, 1, 0.25), ("1", "basic_arithmetic", "all", 4, 1, 0.25),
        ("1", "spell_backward", 1, 4, 3, 0.75), ("1", "spell_backward", "all", 4, 3, 0.75)]
    spell = rows[6]
    assert spell["ci95_low"] == pytest.approx(0.3006, abs=1e-4)
    assert spell["ci95_high"] == pytest.approx(0.9544, abs=1e-4)


def test_n_is_left_empty_where_the_level_holds_fewer_items_than_heldout_per_level():
    rows = task_accuracy_table(_snapshot(candidate_items=7)).rows
    candidate = [r for r in rows if r["model"] == "1"]
    assert all(r["n"] is None and r["ci95_low"] is None for r in candidate)
    assert candidate[3]["accuracy"] == 0.75  # the accuracy itself is still shown
    assert all(r["n"] == 4 for r in rows if r["model"] == "base")


def test_a_domain_without_tasks_has_no_task_section():
    plain = [m for m in METRICS if "task" not in m[2]]
    con = _snapshot(metrics=plain)
    assert task_accuracy_table(con).rows == []
    assert not any("Per task" in part for part in accuracy_section(con))
    assert task_accuracy_rows([], [], None) == []


def test_the_section_draws_each_tasks_accuracy_per_model():
    page = "\n".join(accuracy_section(_snapshot()))
    assert "Per task and level, with n and a 95 % interval" in page
    assert "held-out accuracy per task" in page and "spell_backward" in page
