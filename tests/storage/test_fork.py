"""storage/fork.py: a new run that starts with another run's finished warm-up computes the rest
as it would have alone, and a fork that cannot be made writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from configs import load_config
from flows.run import RunSpec, flywheel_flow
from storage.catalog import Catalog
from storage.datasets import read_table
from storage.fingerprint import file_checksum
from storage.fork import ForkError, fork_stages
from storage.paths import run_folder
from tasks.fingerprints import stage_fingerprints
from validators.gate import validate_stored

SMALL = {"rounds": 1, "train.warmup.max_steps": 6, "train.max_steps": 3,
         "domain.seed_problems": 60, "synthesize.proposals": 16, "domain.heldout_per_level": 2}
# a run that differs from the source from round 1 on (bench/learning.py's generator arms)
UNIFORM = {**SMALL, "synthesize.source": "generator"}
# one whose warm-up curates otherwise: it shares the stages before its curate only
NO_PROPOSER_ROWS = {**UNIFORM, "curate.proposer_rows": False}


@pytest.fixture(scope="module")
def source_root(tmp_path_factory, prefect_server) -> Path:
    """A data root holding the finished run `source` of `SMALL` (seconds); copy it to change it."""
    root = tmp_path_factory.mktemp("fork-source")
    flywheel_flow(RunSpec(data_root=str(root), run_id="source", config=load_config(None, SMALL)))
    return root


def copied(source_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(source_root, root, symlinks=True)
    return root


def stage_rows(catalog: Catalog, run_id: str) -> list[tuple]:
    return [tuple(row.values()) for row in catalog.query(
        "SELECT round, stage, fingerprint, status, started_at FROM stages WHERE run_id = ?"
        " ORDER BY round, started_at", [run_id])]


def candidate_checksum(catalog: Catalog, run_id: str, round_index: int) -> str:
    return catalog.query(
        "SELECT checksum FROM datasets WHERE run_id = ? AND round = ? AND kind = 'checkpoint'"
        " AND stage = 'train'", [run_id, round_index])[0]["checksum"]


def test_a_forked_run_reuses_the_shared_warmup_and_ends_as_a_run_of_its_own(source_root,
                                                                             tmp_path):
    root = copied(source_root, tmp_path)
    uniform = load_config(None, UNIFORM)
    warmup = set(stage_fingerprints(uniform, rounds=0).values())
    shared = fork_stages(root, source="source", target="forked", fingerprints=warmup)

    catalog = Catalog(root)
    source_rows = [row for row in stage_rows(catalog, "source") if row[0] == 0]
    assert {fingerprint for *_, fingerprint in shared} == warmup  # every warm-up stage alike
    assert stage_rows(catalog, "forked") == source_rows  # the records as the source made them
    for kind in ("problems", "rollouts", "train_rows"):
        assert catalog.query(f"SELECT DISTINCT run_id FROM {kind} WHERE round = 0"
                             " AND run_id = 'forked'") == [{"run_id": "forked"}]

    flywheel_flow(RunSpec(data_root=str(root), run_id="forked", config=uniform))
    rows = stage_rows(catalog, "forked")
    assert [row for row in rows if row[0] == 0] == source_rows  # round 0 reused, not recomputed
    assert {row[1] for row in rows if row[0] == 1} >= {"synthesize", "train", "promote"}
    assert catalog.query("SELECT status FROM runs WHERE run_id = 'forked'") == [
        {"status": "completed"}]
    assert not [result for result in validate_stored(catalog, "forked", uniform.gates)
                if not result.success]  # its shared data passes its own gates

    # the same config run alone trains the same round-1 model from its own warm-up
    flywheel_flow(RunSpec(data_root=str(root), run_id="alone", config=uniform))
    assert candidate_checksum(catalog, "alone", 1) == candidate_checksum(catalog, "forked", 1)

    with pytest.raises(ForkError, match="'forked' already exists"):
        fork_stages(root, source="source", target="forked", fingerprints=warmup)

    other = load_config(None, NO_PROPOSER_ROWS)
    wanted = stage_fingerprints(other, rounds=0)
    shared = fork_stages(root, source="source", target="partly", fingerprints=wanted.values())
    assert {stage for _, stage, _ in shared} == {"base", "baseline", "synthesize", "rollout",
                                                  "verify"}
    flywheel_flow(RunSpec(data_root=str(root), run_id="partly", config=other))
    rows = [row for row in stage_rows(catalog, "partly") if row[0] == 0]
    assert sorted(fingerprint for _, _, fingerprint, *_ in rows) == sorted(wanted.values())
    assert [row for row in rows if row[1] == "verify"] == [
        row for row in source_rows if row[1] == "verify"]


def test_a_changed_source_file_is_refused_and_leaves_no_trace(source_root, tmp_path):
    root = copied(source_root, tmp_path)
    catalog = Catalog(root)
    path = catalog.query("SELECT path FROM datasets WHERE run_id = 'source' AND round = 0"
                         " AND kind = 'rollouts'")[0]["path"]
    rollouts = root / path
    table = read_table(rollouts)
    pq.write_table(table.slice(1), rollouts)
    assert file_checksum(rollouts) != catalog.query(
        "SELECT checksum FROM datasets WHERE path = ?", [path])[0]["checksum"]
    fingerprints = {row["fingerprint"] for row in catalog.query(
        "SELECT fingerprint FROM stages WHERE run_id = 'source' AND round = 0")}
    with pytest.raises(ForkError, match="rollouts-.*changed since it was recorded"):
        fork_stages(root, source="source", target="copy", fingerprints=fingerprints)
    assert not run_folder(root, "copy").exists()
    assert not catalog.has_rows("copy")
