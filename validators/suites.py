"""One Great Expectations suite per stage output kind, defined in code; thresholds from config.

A kind's checks run on one or more *frames*, each a DuckDB query over the view `data` (the
Parquet file as stored):

    rows          SELECT * FROM data: schema (ordered columns, pandas dtypes), row count, no
                  nulls in keys, unique ids, values and text lengths within bounds, the run id
                  and round every row must carry
    per_problem   verdicts grouped by problem: mean pass rate, answer spread
    lengths       problems with their text length: drift from the previous round

Distribution checks (what catches collapse), all thresholds in `GatesConfig`:

    proposals   distinct texts / proposer samples >= min_distinct_proposal_share
    problems    distinct texts / problems >= min_distinct_problem_share; mean text length and
                mean level within max_length_drift (relative) and max_level_drift (absolute) of
                the previous round's problems (rounds >= 1, when that round is recorded)
    verdicts    mean pass rate per problem strictly inside (min_mean_pass_rate,
                max_mean_pass_rate) -- all wrong or all right is a collapse, not a result --
                and answer spread >= min_answer_spread (rounds >= 1; skipped when every
                problem has a single sample)
    curriculum  kept fraction within [min_kept_fraction, max_kept_fraction]; mean pass rate
                strictly inside (min_mean_pass_rate, max_mean_pass_rate) (rounds >= 1)

Round 0 is the warm-up: its rollouts come from the untrained model, whose pass rates are near 0
by design, so the pass-rate and answer checks are skipped there. Checkpoints (train) are folders,
not tables, and have no suite.

Means are checked on the small grouped frames, not on the rows frame: Great Expectations'
pandas mean scans every value in Python (for decimals), which costs ~1 s per million rows.
Great Expectations is imported inside `build_suites` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from configs import GatesConfig
from storage.datasets import SCHEMAS

# pandas dtypes a Parquet type may arrive as from DuckDB: numpy int64/bool without nulls (kept:
# GX compares those vectorised, nullable Int64 value by value), nullable Int64/boolean with them
# (spelled as pandas class names, the spelling GX's type-list check resolves)
PANDAS_DTYPES = {pa.string(): ["str"], pa.int64(): ["int64", "Int64Dtype"],
                 pa.float64(): ["float64"], pa.bool_(): ["bool", "BooleanDtype"]}

ID_COLUMN = {
    "proposals": "proposal_id", "problems": "problem_id", "rollouts": "rollout_id",
    "verdicts": "rollout_id", "curriculum": "problem_id", "train_rows": "train_row_id",
    "evals": "item_id",
}
NOT_NULL = {
    "proposals": ["proposal_id", "run_id", "round", "prompt", "text", "source"],
    "problems": ["problem_id", "run_id", "round", "text", "level", "source", "proposal_id"],
    "rollouts": ["rollout_id", "run_id", "round", "problem_id", "sample_index", "prompt",
                 "completion", "completion_tokens", "checkpoint"],
    "verdicts": ["rollout_id", "run_id", "round", "problem_id", "method"],
    "curriculum": ["problem_id", "run_id", "round", "level", "samples", "judged", "reward_std",
                   "kept"],
    "train_rows": ["train_row_id", "run_id", "round", "role", "prompt", "completion", "weight",
                   "problem_id"],
    "evals": ["run_id", "round", "checkpoint", "item_id", "level", "prompt", "completion",
              "reference", "correct"],
}

ROWS_SQL = "SELECT * FROM data"
PER_PROBLEM_SQL = """
SELECT problem_id,
       count(*) AS samples,
       count(reward) AS judged,
       avg(reward) AS pass_rate,
       count(DISTINCT answer) + (count(answer) < count(*))::INTEGER AS distinct_answers,
       CASE WHEN count(*) > 1 THEN
            (count(DISTINCT answer) + (count(answer) < count(*))::INTEGER - 1) / (count(*) - 1)
       END AS answer_spread
