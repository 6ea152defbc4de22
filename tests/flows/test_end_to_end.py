"""One real flywheel run of a small config, in-process under the session's Prefect server."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from configs import load_config
from storage.catalog import Catalog
from storage.datasets import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
ROUND_STAGES = ["synthesize", "rollout", "verify", "curate", "train", "evaluate", "promote"]


@pytest.fixture(scope="module")
def small_run(small_run_root):
    """The session's finished run of small.toml (tests/conftest.py), read only."""
    return Catalog(small_run_root), load_config(ROOT / "tests" / "flows" / "small.toml")


@pytest.mark.slow
def test_catalog_has_one_completed_row_per_stage_per_round(small_run):
    catalog, config = small_run
    rows = catalog.query("SELECT round, stage, status FROM stages WHERE run_id = 'small'")
    assert all(r["status"] == "completed" for r in rows)
    seen = sorted((r["round"], r["stage"]) for r in rows)
    expected = sorted([(0, "base"), (0, "baseline")]
                      + [(n, s) for n in range(config.rounds + 1) for s in ROUND_STAGES])
    assert seen == expected
    assert (catalog.query("SELECT status FROM runs WHERE run_id = 'small'")[0]["status"]
            == "completed")


@pytest.mark.slow
def test_every_file_has_the_documented_columns_and_row_count(small_run):
    catalog, _ = small_run
    files = catalog.query("SELECT kind, path, rows FROM datasets WHERE kind != 'checkpoint'")
    assert {f["kind"] for f in files} == set(SCHEMAS) - {"judgements"}  # no model judges here
    for f in files:
        f["path"] = catalog.resolve(f["path"])
        table = pq.read_table(f["path"])
        assert table.schema.names == SCHEMAS[f["kind"]].names, f["path"]
        assert table.num_rows == f["rows"]


@pytest.mark.slow
def test_held_out_accuracy_rises_after_warmup(small_run):
    catalog, config = small_run
    accuracy = {r["round"]: r["value"] for r in catalog.query(
        "SELECT round, value FROM metrics WHERE stage = 'evaluate' AND name = 'accuracy'")}
    assert accuracy[config.rounds] > accuracy[0], accuracy


@pytest.mark.slow
def test_training_rows_lead_back_to_rollouts_problems_and_proposer_samples(small_run):
    catalog, _config = small_run
    chains = catalog.query(
        """
        SELECT t.train_row_id, r.rollout_id, p.problem_id, q.proposal_id, q.source, v.reward
        FROM train_rows t
        JOIN rollouts r ON r.rollout_id = t.rollout_id
        JOIN verdicts v ON v.rollout_id = r.rollout_id
        JOIN problems p ON p.problem_id = t.problem_id AND p.round = t.round
        JOIN proposals q ON q.proposal_id = p.proposal_id
        WHERE t.role = 'solver' AND t.round >= 1
        """
    )
    # rationalized rows (curate.solver_targets = "rationalize", the default) have no rollout:
    # their completion is the executed reference of a problem the solver never solved
    references = catalog.query(
        """
        SELECT t.train_row_id, q.source, c.pass_rate, t.completion = p.reference AS is_reference
        FROM train_rows t
        JOIN problems p ON p.problem_id = t.problem_id AND p.round = t.round
        JOIN curriculum c ON c.problem_id = t.problem_id AND c.round = t.round
        JOIN proposals q ON q.proposal_id = p.proposal_id
        WHERE t.role = 'solver' AND t.round >= 1 AND t.rollout_id IS NULL
        """
    )
    solver_rows = catalog.query("SELECT count(*) AS n FROM train_rows"
                                " WHERE role = 'solver' AND round >= 1")
    assert chains and references and len(chains) + len(references) == solver_rows[0]["n"]
    assert all(c["source"] == "proposer" and c["reward"] == 1.0 for c in chains)
    assert all(r["source"] == "proposer" and r["pass_rate"] == 0.0 and r["is_reference"]
               for r in references)
    # rationalize_ratio = 1.0: at most one per verified answer
    assert len(references) <= len(chains)
