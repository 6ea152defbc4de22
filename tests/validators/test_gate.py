"""Data-quality gates on real stage outputs, through the pure gate runner and the real `run_stage`.

The outputs are made by the stages' own pure functions (admit, rollout_rows, verdict_rows,
curriculum_rows, training_rows, eval_rows) with a seeded fake solver instead of a model, so
every case takes a fraction of a second; tests/validators/test_gated_run.py runs the model.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from configs import CurateConfig, GatesConfig, RunConfig
from configs.settings import StageSettings
from domains.arithmetic import ArithmeticDomain, evaluate
from models.backends import Completion, SamplingParams
from storage.datasets import SCHEMAS, write_atomic
from tasks.context import RunContext
from tasks.curate import curriculum_rows, training_rows
from tasks.evaluate import eval_rows
from tasks.rollout import rollout_rows
from tasks.stage import StageResult, run_stage
from tasks.synthesize import admit, seed_proposals
from tasks.verify import verdict_rows
from validators.gate import GateFailed, run_gate


class Knob(StageSettings):
    """A stage's settings in these tests: one field."""

    k: int = 0

DOMAIN = ArithmeticDomain()
RUN = "gates"
STAGE_OF = {"proposals": "synthesize", "problems": "synthesize", "rollouts": "rollout",
            "verdicts": "verify", "curriculum": "curate", "train_rows": "curate",
            "evals": "evaluate", "judgements": "verify"}


class NoisySolver:
    """A RolloutBackend that answers right with probability 0.6, else off by 1..9 (seeded)."""

    def generate(self, prompts, params, progress=None):
        rng = random.Random(params.seed)
        out = []
        for prompt in prompts:
            reference = evaluate(prompt.removeprefix("<solve>").removesuffix("="))
            out.append([Completion(str(reference if rng.random() < 0.6
                                       else reference + rng.randint(1, 9)), 2)
                        for _ in range(params.n)])
        return out

    def close(self):
        pass


class RotatingJudge:
    """A judge backend that replies PASS, FAIL and something unreadable in turn."""

    def __init__(self):
        self.replies = 0

    def generate(self, prompts, params, progress=None):
        self.replies += len(prompts)
        return [[Completion(("PASS", "FAIL", "hmm")[i % 3], 1)]
                for i in range(self.replies - len(prompts), self.replies)]

    def close(self):
        pass


def judgement_rows(rollouts: list[dict], problems: list[dict]) -> list[dict]:
    """The verify stage's judgements of `rollouts` (tasks/judgements.py) by a rotating judge."""
    import polars as pl

    from configs import load_config
    from domains.judge import ModelJudge
    from domains.judge_rows import judgement_frame

    settings = load_config(None, {"verify.compare": "judge",
                                  "verify.judge.scale": "pass_fail"}).verify.judge
    judge = ModelJudge(settings, model_path="rotating", backend=RotatingJudge())
    return judgement_frame(judge, DOMAIN, pl.DataFrame(rollouts),
                           pl.DataFrame(problems, infer_schema_length=None)).to_dicts()


def make_round(round_index: int, seed: int) -> dict[str, list[dict]]:
    """One round's outputs of every kind, made by the stages' own code."""
    pairs = seed_proposals(DOMAIN, count=300, levels=[1, 2, 3, 4, 5], seed=seed)
    pairs += [("<propose>L3:", "12+"), ("<propose>L4:", ""), pairs[0]]  # invalid, empty, duplicate
    heldout = {p.text for p in DOMAIN.heldout(5)}
    proposals, problems = admit(DOMAIN, pairs, source="proposer", seen=set(), heldout=heldout,
                                run_id=RUN, round_index=round_index)
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=seed)
    rollouts = rollout_rows(NoisySolver(), DOMAIN, problems, params=params, checkpoint="ck",
                            run_id=RUN, round_index=round_index)
    verdicts = verdict_rows(DOMAIN, rollouts, problems)
    band = CurateConfig()
    curriculum = curriculum_rows(problems, verdicts, band, warmup=False)
    train = training_rows(DOMAIN, problems, rollouts, verdicts, curriculum, band, warmup=False)
    evals = eval_rows(NoisySolver(), DOMAIN, per_level=5, max_new_tokens=8, checkpoint="ck",
                      run_id=RUN, round_index=round_index)
    return {"proposals": proposals, "problems": problems, "rollouts": rollouts,
            "verdicts": verdicts, "curriculum": curriculum, "train_rows": train, "evals": evals,
            "judgements": judgement_rows(rollouts, problems)}


@pytest.fixture(scope="module")
def clean():
    return make_round(1, seed=1)


