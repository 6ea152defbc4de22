"""`flywheel status` of a reasoning_gym run: held-out accuracy per task and level, for the base
model and each round's candidate, read from the evaluate stages' metrics."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from flows.cli import app
from flows.status_view import task_accuracy_lines
from storage.audit.queries import task_accuracy
from storage.catalog import Catalog

METRICS = {
    ("baseline", 0): {"accuracy": 0.0, "accuracy_task_spell_backward": 0.0,
                      "accuracy_task_spell_backward_level_1": 0.0,
                      "accuracy_task_spell_backward_level_2": 0.0,
                      "accuracy_task_lcm_level_1": 0.5, "accuracy_task_lcm": 0.5},
    ("evaluate", 0): {"accuracy": 0.1, "accuracy_task_spell_backward": 0.06,
                      "accuracy_task_spell_backward_level_1": 0.08,
                      "accuracy_task_spell_backward_level_2": 0.04},
    ("evaluate", 1): {"accuracy": 0.2, "accuracy_task_spell_backward": 0.16,
                      "accuracy_task_spell_backward_level_1": 0.2,
                      "accuracy_task_spell_backward_level_2": 0.12},
}


def _catalog(root) -> Catalog:
    catalog = Catalog(root)
    catalog.ensure_run("rg", "{}")
    for (stage, round_index), metrics in METRICS.items():
        catalog.record_completed(run_id="rg", round_index=round_index, stage=stage,
                                 fingerprint=f"{stage}{round_index}" * 4, started_at=time.time(),
                                 outputs=[], inputs={}, metrics=metrics)
    catalog.set_run_status("rg", "completed")
    return catalog


def test_the_table_has_a_row_per_task_and_level_and_a_column_per_model(tmp_path):
    rows = task_accuracy(_catalog(tmp_path), "rg")
    assert {r["name"] for r in rows} >= {"accuracy_task_spell_backward_level_2"}
    assert "accuracy" not in {r["name"] for r in rows}
    assert task_accuracy_lines(rows) == [
        "held-out accuracy per task and level",
        "  task            level   base      0      1",
        "  lcm                 1  0.500      -      -",
        "  lcm               all  0.500      -      -",
        "  spell_backward      1  0.000  0.080  0.200",
        "  spell_backward      2  0.000  0.040  0.120",
        "  spell_backward    all  0.000  0.060  0.160",
    ]
    assert task_accuracy_lines([{"round": 0, "stage": "evaluate", "name": "accuracy",
                                 "value": 1.0}]) == []


def test_flywheel_status_prints_the_per_task_table(tmp_path):
    _catalog(tmp_path)
    result = CliRunner().invoke(app, ["status", "rg", "--data-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "held-out accuracy per task and level" in result.output
    assert "  spell_backward      2  0.000  0.040  0.120" in result.output
