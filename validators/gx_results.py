"""Great Expectations' side of a gate: one suite validated on one pandas frame, and GX's
result JSON read into failures the report can show (what failed, observed against allowed,
offending rows).

    count, failures, payload = validate_frame(df, suite, "verdicts.rows")
    failures[0].name        # "expect_column_values_to_be_between(reward)"
    failures[0].observed    # "1 of 800 rows, e.g. 1.7"
    failures[0].bound       # "[0.0, 1.0]"

The gate runner (validators/gate.py) builds the frames and decides which rows GX sees. GX is
imported inside functions, so importing this module stays cheap.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from validators.gx_memo import built_once, install
from validators.suites import FrameSuite
from validators.whole_frame import WholeFrameCheck, expectation_key

MAX_ROWS_SHOWN = 5


@dataclass
class FailedExpectation:
    """One failed (or unevaluable) expectation: what, on which column, seen vs allowed, rows."""

    check: str
    expectation: str
    column: str | None
    frame: str
    observed: str
    bound: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.expectation}({self.column})" if self.column else self.expectation


@functools.cache
def _batch_definition() -> Any:
    """One ephemeral GX context per process, with a pandas data source for whole frames: no
    analytics, no progress bars, no temporary data-docs folder."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    # GX fingerprints every in-memory frame with a full pandas hash (the batch marker
    # `pandas_data_fingerprint`, which nothing here reads): on a million rows that costs more
    # than all the expectations together, so frames of any size skip it.
    from great_expectations.execution_engine import pandas_execution_engine

    pandas_execution_engine.HASH_THRESHOLD = 0
    install()  # GX's pure per-expectation work done once (validators/gx_memo.py)
    source = context.data_sources.add_pandas("flywheel")
    return source.add_dataframe_asset("frame").add_batch_definition_whole_dataframe("whole")


def _plain(value: Any) -> Any:
    """NaN -> None (GX's JSON carries NaN for a missing float)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _records(df: Any) -> list[dict[str, Any]]:
    """Rows as plain dicts (NaN and NA -> None); pandas' own JSON writer is the fast path."""
    return json.loads(df.to_json(orient="records", double_precision=15))


def _errors(exception_info: dict[str, Any]) -> list[str]:
    """Messages of exceptions GX caught while evaluating one expectation (two shapes exist)."""
    infos = ([exception_info] if "raised_exception" in exception_info
             else list(exception_info.values()))
    messages = []
    for info in infos:
        raised = isinstance(info, dict) and (info.get("raised_exception")
                                             or info.get("exception_message"))
        if raised:
            message = str(info.get("exception_message") or "exception without a message")
            messages.append(message.strip().splitlines()[-1] if message.strip() else message)
    return messages


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _condition(condition: Any) -> str:
    """A GX row condition as text:
    {'column': {'name': 'judged'}, 'operator': '>', ...} -> judged > 0."""
    if isinstance(condition, dict) and {"column", "operator"} <= set(condition):
        column = condition["column"]
        if isinstance(column, dict):
            column = column.get("name")
        return f"{column} {condition['operator']} {condition.get('parameter')!r}"
    return str(condition)


def _bound(kwargs: dict[str, Any], expectation: str) -> str:
    """The allowed range or condition of an expectation, from its kwargs."""
    condition = kwargs.get("row_condition")
    where = f" where {_condition(condition)}" if condition else ""
    if "column_list" in kwargs:
        return f"columns {kwargs['column_list']}"
    if "type_" in kwargs:
        return f"dtype {kwargs['type_']}"
    if "type_list" in kwargs:
        return f"dtype in {kwargs['type_list']}"
    if "value_set" in kwargs:
        return f"in {sorted(kwargs['value_set'])}"
    if expectation.endswith("not_be_null"):
        return "no nulls" + where
    if expectation.endswith("to_be_unique"):
        return "no duplicates"
    if "column_A" in kwargs:
        op = ">=" if kwargs.get("or_equal") else ">"
        return f"{kwargs['column_A']} {op} {kwargs['column_B']}"
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if low is None and high is None:
        return "?" + where
    left = "(" if kwargs.get("strict_min") else "["
    right = ")" if kwargs.get("strict_max") else "]"
    if high is None:
        return f"{'>' if kwargs.get('strict_min') else '>='} {_fmt(low)}{where}"
    if low is None:
        return f"{'<' if kwargs.get('strict_max') else '<='} {_fmt(high)}{where}"
    return f"{left}{_fmt(low)}, {_fmt(high)}{right}{where}"


def _observed(result: dict[str, Any]) -> str:
    if "observed_value" in result:
        if result["observed_value"] is None:
            return "none (no non-null values)"
        return _fmt(result["observed_value"])
    if "unexpected_count" in result:
        sample_values = (result.get("partial_unexpected_list") or [])[:3]
        values = ", ".join(repr(_plain(v)) for v in sample_values)
        sample = f", e.g. {values}" if values else ""
        return f"{result['unexpected_count']} of {result.get('element_count')} rows{sample}"
    return "-"


def _offending_rows(df: Any, expectation: str, kwargs: dict[str, Any],
                    result: dict[str, Any]) -> Any:
    """Up to MAX_ROWS_SHOWN rows that make the expectation fail, or None when rows say nothing."""
    indexes = result.get("partial_unexpected_index_list")
    column = kwargs.get("column")
    if indexes:
        labels = [i for i in indexes if not isinstance(i, dict)][:MAX_ROWS_SHOWN]
        return df.loc[labels] if labels else None
    if column is None or column not in df.columns or not len(df):
        return None
    if expectation == "expect_column_proportion_of_unique_values_to_be_between":
        counts = df[column].value_counts()
        repeated = counts[counts > 1].index[:MAX_ROWS_SHOWN]
        return df[df[column].isin(repeated)].drop_duplicates(subset=[column]).head(MAX_ROWS_SHOWN)
    if expectation == "expect_column_mean_to_be_between":
        observed = result.get("observed_value")
        high = kwargs.get("max_value")
        too_high = observed is not None and high is not None and observed >= high
        values = df[column].dropna()
        picked = values.sort_values(ascending=not too_high).index[:MAX_ROWS_SHOWN]
        return df.loc[picked]
    return None