@pytest.fixture(scope="module")
def previous_problems(tmp_path_factory, clean):
    rows = [dict(r, round=0) for r in make_round(0, seed=2)["problems"]]
    return write_atomic("problems", rows, tmp_path_factory.mktemp("prev") / "problems.parquet").path


def _gate(tmp_path, kind, rows, gates=None, previous=None):
    path = write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
    return run_gate(path, kind, gates or GatesConfig(), run_id=RUN, round_index=1,
                    previous_path=previous)


def _names(result):
    return {f.name for f in result.failures}


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_clean_outputs_pass_every_gate(tmp_path, clean, previous_problems, kind):
    result = _gate(tmp_path, kind, clean[kind], previous=previous_problems)
    assert result.success, [(f.name, f.observed, f.bound, f.error) for f in result.failures]
    assert result.evaluated >= 15
    assert result.gx["rows"]["success"] is True


def test_every_drop_reason_synthesize_writes_passes_and_an_unknown_one_fails(tmp_path, clean):
    rows = clean["proposals"]
    valid = [i for i, r in enumerate(rows) if r["level"] is not None]
    for reason in ("heldout", "benchmark", "near_duplicate", "timeout"):
        marked = [{**r, "drop_reason": reason} if i == valid[0] else r
                  for i, r in enumerate(rows)]
        assert _gate(tmp_path, "proposals", marked).success, reason
    unknown = [{**r, "drop_reason": "mystery"} if i == valid[0] else r
               for i, r in enumerate(rows)]
    assert "expect_column_values_to_be_in_set(drop_reason)" in _names(
        _gate(tmp_path, "proposals", unknown))


def test_nullable_and_non_null_integer_and_boolean_columns_both_pass(tmp_path, clean):
    """DuckDB hands int64/bool columns to pandas as numpy dtypes without nulls and as nullable
    Int64/boolean with them; both are the schema's type."""
    with_nulls = [r for r in clean["proposals"] if r["level"] is None]
    assert with_nulls, "the fixture has invalid proposals (level null)"
    assert _gate(tmp_path, "proposals", clean["proposals"]).success
    valid = [r for r in clean["proposals"] if r["level"] is not None]
    assert _gate(tmp_path, "proposals", valid).success
    floats = pa.Table.from_pylist(valid, schema=SCHEMAS["proposals"])
    floats = floats.set_column(floats.schema.get_field_index("level"), "level",
                               floats["level"].cast(pa.float64()))
    pq.write_table(floats, tmp_path / "floats.parquet")
    result = run_gate(tmp_path / "floats.parquet", "proposals", GatesConfig())
    assert {f.name for f in result.failures} == {"expect_column_values_to_be_in_type_list(level)"}


def _set(column, value, index=0):
    def mutate(rows):
        rows = [dict(r) for r in rows]
        rows[index][column] = value
        return rows
    return mutate


def _set_all(column, value):
    return lambda rows: [dict(r, **{column: value}) for r in rows]


def _duplicate_id(column):
    def mutate(rows):
        rows = [dict(r) for r in rows]
        rows[1][column] = rows[0][column]
        return rows
    return mutate


def _verifier_failures(rows):
    """Every fourth verdict unjudged because the verifier itself failed (over the 5% limit)."""
    return [dict(r, reward=None, method="verifier_error") if i % 4 == 0 else r
            for i, r in enumerate(rows)]


def _identical_proposals(rows):
    """The proposer wrote the same problem every time: admitted by the real `admit`."""
    pairs = [(r["prompt"], "12+7") for r in rows]
    return admit(DOMAIN, pairs, source="proposer", seen=set(), heldout=set(), run_id=RUN,
                 round_index=1)[0]


