"""The gate runner: a stage output (Parquet) -> DuckDB frames -> Great Expectations -> a verdict.

    result = run_gate(path, "verdicts", config.gates, run_id="demo", round_index=1)
    result.success                      # False
    result.failures[0].expectation      # "expect_column_values_to_be_between"
    result.failures[0].column           # "reward"
    result.failures[0].observed         # "1 of 800 rows, e.g. 1.7"
    result.failures[0].bound            # "[0.0, 1.0]"
    result.failures[0].rows             # up to 5 offending rows, as dicts
    result.gx                           # {"rows": <the GX validation result JSON>, ...}

The file is queried with DuckDB (storage.gate_data holds the queries) and each frame handed to
an ephemeral GX 1.x context as a pandas frame (GX does not accept polars frames, and its DuckDB
SQL path is broken upstream: GX issues #10738, #11579). GX is imported inside functions, so
importing this module stays cheap.

Large files: Great Expectations sees at most SAMPLE_ROWS rows of a frame (100 000; the first
ones, in file order, so the sample is the same every time), and a frame longer than that is
also checked whole by validators.whole_frame with polars (the rows frame as a streaming
Parquet scan, the grouped frames as built by DuckDB over every row). Each check of a longer
frame is decided by one of the two:

    whole frame   row count, column names and order, nulls (with their row conditions), unique
                  ids, values in a set, value ranges, text-length ranges, column pairs (judged <=
                  samples), means (kept fraction, mean pass rate, answer spread, drift), the
                  share of distinct values
    sample        dtypes (the sample's columns carry the file's Parquet types)

A frame of at most SAMPLE_ROWS rows is checked by Great Expectations alone, every row. The
recorded result keeps GX's JSON for the sample (`gx[frame]`) and the whole-frame verdicts next
to it (`gx["whole_frame"][frame]`); a failed whole-frame check is reported like a GX one:
observed over every row (`1 of 2000000 rows, e.g. 1.7`), with up to 5 offending rows from
anywhere in the file.

Nothing passes silently: an expectation that raised (a missing column, a type GX cannot
compare), a frame that cannot be built, a file that cannot be read all count as failures
with their own message.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from configs import GatesConfig
from storage import interruption
from storage.gate_data import (
    attach_dataset,
    gate_connection,
    gate_frame,
    max_samples_per_problem,
    problem_means,
    stored_stage_outputs,
)
from validators.suites import FrameSuite, SuiteContext, build_suites
from validators.whole_frame import WholeFrameCheck, expectation_key, whole_frame_checks

MAX_ROWS_SHOWN = 5
SAMPLE_ROWS = 100_000
# The kinds whose gate compares them with the previous round's dataset of the kind (drift)
BASELINE_KINDS = ("problems",)


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


@dataclass
class GateResult:
    """The verdict of one gate on one dataset; `gx` keeps GX's result JSON per frame."""

    kind: str
    path: str
    rows: int | None
    success: bool
    evaluated: int
    failures: list[FailedExpectation]
    seconds: float
    round: int | None = None
    stage: str | None = None
    gx: dict[str, Any] = field(default_factory=dict)
    sample_rows: int | None = None  # GX saw the first this-many rows of longer frames

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateResult:
        data = dict(data)
        data["failures"] = [FailedExpectation(**f) for f in data["failures"]]
        return cls(**data)

    def summary(self) -> str:
        """One line: which expectations failed on which dataset."""
        names = ", ".join(f.name for f in self.failures[:4])
        more = f" and {len(self.failures) - 4} more" if len(self.failures) > 4 else ""
        return f"{self.kind}: {len(self.failures)} failed ({names}{more})"


