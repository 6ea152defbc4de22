"""Data root formats: a data root written before the current format (format 1: a catalog with runs
but no `flywheel_format` marker) is refused by every command in one line naming the fix, and
left byte-identical; a fresh data root is marked with the current format and reopens."""

import hashlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from storage.catalog import FORMAT_VERSION, STORAGE_CONFIG, Catalog, DataRootFormatError
from storage.preflight import DataRootUnusable, check_catalog
from storage.recovery import guarded_run

# The catalog DDL as Flywheel wrote it before data root formats were recorded (no marker).
FORMAT_1_SCHEMA = """
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY, config_json VARCHAR, config_hash VARCHAR,
    created_at DOUBLE, updated_at DOUBLE, status VARCHAR);
CREATE TABLE stages (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, status VARCHAR,
    started_at DOUBLE, finished_at DOUBLE, seconds DOUBLE, rows BIGINT, error VARCHAR,
    inputs_json VARCHAR, outputs INTEGER);
CREATE TABLE datasets (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    path VARCHAR, rows BIGINT, checksum VARCHAR);
CREATE TABLE gates (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    success BOOLEAN, result_json VARCHAR, checked_at DOUBLE);
CREATE TABLE metrics (
    run_id VARCHAR, round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE);
CREATE TABLE rounds (
    run_id VARCHAR, round INTEGER, incumbent VARCHAR, candidate VARCHAR,
    incumbent_accuracy DOUBLE, candidate_accuracy DOUBLE, promoted BOOLEAN, decided_at DOUBLE,
    reason VARCHAR);
"""
FIX = "start with a new --data-root, or rerun with an earlier Flywheel to read it"


def _old_root(root: Path, *, with_run: bool = True) -> Path:
    """A data root as the code before data root formats wrote it: one run with a completed
    stage, its file, and the leftovers of an interrupted stage (which a sweep would delete)."""
    folder = root / "runs" / "r1" / "round-000"
    folder.mkdir(parents=True)
    (folder / "problems-0123456789ab.parquet").write_bytes(b"PAR1 not really PAR1")
    (folder / "rollouts-ba9876543210.parquet").write_bytes(b"no catalog row: swept if read")
    (folder / ".verdicts-aaaaaaaaaaaa.parquet.tmp-999999").write_bytes(b"half written")
    with duckdb.connect(str(root / "catalog.duckdb"), config=STORAGE_CONFIG) as con:
        con.execute(FORMAT_1_SCHEMA)
        if with_run:
            con.execute("INSERT INTO runs VALUES ('r1', '{\"rounds\": 1}', 'h', 1.0, 2.0,"
                        " 'failed')")
            con.execute("INSERT INTO stages VALUES ('r1', 0, 'seed', '0123456789ab' || "
                        "repeat('0', 52), 'completed', 1.0, 2.0, 1.0, 3, NULL, '{}', 1)")
            con.execute("INSERT INTO datasets VALUES ('r1', 0, 'seed', '0123456789ab' || "
                        "repeat('0', 52), 'problems', "
                        "'runs/r1/round-000/problems-0123456789ab.parquet', 3, 'x')")
    return root


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root` (folders too) -> the sha256 of its bytes ('dir' for a folder)."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


def _flywheel(*args, cwd):
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("command", [
    ["run", "--run-id", "r2"], ["run", "--run-id", "r1"], ["resume", "r1"], ["status", "r1"],
    ["status", "r1", "--json"], ["runs"], ["audit", "r1", "funnel"], ["validate", "r1"],
    ["report", "r1"], ["checkpoint", "r1"], ["config", "show", "r1"], ["schedule", "serve"],
    ["schedule", "deploy"],
], ids=lambda c: "-".join(c))
def test_every_command_refuses_a_format_1_root_in_one_line(tmp_path, command):
    root = _old_root(tmp_path / "old")
    before = _tree(root)
    result = _flywheel(*command, "--data-root", str(root), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: data root ")
    assert str(root.resolve()) in lines[0]
    assert "format 1, written by an earlier Flywheel" in lines[0]
    assert f"only format {FORMAT_VERSION}" in lines[0]
    assert FIX in lines[0]
    assert result.stdout == ""
    assert _tree(root) == before  # no lock, no log, no swept leftover, no marker, no run row


def test_in_process_openings_refuse_and_write_nothing(tmp_path):
    root = _old_root(tmp_path / "old")
    before = _tree(root)
    catalog = Catalog(root)
    with pytest.raises(DataRootFormatError, match="format 1") as refused:
        with catalog.connect():  # writable: no schema, no migration, no marker
            pass
    assert isinstance(refused.value, DataRootUnusable)  # what the CLI prints in one line
    with pytest.raises(DataRootFormatError):
        catalog.query("SELECT * FROM runs")
    with pytest.raises(DataRootFormatError):
        check_catalog(root)
    with pytest.raises(DataRootFormatError):
        with guarded_run(root, "r1"):  # no lock file, no sweep of the "interrupted" outputs
            pytest.fail("guarded_run ran its body on a refused data root")
    assert _tree(root) == before


def test_a_newer_format_is_refused_too(tmp_path):
    root = tmp_path / "new"
    with Catalog(root).connect() as con:
        con.execute("UPDATE flywheel_format SET version = ?", [FORMAT_VERSION + 1])
    before = _tree(root)
    result = _flywheel("runs", "--data-root", str(root), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"format {FORMAT_VERSION + 1}, written by a newer Flywheel" in lines[0]
    assert "start with a new --data-root, or rerun with a newer Flywheel" in lines[0]
    assert _tree(root) == before


def test_a_fresh_root_gets_the_marker_and_reopens(tmp_path):
    root = tmp_path / "fresh"
    catalog = Catalog(root)
    with catalog.connect() as con:
        con.execute("INSERT INTO runs VALUES ('r1', '{}', 'h', 1.0, 1.0, 'running')")
    assert Catalog(root).query("SELECT version FROM flywheel_format") == [
        {"version": FORMAT_VERSION}]
    with Catalog(root).connect() as con:  # reopening writes no second row
        assert con.execute("SELECT count(*) FROM flywheel_format").fetchone()[0] == 1
    check_catalog(root)
    assert Catalog(root).run_status("r1") == "running"
    result = _flywheel("runs", "--data-root", str(root), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "r1" in result.stdout


def test_an_old_catalog_without_runs_is_marked_not_refused(tmp_path):
    root = _old_root(tmp_path / "empty-old", with_run=False)
    check_catalog(root)  # nothing recorded yet: not refused
    catalog = Catalog(root)
    assert catalog.run_status("r1") is None
    with catalog.connect():
        pass
    assert catalog.query("SELECT version FROM flywheel_format") == [{"version": FORMAT_VERSION}]
