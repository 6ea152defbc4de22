"""validators/gx_memo.py: the memoised pieces of Great Expectations change no gate's result.

Every kind's gate, on clean outputs and on each fault of test_gate.py, gives the same GX result
JSON and the same failures with the memos as with GX's own functions put back.
"""

from __future__ import annotations

import pytest

from configs import GatesConfig
from storage.datasets import SCHEMAS, write_atomic
from tests.validators.test_gate import FAULTS, RUN, make_round
from validators import gx_memo
from validators.gate import run_gate
from validators.gx_results import _batch_definition


@pytest.fixture(scope="module")
def rounds():
    return make_round(1, seed=1), make_round(0, seed=2)


def _without_memos(monkeypatch):
    from great_expectations.core.id_dict import IDDict
    from great_expectations.expectations import expectation
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    _batch_definition()  # installs the memos, so that there is something to take out
    monkeypatch.setattr(expectation, "camel_to_snake", gx_memo.ORIGINALS["camel_to_snake"])
    monkeypatch.setattr(expectation.Expectation, "configuration",
                        gx_memo.ORIGINALS["configuration"])
    monkeypatch.setattr(ExpectationConfiguration, "to_domain_obj",
                        gx_memo.ORIGINALS["to_domain_obj"])
    monkeypatch.setattr(IDDict, "to_id", gx_memo.ORIGINALS["to_id"])


def _timeless(value):
    """GX's result JSON without the moment its batch was loaded."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "ge_load_time"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _judged(tmp_path, kind, rows, previous_rows):
    previous = write_atomic("problems", [dict(r, round=0) for r in previous_rows],
                            tmp_path / "previous.parquet").path
    path = write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
    result = run_gate(path, kind, GatesConfig(), run_id=RUN, round_index=1,
                      previous_path=previous)
    return result.success, _timeless(result.gx), [(f.name, f.observed, f.bound, f.rows, f.error)
                                       for f in result.failures]


CASES = [(kind, None) for kind in SCHEMAS] + [(FAULTS[f][0], f) for f in FAULTS]


@pytest.mark.parametrize(("kind", "fault"), CASES, ids=[f or k for k, f in CASES])
def test_a_gate_judges_the_same_with_and_without_the_memos(tmp_path, monkeypatch, rounds,
                                                           kind, fault):
    clean, previous = rounds
    rows = clean[kind] if fault is None else FAULTS[fault][1](clean[kind])
    memoised = _judged(tmp_path, kind, rows, previous["problems"])
    _without_memos(monkeypatch)
    assert _judged(tmp_path, kind, rows, previous["problems"]) == memoised
    assert memoised[0] is (fault is None)


def test_metric_ids_keep_apart_values_json_keeps_apart():
    """1, 1.0 and True, a tuple and a list: the id is GX's own for each, memoised or not."""
    from great_expectations.core.id_dict import IDDict

    _batch_definition()
    original = gx_memo.ORIGINALS["to_id"]
    cases = [{"column": "a", "n": 1, "m": None}, {"column": "a", "n": 1.0, "m": None},
             {"column": "a", "n": True, "m": None}, {"column": "a", "n": (1, 2), "m": "x"},
             {"column": "a", "n": [1, 2], "m": "x"}, {"column": "a"}, {}]
    for case in cases * 2:  # the second pass reads the memo
        assert IDDict(case).to_id() == original(IDDict(case)), case
    assert len({IDDict(c).to_id() for c in cases[:3]}) == 3


def test_configurations_and_expectations_are_built_once_only_inside_the_scope():
    import great_expectations as gx

    _batch_definition()
    expectation = gx.expectations.ExpectColumnValuesToNotBeNull(column="a")
    assert expectation.configuration is not expectation.configuration
    with gx_memo.built_once():
        first = expectation.configuration
        assert expectation.configuration is first
        assert first.to_json_dict() == gx_memo.ORIGINALS["configuration"].fget(
            expectation).to_json_dict()
        rebuilt = first.to_domain_obj()
        assert first.to_domain_obj() is rebuilt and rebuilt == expectation
    assert expectation.configuration is not first
    assert first.to_domain_obj() is not first.to_domain_obj()
