"""Gates over frames longer than Great Expectations' sample: the whole-frame checks give the
verdicts GX gives on every row, and catch a bad row far past the sample in bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from configs import GatesConfig
from storage.datasets import SCHEMAS, write_atomic
from tests.validators.test_gate import FAULTS, RUN, make_round
from validators.gate import run_gate
from validators.summary import result_lines

ROOT = Path(__file__).resolve().parents[2]
SMALL_SAMPLE = 7  # every fixture frame is longer: each check goes through the whole-frame path


@pytest.fixture(scope="module")
def clean():
    return make_round(1, seed=1)


@pytest.fixture(scope="module")
def previous_problems(tmp_path_factory):
    rows = [dict(r, round=0) for r in make_round(0, seed=2)["problems"]]
    return write_atomic("problems", rows, tmp_path_factory.mktemp("prev") / "problems.parquet").path


def _both(tmp_path, kind, rows, previous=None):
    """The gate with GX on every row, and with GX on a 7-row sample plus whole-frame checks."""
    path = write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
    run = {"run_id": RUN, "round_index": 1, "previous_path": previous}
    return (run_gate(path, kind, GatesConfig(), **run),
            run_gate(path, kind, GatesConfig(), sample_rows=SMALL_SAMPLE, **run))


def _verdicts(result):
    return sorted((f.expectation, f.column, f.frame, f.check) for f in result.failures)


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_clean_outputs_pass_with_a_sample_too(tmp_path, clean, previous_problems, kind):
    full, sampled = _both(tmp_path, kind, clean[kind], previous_problems)
    assert full.success and full.sample_rows is None and "whole_frame" not in full.gx
    assert sampled.success, [(f.name, f.observed, f.error) for f in sampled.failures]
    assert sampled.sample_rows == SMALL_SAMPLE and sampled.evaluated == full.evaluated
    whole = sampled.gx["whole_frame"]["rows"]
    assert whole["sample_rows"] == SMALL_SAMPLE and all(c["success"] for c in whole["checks"])
    assert len(whole["checks"]) >= 8


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_fault_fails_the_same_checks_with_a_sample(tmp_path, clean, fault):
    kind, mutate, expectation, column = FAULTS[fault]
    full, sampled = _both(tmp_path, kind, mutate(clean[kind]))
    assert not sampled.success
    assert _verdicts(sampled) == _verdicts(full)
    failure = next(f for f in sampled.failures
                   if (f.expectation, f.column) == (expectation, column))
    assert failure.observed and failure.bound and not failure.error
    if kind != "train_rows":  # an empty file has no offending rows to show
        assert 1 <= len(failure.rows) <= 5
    same = next(f for f in full.failures if (f.expectation, f.column) == (expectation, column))
    assert failure.observed.split(", e.g.")[0] == same.observed.split(", e.g.")[0]
    json.dumps(sampled.to_json())  # the catalog records it as JSON


def test_a_missing_column_is_a_failure_of_each_check_that_needs_it(tmp_path, clean):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(clean["rollouts"], schema=SCHEMAS["rollouts"]).drop(["prompt"])
    pq.write_table(table, tmp_path / "rollouts.parquet")
    result = run_gate(tmp_path / "rollouts.parquet", "rollouts", GatesConfig(),
                      sample_rows=SMALL_SAMPLE)
    raised = [f for f in result.failures if f.error]
    assert "expect_table_columns_to_match_ordered_list" in {f.expectation for f in result.failures}
    assert raised and all(f.column == "prompt" and "prompt" in f.error for f in raised)


BIG_ROWS = 2_000_000
BAD_REWARD_ROW, DUPLICATE_ROW = 1_500_000, 1_900_000
LIMIT_MB = 1024

WRITE_BIG_VERDICTS = """
import numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
from storage.datasets import SCHEMAS
n, samples = {rows}, 40
rng = np.random.default_rng(0)
index = np.arange(n)
ids = pc.utf8_lpad(pa.array(index.astype(str)), 24, "0").to_numpy(zero_copy_only=False)
ids[{duplicate}] = ids[7]
reward = (rng.random(n) < 0.5).astype(float)
reward[{bad}] = 1.7
table = pa.table({{
    "rollout_id": pa.array(ids), "run_id": pa.array(["big"] * n), "round": np.ones(n, int),
    "problem_id": pc.utf8_lpad(pa.array((index // samples).astype(str)), 24, "0"),
    "answer": pa.array(rng.integers(0, 20, n).astype(str)), "reward": reward,
    "method": pa.array(["reference"] * n), "label": pa.nulls(n, pa.string()),
    "agreement": pa.nulls(n, pa.float64()), "outcome": pa.nulls(n, pa.string()),
    "verifier": pa.nulls(n, pa.string()), "score": pa.nulls(n, pa.float64())}},
    schema=SCHEMAS["verdicts"])
pq.write_table(table, {path!r}, row_group_size=100_000)
"""

GATE_BIG_VERDICTS = """
import json, time
from configs import GatesConfig
from validators.gate import run_gate
started = time.perf_counter()
result = run_gate({path!r}, "verdicts", GatesConfig(), run_id="big", round_index=1)
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
peak_mb = int(peak.split()[1]) / 1024  # this process's own high-water mark (not the parent's)
print(json.dumps({{"seconds": time.perf_counter() - started, "peak_rss_mb": peak_mb,
                  "result": result.to_json()}}))
"""


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=ROOT,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_bad_rows_far_past_the_sample_fail_the_gate_in_bounded_memory(tmp_path):
    path = str(tmp_path / "verdicts.parquet")
    _python(WRITE_BIG_VERDICTS.format(rows=BIG_ROWS, bad=BAD_REWARD_ROW, duplicate=DUPLICATE_ROW,
                                      path=path))
    report = json.loads(_python(GATE_BIG_VERDICTS.format(path=path)).strip().splitlines()[-1])
    peak_mb = report["peak_rss_mb"]  # the gate's own process: its peak resident memory
    print(f"gate over {BIG_ROWS} verdicts: {report['seconds']:.1f} s, peak RSS {peak_mb:.0f} MB")
    assert peak_mb < LIMIT_MB, f"peak RSS {peak_mb:.0f} MB"
    from validators.gate import GateResult

    result = GateResult.from_json(report["result"])
    assert result.rows == BIG_ROWS and result.sample_rows == 100_000
    failed = {f.name: f for f in result.failures}
    assert set(failed) == {"expect_column_values_to_be_between(reward)",
                           "expect_column_values_to_be_unique(rollout_id)"}
    reward = failed["expect_column_values_to_be_between(reward)"]
    assert reward.observed == f"1 of {BIG_ROWS} rows, e.g. 1.7"
    assert [r["rollout_id"] for r in reward.rows] == [f"{BAD_REWARD_ROW:024d}"]
    duplicate = failed["expect_column_values_to_be_unique(rollout_id)"]
    assert duplicate.observed == f"2 of {BIG_ROWS} rows, e.g. '{7:024d}'"
    assert result.gx["rows"]["success"] is True  # GX's sample alone would have passed
    assert "GX on the first 100000" in result_lines(result)[0]