FAULTS = {
    # name: (kind, mutate rows, expectation that must be named, column)
    "duplicate-problem-ids": ("problems", _duplicate_id("problem_id"),
                              "expect_column_values_to_be_unique", "problem_id"),
    "duplicate-rollout-ids": ("verdicts", _duplicate_id("rollout_id"),
                              "expect_column_values_to_be_unique", "rollout_id"),
    "null-prompt": ("rollouts", _set("prompt", None, 3),
                    "expect_column_values_to_not_be_null", "prompt"),
    "reward-1.7": ("verdicts", _set("reward", 1.7, 5),
                   "expect_column_values_to_be_between", "reward"),
    "nan-pass-rates": ("curriculum", _set_all("pass_rate", math.nan),
                       "expect_column_values_to_not_be_null", "pass_rate"),
    "empty-file": ("train_rows", lambda rows: [],
                   "expect_table_row_count_to_be_between", None),
    "identical-proposals": ("proposals", _identical_proposals,
                            "expect_column_proportion_of_unique_values_to_be_between", "text"),
    "every-verdict-correct": ("verdicts", _set_all("reward", 1.0),
                              "expect_column_mean_to_be_between", "pass_rate"),
    "wrong-round": ("evals", _set("round", 7, 2), "expect_column_values_to_be_in_set", "round"),
    # two eval rows of one held-out item with the same sample index (evaluate.samples)
    "duplicate-eval-sample": ("evals", _duplicate_id("item_id"),
                              "expect_compound_columns_to_be_unique", None),
    "every-answer-identical": ("verdicts", _set_all("answer", "7"),
                               "expect_column_mean_to_be_between", "answer_spread"),
    "verifier-failing": ("verdicts", _verifier_failures,
                         "expect_column_values_to_not_be_in_set", "method"),
    "judge-reward-1.5": ("judgements", _set("reward", 1.5, 0),
                         "expect_column_values_to_be_between", "reward"),
    "judge-reward-lost": ("judgements", _set("reward", None, 0),  # PASS read as no reward
                          "expect_column_values_to_not_be_null", "reward"),
    "judge-reason-unknown": ("judgements", _set("reason", "tired", 2),
                             "expect_column_values_to_be_in_set", "reason"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_stops_the_stage_names_the_expectation_and_keeps_the_file(tmp_path, clean, fault):
    kind, mutate, expectation, column = FAULTS[fault]
    rows = mutate(clean[kind])
    ctx = RunContext(data_root=tmp_path, run_id=RUN, config=RunConfig())
    ctx.catalog.ensure_run(RUN, "{}")
    downstream = []

    def round_sequence():  # the faulted stage, then a train stage that would write a checkpoint
        run_stage(ctx, stage=STAGE_OF[kind], version=1, round_index=1, settings=Knob(), inputs={},
                  compute=lambda fp: StageResult(datasets={kind: rows}))
        downstream.append("train")

    with pytest.raises(GateFailed) as info:
        round_sequence()
    failure = next(f for r in info.value.results for f in r.failures if f.expectation == expectation
                   and f.column == column)
    assert failure.observed and failure.bound
    if kind != "train_rows":  # an empty file has no offending rows to show
        assert 1 <= len(failure.rows) <= 5
    assert not downstream and not list(tmp_path.glob("runs/*/round-*/checkpoint-*"))
    stage = ctx.catalog.query("SELECT status, error, fingerprint FROM stages WHERE run_id = ?",
                              [RUN])
    assert [s["status"] for s in stage] == ["gate_failed"] and expectation in stage[0]["error"]
    gates = ctx.catalog.query("SELECT kind, success, result_json FROM gates WHERE kind = ?", [kind])
    assert len(gates) == 1 and gates[0]["success"] is False
    recorded = json.loads(gates[0]["result_json"])
    assert expectation in {f["expectation"] for f in recorded["failures"]}
    assert recorded["gx"]["rows"]["results"], "the GX result JSON is kept"
    files = ctx.catalog.query("SELECT path FROM datasets WHERE kind = ?", [kind])
    assert files and all(Path(ctx.catalog.resolve(f["path"])).exists() for f in files)
    assert ctx.catalog.completed_datasets(RUN, stage[0]["fingerprint"]) is None  # not done


def test_dropped_column_fails_schema_and_unevaluable_expectations_are_failures(tmp_path, clean):
    table = pa.Table.from_pylist(clean["rollouts"], schema=SCHEMAS["rollouts"]).drop(["prompt"])
    path = tmp_path / "rollouts.parquet"
    pq.write_table(table, path)
    result = run_gate(path, "rollouts", GatesConfig(), run_id=RUN, round_index=1)
    assert not result.success
    assert "expect_table_columns_to_match_ordered_list" in {f.expectation for f in result.failures}
    raised = [f for f in result.failures if f.error]
    assert raised and all(f.column == "prompt" for f in raised)
    assert all("prompt" in f.error for f in raised)


def test_gx_crash_and_unreadable_file_are_failures_not_passes(tmp_path, clean, monkeypatch):
    path = tmp_path / "verdicts.parquet"
    path.write_bytes(b"not parquet")
    result = run_gate(path, "verdicts", GatesConfig())
    assert not result.success and result.failures[0].expectation == "gate_error"

    from validators import gate

    def boom(*args, **kwargs):
        raise RuntimeError("GX fell over")

    monkeypatch.setattr(gate, "validate_frame", boom)
    result = _gate(tmp_path, "verdicts", clean["verdicts"])
    assert not result.success and "GX fell over" in result.failures[0].error


def test_problem_drift_from_the_previous_round(tmp_path, clean, previous_problems):
    easy = [r for r in clean["problems"] if r["level"] == 1]
    result = _gate(tmp_path, "problems", easy, GatesConfig(max_level_drift=1.0),
                   previous=previous_problems)
    failed = {(f.name, f.frame) for f in result.failures}
    assert ("expect_column_mean_to_be_between(level)", "lengths") in failed
    assert _gate(tmp_path, "problems", easy, GatesConfig(max_level_drift=3.0, max_length_drift=5),
                 previous=previous_problems).success


def test_round_zero_skips_pass_rate_checks(tmp_path, clean):
    wrong = [dict(r, reward=0.0) for r in clean["verdicts"]]
    path = write_atomic("verdicts", [dict(r, round=0) for r in wrong], tmp_path / "v.parquet").path
    assert run_gate(path, "verdicts", GatesConfig(), run_id=RUN, round_index=0).success
    assert ("expect_column_mean_to_be_between(pass_rate)"
            in _names(_gate(tmp_path, "verdicts", wrong)))


def test_fixed_thresholds_regate_the_stored_output_without_recomputing(tmp_path, clean):
    calls = []

    def compute(fingerprint):
        calls.append(fingerprint)
        return StageResult(datasets={"curriculum": clean["curriculum"]}, metrics={"kept": 1.0})

    def stage(gates):
        ctx = RunContext(data_root=tmp_path, run_id=RUN, config=RunConfig(gates=gates))
        ctx.catalog.ensure_run(RUN, "{}")
        return ctx, run_stage(ctx, stage="curate", version=1, round_index=1, settings=Knob(k=1),
                              inputs={}, compute=compute)

    strict = GatesConfig(max_kept_fraction=0.05)
    with pytest.raises(GateFailed, match="kept"):
        stage(strict)
    with pytest.raises(GateFailed):  # still too strict: gated again, not recomputed
        stage(strict)
    ctx, out = stage(GatesConfig())
    assert len(calls) == 1 and out.skipped and out.path("curriculum").exists()
    statuses = [r["status"] for r in ctx.catalog.query(
        "SELECT status FROM stages ORDER BY finished_at")]
    assert statuses == ["gate_failed", "gate_failed", "completed"]
    assert ctx.catalog.completed_datasets(RUN, out.fingerprint) is not None
    assert ctx.catalog.query("SELECT value FROM metrics WHERE name = 'kept'")[0]["value"] == 1.0
    assert [g["success"] for g in ctx.catalog.query(
        "SELECT success FROM gates ORDER BY checked_at")] == [False, False, True]
    assert stage(GatesConfig())[1].skipped and len(calls) == 1


def test_gates_can_be_disabled(tmp_path, clean):
    ctx = RunContext(data_root=tmp_path, run_id=RUN,
                     config=RunConfig(gates=GatesConfig(enabled=False)))
    out = run_stage(ctx, stage="rollout", version=1, round_index=1, settings=Knob(), inputs={},
                    compute=lambda fp: StageResult(
                        datasets={"rollouts": _set("prompt", None)(clean["rollouts"])}))
    assert not out.skipped and not ctx.catalog.query("SELECT * FROM gates")


def test_answer_spread_is_skipped_with_one_sample_per_problem(tmp_path, clean):
    first = [r for r in clean["verdicts"] if r["rollout_id"] in {
        x["rollout_id"] for x in clean["rollouts"] if x["sample_index"] == 0}]
    result = _gate(tmp_path, "verdicts", first)
    assert result.success, [f.name for f in result.failures]
    assert "answer_spread" not in json.dumps(result.gx["per_problem"]["results"])


def test_a_pass_is_judged_once_in_basic_format_a_failure_again_in_summary(tmp_path, clean,
                                                                          monkeypatch):
    """GX's BASIC result decides; only a suite GX fails is validated again in SUMMARY, whose row
    indexes give the offending rows."""
    from validators import gx_results

    seen = []
    original = gx_results._gx_result

    def spy(df, suite, name, result_format):
        seen.append((suite.frame, result_format))
        return original(df, suite, name, result_format)

    monkeypatch.setattr(gx_results, "_gx_result", spy)
    assert _gate(tmp_path, "rollouts", clean["rollouts"]).success
    assert seen == [("rows", "BASIC")]
    seen.clear()
    broken = [dict(r, sample_index=-1) if i == 3 else r for i, r in enumerate(clean["rollouts"])]
    result = _gate(tmp_path, "rollouts", broken)
    assert seen == [("rows", "BASIC"), ("rows", "SUMMARY")]
    failure, = result.failures
    assert failure.name == "expect_column_values_to_be_between(sample_index)"
    assert failure.observed.startswith("1 of ") and failure.bound == ">= 0"
    assert [row["sample_index"] for row in failure.rows] == [-1]
    assert failure.rows[0]["rollout_id"] == broken[3]["rollout_id"]
