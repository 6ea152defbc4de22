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
from validators.gx_results import (
    FailedExpectation,
    gate_error,
    validate_frame,
    whole_frame_verdicts,
)
from validators.suites import FrameSuite, SuiteContext, build_suites
from validators.whole_frame import whole_frame_checks

SAMPLE_ROWS = 100_000
# The kinds whose gate compares them with the previous round's dataset of the kind (drift)
BASELINE_KINDS = ("problems",)


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
        failures.append(gate_error(f"read the previous round's {kind} ({previous_path})",
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
        return 0, [gate_error(f"build the {suite.frame} frame", suite.frame, exc)], None, None
    checks = whole_frame_checks(whole, suite.expectations) if whole is not None else None
    whole_json = None if checks is None else {
        "sample_rows": len(df), "checks": [c.to_json() for c in checks]}
    try:
        decided = None if checks is None else whole_frame_verdicts(checks, suite)
        count, failures, payload = validate_frame(df, suite, f"{kind}.{suite.frame}",
                                                  decided=decided)
    except Exception as exc:  # noqa: BLE001 - GX itself failed: not a pass
        return 0, [gate_error(f"run the {suite.frame} suite", suite.frame, exc)], None, whole_json
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
            failures.append(gate_error(f"read {path}", "rows", exc))
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