FROM data GROUP BY problem_id ORDER BY problem_id
"""
LENGTHS_SQL = "SELECT problem_id, text, length(text) AS text_length, level FROM data"
PREVIOUS_PROBLEMS_SQL = "SELECT avg(length(text)) AS text_length, avg(level) AS level FROM data"


@dataclass(frozen=True)
class SuiteContext:
    """What a suite needs besides the thresholds. None = that check is skipped."""

    run_id: str | None = None
    round: int | None = None
    previous_problems: dict[str, float] | None = None  # {"text_length": .., "level": ..}
    samples_per_problem: int | None = None  # verdicts: most samples of one problem


@dataclass(frozen=True)
class FrameSuite:
    """The expectations to run on one frame: `sql` selects it from the view `data`."""

    frame: str
    sql: str
    expectations: list[Any]


def build_suites(kind: str, gates: GatesConfig, context: SuiteContext) -> list[FrameSuite]:
    """The expectations of `kind`, grouped by the frame they run on."""
    import great_expectations.expectations as gxe

    if kind not in SCHEMAS:
        msg = f"no gate suite for kind {kind!r} (known: {', '.join(SCHEMAS)})"
        raise KeyError(msg)

    def check(expectation: type, description: str, **kwargs: Any) -> Any:
        return expectation(meta={"check": description}, **kwargs)

    def not_null(column: str, where: str = "", **kwargs: Any) -> Any:
        return check(gxe.ExpectColumnValuesToNotBeNull, f"{column} is never null{where}",
                     column=column, **kwargs)

    def lengths(column: str, low: int, high: int) -> Any:
        return check(gxe.ExpectColumnValueLengthsToBeBetween, f"{column} has {low}..{high} characters",
                     column=column, min_value=low, max_value=high)

    def between(column: str, low: float | None, high: float | None, **kwargs: Any) -> Any:
        return check(gxe.ExpectColumnValuesToBeBetween, f"{column} within [{low}, {high}]",
                     column=column, min_value=low, max_value=high, **kwargs)

    def mean_inside(column: str, low: float, high: float, what: str) -> Any:
        return check(gxe.ExpectColumnMeanToBeBetween, f"{what} strictly between {low} and {high}",
                     column=column, min_value=low, max_value=high, strict_min=True, strict_max=True)

    schema = SCHEMAS[kind]
    rows: list[Any] = [
        check(gxe.ExpectTableColumnsToMatchOrderedList, f"columns are {', '.join(schema.names)}",
              column_list=list(schema.names)),
        check(gxe.ExpectTableRowCountToBeBetween, f"at least {gates.min_rows} rows",
              min_value=gates.min_rows),
    ]
    for f in schema:
        dtypes = PANDAS_DTYPES[f.type]
        if len(dtypes) == 1:
            rows.append(check(gxe.ExpectColumnTypeToBe, f"{f.name} has dtype {dtypes[0]}",
                              column=f.name, type_=dtypes[0]))
        else:
            rows.append(check(gxe.ExpectColumnValuesToBeInTypeList,
                              f"{f.name} has dtype {' or '.join(dtypes)}", column=f.name,
                              type_list=dtypes))
    rows += [not_null(column) for column in NOT_NULL[kind]]
    rows.append(check(gxe.ExpectColumnValuesToBeUnique, f"{ID_COLUMN[kind]} is unique",
                      column=ID_COLUMN[kind]))
    if context.run_id is not None:
        rows.append(check(gxe.ExpectColumnValuesToBeInSet, f"run_id is {context.run_id}",
                          column="run_id", value_set=[context.run_id]))
    if context.round is not None:
        rows.append(check(gxe.ExpectColumnValuesToBeInSet, f"round is {context.round}",
                          column="round", value_set=[context.round]))
    frames = [FrameSuite("rows", ROWS_SQL, rows)]
    later_round = context.round is not None and context.round >= 1

    if kind == "proposals":
        rows += [
            lengths("prompt", 1, gates.max_prompt_chars),
            lengths("text", 0, gates.max_completion_chars),
            check(gxe.ExpectColumnValuesToBeInSet,
                  "drop_reason is invalid, duplicate, near_duplicate, heldout or null",
                  column="drop_reason", value_set=["invalid", "duplicate", "near_duplicate", "heldout"]),
            check(gxe.ExpectColumnProportionOfUniqueValuesToBeBetween,
                  f"distinct texts / proposals >= {gates.min_distinct_proposal_share}",
                  column="text", min_value=gates.min_distinct_proposal_share),
        ]
    elif kind == "problems":
        rows += [
            lengths("text", 1, gates.max_problem_chars),
            between("level", 0, None),
            check(gxe.ExpectColumnProportionOfUniqueValuesToBeBetween,
                  f"distinct texts / problems >= {gates.min_distinct_problem_share}",
                  column="text", min_value=gates.min_distinct_problem_share),
        ]
        previous = context.previous_problems
        if previous is not None and previous.get("text_length") is not None:
            length, level = previous["text_length"], previous["level"]
            drift = gates.max_length_drift
            low, high = length * (1 - drift), length * (1 + drift)
            frames.append(FrameSuite("lengths", LENGTHS_SQL, [
                check(gxe.ExpectColumnMeanToBeBetween,
                      f"mean text length within {drift:.0%} of the previous round's {length:.2f}",
                      column="text_length", min_value=max(low, 0.0), max_value=high),
                check(gxe.ExpectColumnMeanToBeBetween,
                      f"mean level within {gates.max_level_drift} of the previous round's {level:.2f}",
                      column="level", min_value=level - gates.max_level_drift,
                      max_value=level + gates.max_level_drift),
            ]))
    elif kind == "rollouts":
        rows += [
            lengths("prompt", 1, gates.max_prompt_chars),
            lengths("completion", 0, gates.max_completion_chars),
            between("sample_index", 0, None),
            between("completion_tokens", 0, None),
        ]
    elif kind == "verdicts":
        from great_expectations.expectations.row_conditions import Column

        rows += [
            between("reward", 0.0, 1.0),
            not_null("reward", " where method != 'none'", row_condition=Column("method") != "none"),
        ]
        if later_round:
            per_problem = [mean_inside("pass_rate", gates.min_mean_pass_rate,
                                       gates.max_mean_pass_rate, "mean pass rate")]
            if (context.samples_per_problem or 0) >= 2:  # one sample per problem: no spread
                per_problem.append(check(
                    gxe.ExpectColumnMeanToBeBetween,
                    f"answer spread (distinct answers - 1) / (samples - 1) >= {gates.min_answer_spread}",
                    column="answer_spread", min_value=gates.min_answer_spread))
            frames.append(FrameSuite("per_problem", PER_PROBLEM_SQL, per_problem))
    elif kind == "curriculum":
        from great_expectations.expectations.row_conditions import Column

        rows += [
            between("pass_rate", 0.0, 1.0),
            between("reward_std", 0.0, 0.5),
            not_null("pass_rate", " where judged > 0", row_condition=Column("judged") > 0),
            check(gxe.ExpectColumnPairValuesAToBeGreaterThanB, "judged <= samples",
                  column_A="samples", column_B="judged", or_equal=True),
            check(gxe.ExpectColumnMeanToBeBetween,
                  f"kept fraction within [{gates.min_kept_fraction}, {gates.max_kept_fraction}]",
                  column="kept", min_value=gates.min_kept_fraction, max_value=gates.max_kept_fraction),
        ]
        if later_round:
            rows.append(mean_inside("pass_rate", gates.min_mean_pass_rate, gates.max_mean_pass_rate,
                                    "mean pass rate"))
    elif kind == "train_rows":
        rows += [
            lengths("prompt", 1, gates.max_prompt_chars),
            lengths("completion", 1, gates.max_completion_chars),
            check(gxe.ExpectColumnValuesToBeInSet, "role is solver or proposer",
                  column="role", value_set=["solver", "proposer"]),
            between("weight", 0.0, 1.0),
        ]
    elif kind == "evals":
        rows += [
            lengths("prompt", 1, gates.max_prompt_chars),
            lengths("completion", 0, gates.max_completion_chars),
        ]
    return frames
