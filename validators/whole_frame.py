"""Whole-frame checks: the expectations a gate evaluates over every row with polars when a frame
is longer than the sample Great Expectations sees (validators/gate.py).

    lf = pl.scan_parquet("runs/demo/round-001/verdicts-5d1e2f3a4b5c.parquet")
    checks = whole_frame_checks(lf, suite.expectations)
    checks[0]   # WholeFrameCheck(index=19, expectation="expect_column_values_to_be_between",
                #   kwargs={"column": "reward", "min_value": 0.0, "max_value": 1.0},
                #   success=False, result={"unexpected_count": 1, "element_count": 2000000,
                #   "partial_unexpected_list": [1.7]}, rows=[{"rollout_id": "..", ...}])

`result` has the shape of Great Expectations' SUMMARY result (`observed_value`, or
`unexpected_count` of `element_count` with `partial_unexpected_list`), with the same semantics:
map checks ignore nulls (NaN counts as null, as in pandas), a row condition selects the rows
first, every copy of a repeated id is unexpected, the unique share counts distinct non-null
values over non-null values. Every aggregate of a frame is one streaming pass over its columns;
offending rows are read (at most MAX_ROWS_SHOWN) only for checks that failed. Ids are checked
for repeats on 64-bit hashes of their values, and repeated hashes are compared by value, so
memory grows with 8 bytes per row, never with the id's length.

Dtype checks have no whole-frame form: they run on the sample, whose columns and Parquet types
are the file's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

MAX_ROWS_SHOWN = 5
MAX_VALUES_SHOWN = 3


@dataclass
class WholeFrameCheck:
    """One expectation evaluated over the whole frame; `error` when it could not be."""

    index: int
    expectation: str
    kwargs: dict[str, Any]
    success: bool
    result: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"expectation": self.expectation, "kwargs": self.kwargs, "success": self.success,
                "result": self.result, "error": self.error}


def expectation_key(expectation: str, kwargs: dict[str, Any]) -> str:
    """What tells two expectations of one suite apart: type and arguments (GX's batch id
    dropped)."""
    plain = {k: v for k, v in kwargs.items() if k != "batch_id"}
    return json.dumps([expectation, plain], sort_keys=True, default=str)


def _numeric(lf: pl.LazyFrame, column: str) -> pl.Expr:
    """A column with NaN read as null, as pandas reads it."""
    if lf.collect_schema()[column].is_float():
        return pl.col(column).fill_nan(None)
    return pl.col(column)


_COMPARISONS: dict[str, Callable[[pl.Expr, Any], pl.Expr]] = {
    ">": lambda c, p: c > p, ">=": lambda c, p: c >= p, "<": lambda c, p: c < p,
    "<=": lambda c, p: c <= p, "==": lambda c, p: c == p, "!=": lambda c, p: c != p,
    "IN": lambda c, p: c.is_in(list(p)),
}


def _not_in(column: pl.Expr, values: Any) -> pl.Expr:
    """True for values outside `values`, null for a null (pandas: a null is in no set)."""
    return pl.when(column.is_null()).then(None).otherwise(~column.is_in(list(values)))


def _condition(kwargs: dict[str, Any]) -> pl.Expr:
    """The rows a GX row condition selects, as pandas selects them (a null is not in any set,
    and compares false)."""
    condition = kwargs.get("row_condition")
    if not condition:
        return pl.lit(True)
    column = condition["column"]
    name = column["name"] if isinstance(column, dict) else column
    if condition.get("type") == "nullity":  # Column(...).is_null() / .is_not_null()
        return pl.col(name).is_null() == pl.lit(bool(condition["is_null"]))
    operator, parameter = condition.get("operator"), condition.get("parameter")
    if operator == "NOT_IN":
        return _not_in(pl.col(name), parameter).fill_null(True)
    if operator not in _COMPARISONS:
        msg = f"row condition {condition!r} has no whole-frame form"
        raise ValueError(msg)
    return _COMPARISONS[operator](pl.col(name), parameter).fill_null(False)


def _outside(value: pl.Expr, kwargs: dict[str, Any]) -> pl.Expr:
    """value outside [min_value, max_value] (strict_min / strict_max: open ends); null if null."""
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    parts = []
    if low is not None:
        parts.append(value <= low if kwargs.get("strict_min") else value < low)
    if high is not None:
        parts.append(value >= high if kwargs.get("strict_max") else value > high)
    return pl.any_horizontal(parts) if parts else pl.lit(False)


def _inside(value: float | None, kwargs: dict[str, Any]) -> bool:
    if value is None:
        return False
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    return not ((low is not None and (value <= low if kwargs.get("strict_min") else value < low))
                or (high is not None
                    and (value >= high if kwargs.get("strict_max") else value > high)))


# Map checks: the rows that fail (true), pass (false) or are ignored (null), per expectation.
def _unexpected_rows(lf: pl.LazyFrame, expectation: str, kwargs: dict[str, Any]) -> pl.Expr:
    column = kwargs.get("column")
    if expectation == "expect_column_values_to_not_be_null":
        return _numeric(lf, column).is_null() & _condition(kwargs)
    if expectation == "expect_column_values_to_be_in_set":
        return _not_in(pl.col(column), kwargs["value_set"])
    if expectation == "expect_column_values_to_not_be_in_set":
        return pl.col(column).is_in(list(kwargs["value_set"]))
    if expectation == "expect_column_values_to_be_between":
        return _outside(_numeric(lf, column), kwargs)
    if expectation == "expect_column_value_lengths_to_be_between":
        return _outside(pl.col(column).str.len_chars(), kwargs)
    if expectation == "expect_column_pair_values_a_to_be_greater_than_b":
        a, b = pl.col(kwargs["column_A"]), pl.col(kwargs["column_B"])
        passed = (a >= b) if kwargs.get("or_equal") else (a > b)
        return pl.when(a.is_null() & b.is_null()).then(None).otherwise(~passed.fill_null(False))
    msg = f"{expectation} has no whole-frame form"
    raise KeyError(msg)


MAP_CHECKS = ("expect_column_values_to_not_be_null", "expect_column_values_to_be_in_set",
              "expect_column_values_to_not_be_in_set",
              "expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between",
              "expect_column_pair_values_a_to_be_greater_than_b")
AGGREGATE_CHECKS = ("expect_table_row_count_to_be_between",
                    "expect_table_columns_to_match_ordered_list",
                    "expect_column_mean_to_be_between",
                    "expect_column_proportion_of_unique_values_to_be_between",
                    "expect_column_values_to_be_unique",
                    "expect_compound_columns_to_be_unique")
WHOLE_FRAME_EXPECTATIONS = MAP_CHECKS + AGGREGATE_CHECKS
HASH_SEED = 0


def _map_aggregates(lf: pl.LazyFrame, index: int, expectation: str,
                    kwargs: dict[str, Any]) -> list[pl.Expr]:
    rows = _condition(kwargs).sum() if kwargs.get("row_condition") else pl.len()
    return [_unexpected_rows(lf, expectation, kwargs).sum().alias(f"{index}.unexpected"),
            rows.alias(f"{index}.rows")]


def _aggregates(lf: pl.LazyFrame, index: int, expectation: str,
                kwargs: dict[str, Any]) -> list[pl.Expr]:
    """The one-pass aggregates an expectation needs (unique ids and columns need none)."""
    if expectation in MAP_CHECKS:
        return _map_aggregates(lf, index, expectation, kwargs)
    column = kwargs.get("column")
    if expectation == "expect_table_row_count_to_be_between":
        return [pl.len().alias(f"{index}.value")]
    if expectation == "expect_column_mean_to_be_between":
        return [_numeric(lf, column).cast(pl.Float64).mean().alias(f"{index}.value")]
    if expectation == "expect_column_proportion_of_unique_values_to_be_between":
        return [pl.col(column).drop_nulls().n_unique().alias(f"{index}.distinct"),
                pl.col(column).count().alias(f"{index}.nonnull")]
    return []


def _collect(lf: pl.LazyFrame) -> pl.DataFrame:
    return lf.collect(engine="streaming")


def _examples(lf: pl.LazyFrame, where: pl.Expr) -> list[dict[str, Any]]:
    return _collect(lf.filter(where).head(MAX_ROWS_SHOWN)).to_dicts()


def _map_check(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]],
               values: dict[str, Any]) -> WholeFrameCheck:
    index, expectation, kwargs = spec
    unexpected = int(values[f"{index}.unexpected"] or 0)
    rows = int(values[f"{index}.rows"])
    result: dict[str, Any] = {"element_count": rows,
                              "unexpected_count": unexpected, "partial_unexpected_list": []}
    mostly = kwargs.get("mostly")  # GX: the share of rows that must pass (None: all)
    passed = unexpected == 0 if mostly is None else (not rows
                                                     or (rows - unexpected) / rows >= mostly)
    check = WholeFrameCheck(index, expectation, kwargs, passed, result)
    if unexpected:
        check.rows = _examples(lf, _unexpected_rows(lf, expectation, kwargs).fill_null(False))
        column = kwargs.get("column") or kwargs["column_A"]
        result["partial_unexpected_list"] = [r[column] for r in check.rows[:MAX_VALUES_SHOWN]]
    return check


def _repeated_values(lf: pl.LazyFrame, column: str, *, on_hashes: bool) -> tuple[int, list[Any]]:
    """(rows whose non-null value repeats, up to MAX_ROWS_SHOWN such values, sorted)."""
    present = lf.filter(pl.col(column).is_not_null())
    candidates = present
    if on_hashes:
        key = pl.col(column).hash(HASH_SEED)
        hashes = _collect(present.group_by(key.alias("hash")).len()
                          .filter(pl.col("len") > 1).select("hash"))["hash"]
        if not len(hashes):
            return 0, []
        candidates = present.filter(key.is_in(hashes.implode()))
    repeated = _collect(candidates.group_by(column).len().filter(pl.col("len") > 1))
    values = sorted(repeated[column].to_list())[:MAX_ROWS_SHOWN]
    return int(repeated["len"].sum()), values


COMPOUND_KEY = "__compound_key"


def _compound_check(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]]) -> WholeFrameCheck:
    """Unique combinations of columns (GX's compound check): every copy of a repeated
    combination counts; a row whose columns are all null is skipped, as GX skips it."""
    index, expectation, kwargs = spec
    columns = list(kwargs["column_list"])
    some = pl.any_horizontal([pl.col(c).is_not_null() for c in columns])
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("\x00") for c in columns],
                        separator="\x1f")
    keyed = lf.filter(some).with_columns(key.alias(COMPOUND_KEY))
    unexpected, repeated = _repeated_values(keyed, COMPOUND_KEY, on_hashes=True)
    rows = int(_collect(keyed.select(pl.len())).item())
    check = WholeFrameCheck(index, expectation, kwargs, unexpected == 0,
                            {"element_count": rows, "unexpected_count": unexpected,
                             "partial_unexpected_list": []})
    if unexpected:
        check.rows = _collect(keyed.filter(pl.col(COMPOUND_KEY).is_in(repeated))
                              .head(MAX_ROWS_SHOWN).drop(COMPOUND_KEY)).to_dicts()
        check.result["partial_unexpected_list"] = [
            {c: r[c] for c in columns} for r in check.rows[:MAX_VALUES_SHOWN]]
    return check


def _repeat_check(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]],
                  values: dict[str, Any]) -> WholeFrameCheck:
    """Unique ids (every copy counts) or the share of distinct values."""
    index, expectation, kwargs = spec
    if expectation == "expect_compound_columns_to_be_unique":
        return _compound_check(lf, spec)
    column = kwargs["column"]
    if expectation == "expect_column_values_to_be_unique":
        unexpected, repeated = _repeated_values(lf, column, on_hashes=True)
        rows = int(_collect(lf.select(pl.len())).item())
        result: dict[str, Any] = {"element_count": rows, "unexpected_count": unexpected,
                                  "partial_unexpected_list": repeated[:MAX_VALUES_SHOWN]}
        check = WholeFrameCheck(index, expectation, kwargs, unexpected == 0, result)
    else:
        nonnull = int(values[f"{index}.nonnull"])
        share = int(values[f"{index}.distinct"]) / nonnull if nonnull else 0
        check = WholeFrameCheck(index, expectation, kwargs, _inside(share, kwargs),
                                {"observed_value": share})
        if not check.success:
            repeated = _repeated_values(lf, column, on_hashes=False)[1]
    if not check.success:
        check.rows = _collect(lf.filter(pl.col(column).is_in(repeated))
                              .unique(subset=[column], keep="first", maintain_order=True)
                              .head(MAX_ROWS_SHOWN)).to_dicts()
    return check


def _value_check(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]],
                 values: dict[str, Any]) -> WholeFrameCheck:
    """Row count, columns or a mean: one observed value; a failed mean shows its extreme rows."""
    index, expectation, kwargs = spec
    if expectation == "expect_table_columns_to_match_ordered_list":
        names = lf.collect_schema().names()
        return WholeFrameCheck(index, expectation, kwargs, names == list(kwargs["column_list"]),
                               {"observed_value": names})
    value = values[f"{index}.value"]
    check = WholeFrameCheck(index, expectation, kwargs, _inside(value, kwargs),
                            {"observed_value": value})
    if expectation == "expect_column_mean_to_be_between" and not check.success:
        column, high = kwargs["column"], kwargs.get("max_value")
        too_high = value is not None and high is not None and value >= high
        present = lf.filter(_numeric(lf, column).is_not_null())
        extreme = (present.top_k(MAX_ROWS_SHOWN, by=column) if too_high
                   else present.bottom_k(MAX_ROWS_SHOWN, by=column))
        check.rows = _collect(extreme).to_dicts()
    return check


def _evaluate(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]],
              values: dict[str, Any]) -> WholeFrameCheck:
    expectation = spec[1]
    if expectation in MAP_CHECKS:
        return _map_check(lf, spec, values)
    if expectation in ("expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique",
                       "expect_column_proportion_of_unique_values_to_be_between"):
        return _repeat_check(lf, spec, values)
    return _value_check(lf, spec, values)


def _unevaluable(spec: tuple[int, str, dict[str, Any]], exc: BaseException) -> WholeFrameCheck:
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    return WholeFrameCheck(spec[0], spec[1], spec[2], False, {}, error=message)


def _one(lf: pl.LazyFrame, spec: tuple[int, str, dict[str, Any]]) -> WholeFrameCheck:
    """One expectation on its own (after the shared pass failed): its own error, if any."""
    try:
        expressions = _aggregates(lf, *spec)
        values = _collect(lf.select(expressions)).row(0, named=True) if expressions else {}
        return _evaluate(lf, spec, values)
    except Exception as exc:  # noqa: BLE001 - an unevaluable check is a failure, not a pass
        return _unevaluable(spec, exc)


def whole_frame_checks(lf: pl.LazyFrame, expectations: list[Any]) -> list[WholeFrameCheck]:
    """Evaluate every expectation that has a whole-frame form over all rows of `lf`.

    Parameters
    ----------
    lf
        The frame: a Parquet scan (the rows frame) or a frame already built.
    expectations
        A suite's GX expectations; those of types outside WHOLE_FRAME_EXPECTATIONS are skipped.

    Returns
    -------
    list[WholeFrameCheck]
        One per evaluated expectation, in suite order; a check that could not be evaluated (a
        missing column) has success False and its `error`.
    """
    specs = []
    for index, expectation in enumerate(expectations):
        config = expectation.configuration
        if config.type in WHOLE_FRAME_EXPECTATIONS:
            kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
            specs.append((index, config.type, kwargs))
    try:
        expressions = [e for spec in specs for e in _aggregates(lf, *spec)]
        values = _collect(lf.select(expressions)).row(0, named=True) if expressions else {}
        return [_evaluate(lf, spec, values) for spec in specs]
    except Exception:  # noqa: BLE001 - find which checks fail to evaluate, one by one
        return [_one(lf, spec) for spec in specs]
