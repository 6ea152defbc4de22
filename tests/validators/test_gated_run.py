"""Gates in real tiny runs (model, Prefect flow, CLI), under the session's Prefect server.

1. A fault injected into a real stage output (a verdict reward of 1.7) stops the round at the
   verify gate: nothing downstream runs, no checkpoint is written after it.
2. Through the CLI: a too-strict threshold stops the round at the curate gate (report, exit 1,
   no traceback); `flywheel resume RUN --config fixed.toml` re-gates the stored curriculum
   without recomputing anything and finishes the run with every other gate passed;
   `flywheel validate` re-checks the stored data.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from configs import load_config
from storage.catalog import Catalog
from validators.gate import GateFailed

TINY = """
rounds = 0
[domain]
seed_problems = 60
min_level = 2
max_level = 4
heldout_per_level = 2
[rollout]
samples_per_problem = 4
[train]
batch_size = 32
[train.warmup]
max_steps = 10
"""
STRICT = TINY + "[gates]\nmax_kept_fraction = 0.1\n"


@pytest.fixture
def quiet_env(monkeypatch):
    """The CLI sets these with setdefault; set them here so they are undone after the test."""
    for key, value in {"PREFECT_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1",
                       "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error",
                       "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}.items():
        monkeypatch.setenv(key, value)


def _checkpoints(data_root: Path, run_id: str) -> list[Path]:
    return sorted((data_root / "runs" / run_id).glob("round-*/checkpoint-*"))


def test_reward_fault_in_real_verify_output_stops_the_round(tmp_path, prefect_server, monkeypatch):
    from flows.run import RunSpec, flywheel_flow
    from tasks import verify

    real = verify.verdict_frame

    def faulty(*args, **kwargs):
        frame = real(*args, **kwargs)
        return frame.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(1.7).otherwise(
            pl.col("reward")).alias("reward"))

    monkeypatch.setattr(verify, "verdict_frame", faulty)
    config_path = tmp_path / "tiny.toml"
    config_path.write_text(TINY)
    spec = RunSpec(data_root=str(tmp_path), run_id="faulty", config=load_config(config_path))
    with pytest.raises(GateFailed) as info:
        flywheel_flow(spec)
    assert info.value.stage == "verify"
    failure = next(f for r in info.value.results for f in r.failures)
    assert failure.name == "expect_column_values_to_be_between(reward)"
    assert failure.rows[0]["reward"] == 1.7 and failure.bound == "[0, 1]"
    catalog = Catalog(tmp_path)
    stages = {(r["stage"], r["status"]) for r in catalog.query(
        "SELECT stage, status FROM stages WHERE run_id = 'faulty'")}
    assert ("verify", "gate_failed") in stages
    assert not {s for s, _ in stages} & {"curate", "train", "promote"}, stages
    base = catalog.query("SELECT path FROM datasets WHERE run_id = 'faulty' AND stage = 'base'")
    assert [str(p) for p in _checkpoints(tmp_path, "faulty")] == [catalog.resolve(base[0]["path"])]
    assert catalog.query("SELECT status FROM runs WHERE run_id = 'faulty'")[0]["status"] == "failed"


def test_cli_gate_failure_report_resume_with_fixed_config_and_validate(tmp_path, prefect_server,
                                                                       quiet_env):
    from flows.cli import app

    strict, fixed = tmp_path / "strict.toml", tmp_path / "fixed.toml"
    strict.write_text(STRICT)
    fixed.write_text(TINY)
    data = tmp_path / "data"
    runner = CliRunner()

    first = runner.invoke(app, ["run", "--config", str(strict), "--run-id", "g",
                                "--data-root", str(data)])
    output = first.output
    assert first.exit_code == 1, output
    assert "round 0 stopped: the curate stage's output failed its data gate" in output
    assert "expect_column_mean_to_be_between(kept)" in output
    assert "bound     [0.01, 0.1]" in output and "observed  0." in output
    assert output.count('"kept": true') == 5  # up to 5 offending rows: the kept ones
    assert "Traceback" not in output and "GateFailed(" not in output
    assert "flywheel resume g --config FILE" in output
    catalog = Catalog(data)
    curate = catalog.query("SELECT fingerprint, status FROM stages "
                           "WHERE run_id = 'g' AND stage = 'curate'")
    assert [c["status"] for c in curate] == ["gate_failed"]
    assert not catalog.query("SELECT * FROM stages WHERE run_id = 'g' AND stage = 'train'")
    assert len(_checkpoints(data, "g")) == 1  # the base model only
    curriculum = Path(catalog.resolve(catalog.query(
        "SELECT path FROM datasets WHERE run_id = 'g' AND kind = 'curriculum'")[0]["path"]))
    written = curriculum.stat().st_mtime_ns

    again = runner.invoke(app, ["resume", "g", "--config", str(fixed), "--data-root", str(data)])
    assert again.exit_code == 0, again.output
    rows = catalog.query("SELECT stage, fingerprint, status FROM stages WHERE run_id = 'g' "
                         "ORDER BY finished_at")
    curate_rows = [(r["fingerprint"], r["status"]) for r in rows if r["stage"] == "curate"]
    assert curate_rows == [(curate[0]["fingerprint"], "gate_failed"),
                           (curate[0]["fingerprint"], "completed")]
    for stage in ("synthesize", "rollout", "verify", "train", "evaluate", "promote"):
        assert [r["status"] for r in rows if r["stage"] == stage] == ["completed"], stage
    assert curriculum.stat().st_mtime_ns == written  # gated again, not recomputed
    assert len(_checkpoints(data, "g")) == 2
    gates = catalog.query("SELECT stage, kind, success FROM gates WHERE run_id = 'g' "
                          "ORDER BY checked_at")
    failed = [(g["stage"], g["kind"]) for g in gates if not g["success"]]
    assert failed == [("curate", "curriculum")], "only the deliberately strict threshold fails"
    assert {g["kind"] for g in gates} == {"proposals", "problems", "rollouts", "verdicts",
                                          "curriculum", "train_rows", "evals"}

    checked = runner.invoke(app, ["validate", "g", "--data-root", str(data)])
    assert checked.exit_code == 0, checked.output
    assert "8 datasets checked, 0 failed" in checked.output
    strict_check = runner.invoke(app, ["validate", "g", "--round", "0", "--stage", "curate",
                                       "--config", str(strict), "--data-root", str(data)])
    assert strict_check.exit_code == 5  # flows/exit_codes.py VALIDATE_FAILED
    assert "expect_column_mean_to_be_between(kept)" in strict_check.output
    assert "2 datasets checked, 1 failed" in strict_check.output
    unknown = runner.invoke(app, ["validate", "nope", "--data-root", str(data)])
    assert unknown.exit_code == 2 and "unknown run id 'nope'" in unknown.output
