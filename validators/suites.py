"""One Great Expectations suite per stage output kind, defined in code; thresholds from config.

A kind's checks run on one or more *frames* of the Parquet file as stored, each named here and
built by `storage.gate_data` (which holds their queries):

    rows          every row: schema (ordered columns, pandas dtypes), row count, no
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
Great Expectations is imported inside the functions that build expectations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from configs import GatesConfig
from domains.base import EXECUTION_REASONS
from domains.checking import UNJUDGED_REASONS, VERIFIER_FAILURES
from storage.datasets import SCHEMAS

# pandas dtypes a Parquet type may arrive as from DuckDB: numpy int64/bool without nulls (kept:
# GX compares those vectorised, nullable Int64 value by value), nullable Int64/boolean with them
# (spelled as pandas class names, the spelling GX's type-list check resolves)
PANDAS_DTYPES = {pa.string(): ["str"], pa.int64(): ["int64", "Int64Dtype"],
                 pa.float64(): ["float64"], pa.bool_(): ["bool", "BooleanDtype"]}

ID_COLUMN = {
    "proposals": "proposal_id", "problems": "problem_id", "rollouts": "rollout_id",
    "verdicts": "rollout_id", "curriculum": "problem_id", "train_rows": "train_row_id",
    "evals": "item_id", "judgements": "rollout_id",
}
NOT_NULL = {
    "proposals": ["proposal_id", "run_id", "round", "prompt", "text", "source"],
    "problems": ["problem_id", "run_id", "round", "text", "level", "source", "proposal_id"],
    "rollouts": ["rollout_id", "run_id", "round", "problem_id", "sample_index", "prompt",
                 "completion", "completion_tokens", "checkpoint"],
    "verdicts": ["rollout_id", "run_id", "round", "problem_id", "method"],
    "curriculum": ["problem_id", "run_id", "round", "level", "samples", "judged", "passed",
                   "reward_std", "reward_mad", "kept"],
    "train_rows": ["train_row_id", "run_id", "round", "role", "prompt", "completion", "weight",
                   "problem_id"],
    # an eval's reference is null for a held-out prompt without an answer (a judged dataset file)
    "evals": ["run_id", "round", "checkpoint", "item_id", "level", "prompt", "completion",
              "correct"],
    "judgements": ["judgement_id", "run_id", "round", "rollout_id", "problem_id", "judge",
                   "question", "prompt", "reply"],
}


@dataclass(frozen=True)
class SuiteContext:
    """What a suite needs besides the thresholds. None = that check is skipped."""

    run_id: str | None = None
    round: int | None = None
    previous_problems: dict[str, float] | None = None  # {"text_length": .., "level": ..}
    samples_per_problem: int | None = None  # verdicts: most samples of one problem
    # verdicts of answers sampled with the answer as a hint (tasks/rationalize.py): their pass
    # rates and answer spread say nothing of the model, so the per-problem band is not checked
    hinted: bool = False


@dataclass(frozen=True)
class FrameSuite:
    """The expectations to run on one frame; `frame` names it (storage.gate_data.FRAMES)."""

    frame: str
    expectations: list[Any]


# What one kind adds to the common checks: expectations on the rows frame, and suites on other
# frames.
KindChecks = tuple[list[Any], list[FrameSuite]]


def build_suites(kind: str, gates: GatesConfig, context: SuiteContext) -> list[FrameSuite]:
    """The expectations of `kind`, grouped by the frame they run on (the rows frame first)."""
    if kind not in SCHEMAS:
        msg = f"no gate suite for kind {kind!r} (known: {', '.join(SCHEMAS)})"
        raise KeyError(msg)
    kind_rows, frames = KIND_CHECKS[kind](gates, context)
    return [FrameSuite("rows", [*_common_row_checks(kind, gates, context), *kind_rows]), *frames]


# ---- expectation builders -------------------------------------------------------------------


def _check(expectation: type, description: str, **kwargs: Any) -> Any:
    """An expectation whose meta names the check in words (the report's first line)."""
    return expectation(meta={"check": description}, **kwargs)


def _not_null(column: str, where: str = "", **kwargs: Any) -> Any:
    import great_expectations.expectations as gxe

    return _check(gxe.ExpectColumnValuesToNotBeNull, f"{column} is never null{where}",
                  column=column, **kwargs)


def _lengths(column: str, low: int, high: int) -> Any:
    import great_expectations.expectations as gxe

    return _check(gxe.ExpectColumnValueLengthsToBeBetween, f"{column} has {low}..{high} characters",
                  column=column, min_value=low, max_value=high)


def _between(column: str, low: float | None, high: float | None, **kwargs: Any) -> Any:
    import great_expectations.expectations as gxe

    return _check(gxe.ExpectColumnValuesToBeBetween, f"{column} within [{low}, {high}]",
                  column=column, min_value=low, max_value=high, **kwargs)


def _mean_inside(column: str, low: float, high: float, what: str) -> Any:
    import great_expectations.expectations as gxe

    return _check(gxe.ExpectColumnMeanToBeBetween, f"{what} strictly between {low} and {high}",
                  column=column, min_value=low, max_value=high, strict_min=True, strict_max=True)


def _later_round(context: SuiteContext) -> bool:
    """Rounds >= 1: past the warm-up, so pass-rate and answer checks apply."""
    return context.round is not None and context.round >= 1


# ---- checks every kind has ------------------------------------------------------------------


def _dtype_check(name: str, dtype: pa.DataType) -> Any:
    import great_expectations.expectations as gxe

    dtypes = PANDAS_DTYPES[dtype]
    if len(dtypes) == 1:
        return _check(gxe.ExpectColumnTypeToBe, f"{name} has dtype {dtypes[0]}",
                      column=name, type_=dtypes[0])
    return _check(gxe.ExpectColumnValuesToBeInTypeList, f"{name} has dtype {' or '.join(dtypes)}",
                  column=name, type_list=dtypes)


def _common_row_checks(kind: str, gates: GatesConfig, context: SuiteContext) -> list[Any]:
    """Schema, row count, non-null keys, a unique id, and the run id and round of every row."""
    import great_expectations.expectations as gxe

    schema = SCHEMAS[kind]
    rows: list[Any] = [
        _check(gxe.ExpectTableColumnsToMatchOrderedList, f"columns are {', '.join(schema.names)}",
               column_list=list(schema.names)),
        _check(gxe.ExpectTableRowCountToBeBetween, f"at least {gates.min_rows} rows",
               min_value=gates.min_rows),
    ]
    rows += [_dtype_check(f.name, f.type) for f in schema]
    rows += [_not_null(column) for column in NOT_NULL[kind]]
    if kind == "evals":  # one row per held-out item and sample (evaluate.samples)
        rows.append(_check(gxe.ExpectCompoundColumnsToBeUnique, "(item_id, sample) is unique",
                           column_list=["item_id", "sample"]))
    else:
        rows.append(_check(gxe.ExpectColumnValuesToBeUnique, f"{ID_COLUMN[kind]} is unique",
                           column=ID_COLUMN[kind]))
    if context.run_id is not None:
        rows.append(_check(gxe.ExpectColumnValuesToBeInSet, f"run_id is {context.run_id}",
                           column="run_id", value_set=[context.run_id]))
    if context.round is not None:
        rows.append(_check(gxe.ExpectColumnValuesToBeInSet, f"round is {context.round}",
                           column="round", value_set=[context.round]))
    return rows


# ---- one function per kind ------------------------------------------------------------------


def proposal_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Prompt and text lengths, known drop reasons, and enough distinct texts."""
    import great_expectations.expectations as gxe

    return [
        _lengths("prompt", 1, gates.max_prompt_chars),
        _lengths("text", 0, gates.max_completion_chars),
        _check(gxe.ExpectColumnValuesToBeInSet,
               "drop_reason is invalid, duplicate, near_duplicate, heldout, benchmark, an "
               "execution failure (timeout, memory, forbidden, crash, nondeterministic, "
               "output_limit) or null",
               column="drop_reason",
               value_set=["invalid", "duplicate", "near_duplicate", "heldout", "benchmark",
                          *EXECUTION_REASONS]),
        _check(gxe.ExpectColumnProportionOfUniqueValuesToBeBetween,
               f"distinct texts / proposals >= {gates.min_distinct_proposal_share}",
               column="text", min_value=gates.min_distinct_proposal_share),
    ], []


def problem_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Text length, level, enough distinct texts; drift from the previous round when known."""
    import great_expectations.expectations as gxe

    rows = [
        _lengths("text", 1, gates.max_problem_chars),
        _between("level", 0, None),
        _check(gxe.ExpectColumnProportionOfUniqueValuesToBeBetween,
               f"distinct texts / problems >= {gates.min_distinct_problem_share}",
               column="text", min_value=gates.min_distinct_problem_share),
    ]
    previous = context.previous_problems
    if previous is None or previous.get("text_length") is None:
        return rows, []
    return rows, [_drift_suite(gates, previous["text_length"], previous["level"])]


def _drift_suite(gates: GatesConfig, length: float, level: float) -> FrameSuite:
    """Mean text length and mean level near the previous round's (`length`, `level`)."""
    import great_expectations.expectations as gxe

    drift = gates.max_length_drift
    low, high = length * (1 - drift), length * (1 + drift)
    return FrameSuite("lengths", [
        _check(gxe.ExpectColumnMeanToBeBetween,
               f"mean text length within {drift:.0%} of the previous round's {length:.2f}",
               column="text_length", min_value=max(low, 0.0), max_value=high),
        _check(gxe.ExpectColumnMeanToBeBetween,
               f"mean level within {gates.max_level_drift} of the previous round's {level:.2f}",
               column="level", min_value=level - gates.max_level_drift,
               max_value=level + gates.max_level_drift),
    ])


def rollout_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Prompt and completion lengths, non-negative sample index and token count."""
    return [
        _lengths("prompt", 1, gates.max_prompt_chars),
        _lengths("completion", 0, gates.max_completion_chars),
        _between("sample_index", 0, None),
        _between("completion_tokens", 0, None),
    ], []


def verdict_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Rewards in [0, 1], judged unless the method names why not (none, no_answer, ...: the
    reasons of domains/checking.py); at most `max_verifier_failure_share` verifier failures; a
    sandbox outcome (domains/sandbox) or null; per problem from round 1 on, except for hinted
    answers (`SuiteContext.hinted`)."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    unjudged = list(UNJUDGED_REASONS)
    failures = list(VERIFIER_FAILURES)
    limit = gates.max_verifier_failure_share
    rows = [
        _check(gxe.ExpectColumnValuesToNotBeInSet,
               f"at most {limit:g} of verdicts are verifier failures ({', '.join(failures)})",
               column="method", value_set=failures, mostly=1.0 - limit),
        _between("reward", 0.0, 1.0),
        _not_null("reward", f" where method is not one of {', '.join(unjudged)}",
                  row_condition=Column("method").is_not_in(unjudged)),
        _check(gxe.ExpectColumnValuesToBeInSet,
               f"outcome is ok, {', '.join(EXECUTION_REASONS)} or null",
               column="outcome", value_set=["ok", *EXECUTION_REASONS]),
    ]
    per_problem = _later_round(context) and not context.hinted
    return rows, ([_per_problem_suite(gates, context)] if per_problem else [])


def _per_problem_suite(gates: GatesConfig, context: SuiteContext) -> FrameSuite:
    """Mean pass rate strictly inside the band; answer spread when problems have 2+ samples."""
    import great_expectations.expectations as gxe

    per_problem = [_mean_inside("pass_rate", gates.min_mean_pass_rate, gates.max_mean_pass_rate,
                                "mean pass rate")]
    if (context.samples_per_problem or 0) >= 2:  # one sample per problem: no spread
        per_problem.append(_check(
            gxe.ExpectColumnMeanToBeBetween,
            f"answer spread (distinct answers - 1) / (samples - 1) >= {gates.min_answer_spread}",
            column="answer_spread", min_value=gates.min_answer_spread))
    return FrameSuite("per_problem", per_problem)


def curriculum_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Pass rate and reward spread in range, passed <= judged <= samples, kept fraction; mean
    pass rate strictly inside the band from round 1 on."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    rows = [
        _between("pass_rate", 0.0, 1.0),
        _between("reward_std", 0.0, 0.5),
        _between("reward_mad", 0.0, 0.5),
        _not_null("pass_rate", " where judged > 0", row_condition=Column("judged") > 0),
        _check(gxe.ExpectColumnPairValuesAToBeGreaterThanB, "judged <= samples",
               column_A="samples", column_B="judged", or_equal=True),
        _between("passed", 0, None),
        _check(gxe.ExpectColumnPairValuesAToBeGreaterThanB, "passed <= judged",
               column_A="judged", column_B="passed", or_equal=True),
        _check(gxe.ExpectColumnMeanToBeBetween,
               f"kept fraction within [{gates.min_kept_fraction}, {gates.max_kept_fraction}]",
               column="kept", min_value=gates.min_kept_fraction,
               max_value=gates.max_kept_fraction),
    ]
    if _later_round(context):
        rows.append(_mean_inside("pass_rate", gates.min_mean_pass_rate, gates.max_mean_pass_rate,
                                 "mean pass rate"))
    return rows, []


def train_row_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Prompt and completion lengths, a known role, weights in [0, 1]."""
    import great_expectations.expectations as gxe

    return [
        _lengths("prompt", 1, gates.max_prompt_chars),
        _lengths("completion", 1, gates.max_completion_chars),
        _check(gxe.ExpectColumnValuesToBeInSet, "role is solver or proposer",
               column="role", value_set=["solver", "proposer"]),
        _between("weight", 0.0, 1.0),
    ], []


def eval_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """Prompt and completion lengths."""
    return [
        _lengths("prompt", 1, gates.max_prompt_chars),
        _lengths("completion", 0, gates.max_completion_chars),
    ], []


def judgement_checks(gates: GatesConfig, context: SuiteContext) -> KindChecks:
    """A prompt (a question and an answer: at most a prompt's and a completion's characters),
    rewards in [0, 1], given unless the reason says why not (judge_unparseable)."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    return [
        _lengths("prompt", 1, gates.max_prompt_chars + gates.max_completion_chars),
        _between("reward", 0.0, 1.0),
        _not_null("reward", " where there is no reason", row_condition=Column("reason").is_null()),
        _check(gxe.ExpectColumnValuesToBeInSet, "reason is judge_unparseable or null",
               column="reason", value_set=["judge_unparseable"]),
    ], []


KIND_CHECKS = {
    "proposals": proposal_checks, "problems": problem_checks, "rollouts": rollout_checks,
    "verdicts": verdict_checks, "curriculum": curriculum_checks, "train_rows": train_row_checks,
    "evals": eval_checks, "judgements": judgement_checks,
}
