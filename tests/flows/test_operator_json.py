"""Every `--json` output of the `flywheel` command has one shape (storage/json_output.py):
snake_case keys, rounds as integers or null (a `model` field says "base" or "candidate"),
times as ISO-8601 UTC strings, no NaN. The catalog is written by hand (no model is trained)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from configs import load_config
from flows.cli import app
from storage.catalog import Catalog
from storage.json_output import json_ready
from storage.runs import Incumbent

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
METRICS = {  # (stage, round) -> metrics, as the stages record them
    ("baseline", 0): {"accuracy": 0.1},
    ("synthesize", 0): {"proposed": 8.0, "valid": 7.0, "novel": 6.0},
    ("curate", 0): {"kept": 3.0, "pass_at_1": 0.4, "train_rows": 6.0},
    ("evaluate", 0): {"accuracy": 0.3},
    ("promote", 0): {"promoted": 1.0},
    ("evaluate", 1): {"accuracy": float("nan")},  # an evaluation that had nothing to score
    ("promote", 1): {"promoted": 0.0},
}


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Run `a`: base, baseline (0.1), round 0 promoted (0.3), round 1 rejected, completed; every
    command here only reads it."""
    tmp_path = tmp_path_factory.mktemp("json")
    catalog = Catalog(tmp_path)
    catalog.ensure_run("a", load_config(None, {"rounds": 1}).model_dump_json())
    catalog.record_completed(run_id="a", round_index=0, stage="base", fingerprint="b" * 32,
                             started_at=time.time(), outputs=[], inputs={})
    for (stage, round_index), metrics in METRICS.items():
        catalog.record_completed(run_id="a", round_index=round_index, stage=stage,
                                 fingerprint=f"{stage[:4]}{round_index}".ljust(32, "0"),
                                 started_at=time.time(), outputs=[], inputs={}, metrics=metrics)
    catalog.record_round(run_id="a", round_index=0, incumbent="b" * 32, candidate="c" * 32,
                         incumbent_accuracy=0.1, candidate_accuracy=0.3, promoted=True,
                         reason="accuracy 0.300 >= 0.100")
    catalog.record_round(run_id="a", round_index=1, incumbent="c" * 32, candidate="d" * 32,
                         incumbent_accuracy=0.3, candidate_accuracy=None, promoted=False)
    catalog.set_run_status("a", "completed")
    return tmp_path


def _no_nan(text: str) -> Any:
    raise AssertionError(f"{text} in JSON output")


def _check_shape(value: Any, where: str = "") -> None:
    """The rules of storage/json_output.py, all the way down."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_shape(item, f"{where}[{index}]")
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        assert SNAKE.match(key), f"{where}: key {key!r} is not snake_case"
        if key == "round":
            assert item is None or type(item) is int, f"{where}.round = {item!r}"
        if key.endswith("_at"):
            assert isinstance(item, str) and ISO_UTC.match(item), f"{where}.{key} = {item!r}"
        _check_shape(item, f"{where}.{key}")


@pytest.mark.parametrize("command", [
    ["status", "a", "--json"],
    ["runs", "--json"],
    ["config", "show", "a", "--format", "json"],
    ["audit", "a", "funnel", "--format", "json"],
])
def test_every_json_output_has_one_shape(root, command):
    code, output = _cli(*command, "--data-root", str(root))
    assert code == 0, output
    parsed = json.loads(output, parse_constant=_no_nan)
    assert parsed, output
    _check_shape(parsed)


def test_status_json_has_field_names_and_integer_rounds_and_the_table_keeps_its_labels(root):
    code, output = _cli("status", "a", "--json", "--data-root", str(root))
    assert code == 0, output
    rounds = json.loads(output)["rounds"]
    assert [(r["round"], r["model"]) for r in rounds] == [(None, "base"), (0, "candidate"),
                                                          (1, "candidate")]
    assert rounds[0]["held_out_accuracy"] == pytest.approx(0.1)
    assert {k: rounds[1][k] for k in ("proposed", "valid", "novel", "kept", "pass_at_1_train",
                                      "train_rows", "held_out_accuracy", "promoted",
                                      "decision")} == {
        "proposed": 8.0, "valid": 7.0, "novel": 6.0, "kept": 3.0,
        "pass_at_1_train": pytest.approx(0.4), "train_rows": 6.0,
        "held_out_accuracy": pytest.approx(0.3), "promoted": True,
        "decision": "accuracy 0.300 >= 0.100"}
    assert rounds[2]["held_out_accuracy"] is None and rounds[2]["promoted"] is False  # NaN: null
    code, table = _cli("status", "a", "--data-root", str(root))
    assert code == 0 and "proposed" in table and "held_out_accuracy" not in table, table
    base = next(line for line in table.splitlines() if line.strip().startswith("base"))
    assert base.split()[:7] == ["base", "-", "-", "-", "-", "-", "0.100"], table


def test_runs_json_times_are_the_catalogs_in_utc(root):
    recorded = Catalog(root).query("SELECT created_at, updated_at FROM runs")[0]
    code, output = _cli("runs", "--json", "--data-root", str(root))
    assert code == 0, output
    (row,) = json.loads(output)
    for key in ("created_at", "updated_at"):
        moment = datetime.fromisoformat(row[key])
        assert moment.utcoffset().total_seconds() == 0
        assert moment.timestamp() == pytest.approx(recorded[key], abs=0.001)
    assert row["incumbent"]["round"] == 0 and row["incumbent"]["model"] == "candidate"


@pytest.mark.parametrize(("value", "expected"), [
    ({"started_at": 0.0}, {"started_at": "1970-01-01T00:00:00.000Z"}),
    ({"finished_at": 1750000000.25}, {"finished_at": "2025-06-15T15:06:40.250Z"}),
    ({"finished_at": None, "flag_at": True}, {"finished_at": None, "flag_at": True}),
    ({"x": float("nan"), "y": [float("inf"), 1.5]}, {"x": None, "y": [None, 1.5]}),
    ({"seconds": 12.5, "round": 3}, {"seconds": 12.5, "round": 3}),  # not a time: kept
    ({"incumbent": Incumbent(None, "f" * 4, 0.5, None)},
     {"incumbent": {"round": None, "fingerprint": "ffff", "accuracy": 0.5, "path": None}}),
    ({"path": Path("/a/b")}, {"path": "/a/b"}),
])
def test_json_ready_applies_each_rule(value, expected):
    assert json_ready(value) == expected