def _failure(config: dict[str, Any], result: dict[str, Any], frame: str, df: Any,
             errors: list[str]) -> FailedExpectation:
    kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
    expectation = config["type"]
    rows: list[dict[str, Any]] = []
    if not errors and df is not None:
        try:
            picked = _offending_rows(df, expectation, kwargs, result)
            rows = _records(picked) if picked is not None else []
        except Exception as exc:  # noqa: BLE001 - rows are an aid; the failure stands without them
            rows = [{"note": f"offending rows unavailable: {type(exc).__name__}: {exc}"}]
    return FailedExpectation(
        check=(config.get("meta") or {}).get("check", expectation),
        expectation=expectation,
        column=kwargs.get("column"),
        frame=frame,
        observed="could not be evaluated" if errors else _observed(result),
        bound=_bound(kwargs, expectation),
        rows=rows,
        error="; ".join(errors) if errors else None,
    )


def gate_error(check: str, frame: str, exc: BaseException) -> FailedExpectation:
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    return FailedExpectation(check=check, expectation="gate_error", column=None, frame=frame,
                             observed="could not be evaluated", bound="-", error=message)


def _gx_result(df: Any, suite: FrameSuite, name: str, result_format: str) -> dict[str, Any]:
    """GX's validation of `df` against `suite`, as plain JSON, in `result_format`."""
    import great_expectations as gx
    from great_expectations.validator.v1_validator import Validator

    expectation_suite = gx.ExpectationSuite(name=name, expectations=suite.expectations)
    # what Batch.validate does, minus building the batch twice (once for the Batch, once more
    # for its validator)
    validator = Validator(batch_definition=_batch_definition(), batch_parameters={"dataframe": df},
                          result_format={"result_format": result_format,
                                         "partial_unexpected_count": MAX_ROWS_SHOWN})
    with built_once():
        validation = validator.validate_expectation_suite(expectation_suite)
    return json.loads(json.dumps(validation.to_json_dict(), default=str))


def _gx_failures(payload: dict[str, Any], suite: FrameSuite, df: Any,
                 decided: dict[str, FailedExpectation | None] | None
                 ) -> tuple[list[FailedExpectation], bool]:
    """(the failures of a GX result, whether GX itself judged any of them: not a whole-frame
    verdict from `decided`)."""
    failures, by_gx = [], False
    for item in payload["results"]:
        config = item["expectation_config"]
        key = expectation_key(config["type"], config["kwargs"])
        if decided is not None and key in decided:
            failures += [decided[key]] if decided[key] is not None else []
            continue
        errors = _errors(item.get("exception_info") or {})
        if errors or not item["success"]:
            failures.append(_failure(config, item.get("result") or {}, suite.frame, df, errors))
            by_gx = True
    return failures, by_gx


def validate_frame(df: Any, suite: FrameSuite, name: str, *,
                   decided: dict[str, FailedExpectation | None] | None = None,
                   ) -> tuple[int, list[FailedExpectation], dict[str, Any]]:
    """Run one suite on one pandas frame -> (expectations evaluated, failures, GX result JSON).

    decided: verdicts found over the whole frame (validators.whole_frame), by expectation_key;
    they replace GX's verdict on `df` (a sample), None meaning passed.

    Every expectation is judged in GX's BASIC result format (observed values, unexpected counts
    and values); a suite that GX fails is validated again in SUMMARY, whose row indexes name the
    offending rows. A passing expectation's SUMMARY adds only empty lists, so a pass records
    the same facts at about three quarters of the cost (bench/round_overhead.py).
    """
    payload = _gx_result(df, suite, name, "BASIC")
    failures, by_gx = _gx_failures(payload, suite, df, decided)
    if by_gx:
        payload = _gx_result(df, suite, name, "SUMMARY")
        failures, _ = _gx_failures(payload, suite, df, decided)
    unmatched = set(decided or {}) - {expectation_key(item["expectation_config"]["type"],
                                                      item["expectation_config"]["kwargs"])
                                      for item in payload["results"]}
    if unmatched:
        msg = f"whole-frame verdicts without a GX result: {sorted(unmatched)[:2]}"
        raise RuntimeError(msg)
    return len(payload["results"]), failures, payload


def _whole_frame_failure(check: WholeFrameCheck, suite: FrameSuite) -> FailedExpectation:
    """A whole-frame verdict as the report shows it; None's JSON and floats as GX gives them."""
    meta = suite.expectations[check.index].meta or {}
    return FailedExpectation(
        check=meta.get("check", check.expectation), expectation=check.expectation,
        column=check.kwargs.get("column"), frame=suite.frame,
        observed="could not be evaluated" if check.error else _observed(check.result),
        bound=_bound(check.kwargs, check.expectation),
        rows=json.loads(json.dumps(check.rows, default=str)), error=check.error)


def whole_frame_verdicts(checks: list[WholeFrameCheck],
             suite: FrameSuite) -> dict[str, FailedExpectation | None]:
    return {expectation_key(c.expectation, c.kwargs):
            None if c.success else _whole_frame_failure(c, suite) for c in checks}