class GateFailed(Exception):
    """A stage output failed its gate: the round stops before anything reads it.

    Never retried (tasks/retry.py matches it by name): the same data fails the same
    way. `results` holds every gate run on the stage's outputs, passed ones included.
    """

    def __init__(self, stage: str, round_index: int, results: list[GateResult]):
        self.stage = stage
        self.round = round_index
        self.results = results
        failed = "; ".join(r.summary() for r in results if not r.success)
        super().__init__(f"round {round_index} {stage}: data gate failed: {failed}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (GateFailed, (self.stage, self.round, self.results))


# ---- GX plumbing ----------------------------------------------------------------------------


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
    # GX turns each expectation's class name into its type on every read of its `configuration`
    # (about 90 reads per expectation per validation, 15 % of a gate); the conversion is pure.
    from great_expectations.expectations import expectation

    expectation.camel_to_snake = functools.cache(expectation.camel_to_snake)
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


def _gate_error(check: str, frame: str, exc: BaseException) -> FailedExpectation:
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


def _decided(checks: list[WholeFrameCheck],
             suite: FrameSuite) -> dict[str, FailedExpectation | None]:
    return {expectation_key(c.expectation, c.kwargs):
            None if c.success else _whole_frame_failure(c, suite) for c in checks}


# ---- the gate -------------------------------------------------------------------------------


def problem_stats(path: Path | str) -> dict[str, float] | None:
    """Mean text length and level of a problems file (the drift baseline), None if empty."""
    length, level = problem_means(path)
    if length is None or level is None:
        return None
    return {"text_length": float(length), "level": float(level)}


def _samples_per_problem(con: Any) -> int | None:
    """Most verdicts of one problem (None when the column is missing: the schema check fails)."""
    try:
        return max_samples_per_problem(con)
    except Exception:  # noqa: BLE001
        return None


def _previous_stats(kind: str, previous_path: Path | str | None,
                    failures: list[FailedExpectation]) -> dict[str, float] | None:
    """The drift baseline of a problems gate; an unreadable one is a failure, not a pass."""
    if previous_path is None or kind not in BASELINE_KINDS:
        return None
    try:
        return problem_stats(previous_path)
    except Exception as exc:  # noqa: BLE001 - an unreadable baseline fails the drift check
        failures.append(_gate_error(f"read the previous round's {kind} ({previous_path})",
                                    "lengths", exc))
        return None


def _suite_frames(con: Any, suite: FrameSuite, path: Path | str, rows: int,
                  sample_rows: int) -> tuple[Any, Any]:
    """(the pandas frame GX sees, the whole frame as a polars LazyFrame or None when GX sees
    every row). The rows frame is the file itself, scanned; other frames are built whole."""
    import polars as pl

    if suite.frame == "rows":
        if rows <= sample_rows:
            return gate_frame(con, "rows"), None
        return gate_frame(con, "rows", limit=sample_rows), pl.scan_parquet(path)
    df = gate_frame(con, suite.frame)
    if len(df) <= sample_rows:
        return df, None
    return df.head(sample_rows), pl.from_pandas(df).lazy()


def _run_suite(con: Any, suite: FrameSuite, kind: str, path: Path | str, rows: int,
               sample_rows: int) -> tuple[int, list[FailedExpectation], dict[str, Any] | None,
                                          dict[str, Any] | None]:
    """Build one suite's frame and validate it -> (evaluated, failures, GX JSON or None, the
    whole-frame checks' JSON or None when GX saw every row)."""
    try:
        df, whole = _suite_frames(con, suite, path, rows, sample_rows)
    except Exception as exc:  # noqa: BLE001 - e.g. a dropped column the frame needs
        return 0, [_gate_error(f"build the {suite.frame} frame", suite.frame, exc)], None, None
    checks = whole_frame_checks(whole, suite.expectations) if whole is not None else None
    whole_json = None if checks is None else {
        "sample_rows": len(df), "checks": [c.to_json() for c in checks]}
    try:
        decided = None if checks is None else _decided(checks, suite)
        count, failures, payload = validate_frame(df, suite, f"{kind}.{suite.frame}",
                                                  decided=decided)
    except Exception as exc:  # noqa: BLE001 - GX itself failed: not a pass
        return 0, [_gate_error(f"run the {suite.frame} suite", suite.frame, exc)], None, whole_json
    return count, failures, payload, whole_json


def run_gate(path: Path | str, kind: str, gates: GatesConfig, *, run_id: str | None = None,
             round_index: int | None = None, stage: str | None = None,
             previous_path: Path | str | None = None,
             sample_rows: int = SAMPLE_ROWS) -> GateResult:
    """Check one stage output against the suite of its kind. Pure: reads the file, writes nothing.

    previous_path: the previous round's dataset of the same kind (problems: drift baseline).
    sample_rows: the most rows of a frame Great Expectations sees; a longer frame is checked
    whole by validators.whole_frame and GX sees its first `sample_rows` rows.
    """
    started = time.perf_counter()
    failures: list[FailedExpectation] = []
    gx_results: dict[str, Any] = {}
    evaluated = 0
    rows: int | None = None
    previous = _previous_stats(kind, previous_path, failures)
    with gate_connection() as con:
        try:
            rows = attach_dataset(con, path)
        except Exception as exc:  # noqa: BLE001 - an unreadable file fails its gate
            failures.append(_gate_error(f"read {path}", "rows", exc))
        samples = _samples_per_problem(con) if kind == "verdicts" and rows else None
        context = SuiteContext(run_id=run_id, round=round_index, previous_problems=previous,
                               samples_per_problem=samples, hinted=stage == "rationalize")
        suites = build_suites(kind, gates, context) if rows is not None else []
        for suite in suites:
            count, failed, payload, whole = _run_suite(con, suite, kind, path, rows, sample_rows)
            evaluated += count
            failures += failed
            if payload is not None:
                gx_results[suite.frame] = payload
            if whole is not None:
                gx_results.setdefault("whole_frame", {})[suite.frame] = whole
    if failures:
        interruption.check()  # a stop request is not the data's failure
    return GateResult(kind=kind, path=str(path), rows=rows, success=not failures,
                      evaluated=evaluated, failures=failures,
                      seconds=time.perf_counter() - started, round=round_index, stage=stage,
                      gx=gx_results, sample_rows=sample_rows if "whole_frame" in gx_results
                      else None)


def stored_outputs(catalog: Any, run_id: str, *, round_index: int | None = None,
                   stage: str | None = None) -> list[dict[str, Any]]:
    """The newest recorded dataset per (round, stage, kind) of a run, completed or gate_failed,
    in the order the stages ran (checkpoints excluded)."""
    rows = stored_stage_outputs(catalog, run_id)
    rows = [r for r in rows if (round_index is None or r["round"] == round_index)
            and (stage is None or r["stage"] == stage)]
    return sorted(rows, key=lambda r: (r["round"], r["started_at"], r["kind"]))


def validate_stored(catalog: Any, run_id: str, gates: GatesConfig, *,
                    round_index: int | None = None,
                    stage: str | None = None) -> list[GateResult]:
    """Run the gates again on a run's stored outputs (read-only: nothing is recorded)."""
    results = []
    for row in stored_outputs(catalog, run_id, round_index=round_index, stage=stage):
        previous = (catalog.latest_dataset(run_id, row["round"] - 1, row["kind"])
                    if row["round"] and row["kind"] in BASELINE_KINDS else None)
        results.append(run_gate(row["path"], row["kind"], gates, run_id=run_id,
                                round_index=row["round"], stage=row["stage"],
                                previous_path=previous))
    return results
