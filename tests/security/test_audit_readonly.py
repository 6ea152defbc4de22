"""`flywheel audit` is read-only by construction: whatever SQL it is handed, the catalog, the
data and every other file stay as they were, no file but the run's datasets can be read (not the
run's other files, nor DuckDB's temp folder in the working directory), and a refused statement
is one error line."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog
from storage.datasets import dataset_path, write_atomic

RUN = "audited"


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def tiny_run(root: Path) -> Path:
    """A data root with one completed run, `RUN`, whose synthesize stage wrote three problems."""
    catalog = Catalog(root)
    catalog.ensure_run(RUN, "{}")
    rows = [{"problem_id": f"p{i}", "run_id": RUN, "round": 0, "text": f"{i}+1",
             "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}"}
            for i in range(3)]
    written = write_atomic("problems", rows, dataset_path(root, RUN, 0, "problems", "f" * 32))
    catalog.record_completed(run_id=RUN, round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[written], inputs={}, metrics={})
    catalog.set_run_status(RUN, "completed")  # else `status` reports it interrupted (exit 130)
    return root


@pytest.fixture
def data_root(tmp_path):
    return tiny_run(tmp_path / "data")


def _audit(data_root: Path, *args: str):
    return CliRunner().invoke(app, ["audit", RUN, *args, "--data-root", str(data_root)])


SECRET = "root:x:0:0:secret"  # what a file the audit must not read holds


def _hostile(data_root: Path, outside: Path) -> dict[str, list[str]]:
    catalog = str(data_root / "catalog.duckdb")
    run_file = next((data_root / "runs").rglob("*.parquet"))
    run_notes = data_root / "runs" / RUN / "notes.txt"  # in the run's folder, not a dataset
    return {
        "attach and drop": ["--sql", f"ATTACH '{catalog}' AS c; DROP TABLE c.rounds; "
                                     "DELETE FROM c.stages; SELECT 1"],
        "attach alone": ["--sql", f"ATTACH '{catalog}' AS c"],
        "delete in the snapshot": ["--sql", "DELETE FROM stages"],
        "copy outside": ["--sql", f"COPY (SELECT 1) TO '{outside / 'x.csv'}'"],
        "copy over a data file": ["--sql",
                                  f"COPY (SELECT 1 AS a) TO '{run_file}' (FORMAT parquet)"],
        "read a file outside": ["--sql", "SELECT * FROM read_csv('/etc/passwd')"],
        "read the catalog as text": ["--sql", f"SELECT * FROM read_text('{catalog}')"],
        "install": ["--sql", "INSTALL httpfs"],
        "load": ["--sql", "LOAD httpfs"],
        "settings": ["--sql", "SET enable_external_access = true"],
        "read a file in the run's folder": ["--sql", f"SELECT * FROM read_text('{run_notes}')"],
        "list the run's folder": ["--sql", f"SELECT * FROM glob('{run_notes.parent}/*')"],
        "read the working directory's .tmp": ["--sql",
                                              "SELECT * FROM read_text('.tmp/spilled.tmp')"],
        "where injection": ["samples", "problems", "--where",
                            "1=1) UNION ALL SELECT * FROM read_csv('/etc/passwd') --"],
        "where subquery outside": ["samples", "problems", "--where",
                                   "text IN (SELECT * FROM read_csv('/etc/passwd'))"],
    }


CASES = ["attach and drop", "attach alone", "delete in the snapshot", "copy outside",
         "copy over a data file", "read a file outside", "read the catalog as text", "install",
         "load", "settings", "read a file in the run's folder",
         "list the run's folder", "read the working directory's .tmp", "where injection",
         "where subquery outside"]


def test_the_case_list_covers_every_hostile_statement(data_root, tmp_path):
    assert sorted(_hostile(data_root, tmp_path)) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_hostile_sql_is_refused_and_changes_nothing(data_root, tmp_path, monkeypatch, case):
    outside = tmp_path / "outside"
    (outside / ".tmp").mkdir(parents=True)
    (outside / ".tmp" / "spilled.tmp").write_text(SECRET)  # DuckDB's default temp folder
    (data_root / "runs" / RUN / "notes.txt").write_text(SECRET)
    monkeypatch.chdir(outside)
    before, before_outside = _tree(data_root), _tree(outside)
    result = _audit(data_root, *_hostile(data_root, outside)[case])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "passwd" not in result.output.replace("/etc/passwd", "") and "root:" not in result.output
    assert _tree(data_root) == before, "the data root changed"
    assert _tree(outside) == before_outside, "a file appeared outside the data root"
    status = CliRunner().invoke(app, ["status", RUN, "--data-root", str(data_root)])
    assert status.exit_code == 0 and f"run {RUN}" in status.output


def test_read_only_audit_still_answers_selects_and_conditions(data_root):
    result = _audit(data_root, "--sql", "SELECT count(*) AS n FROM problems", "--format", "csv")
    assert result.exit_code == 0 and result.output.split() == ["n", "3"]
    result = _audit(data_root, "samples", "problems", "--where", "level = 1 AND text LIKE '1+%'",
                    "--format", "csv")
    assert result.exit_code == 0, result.output
    assert [line.split(",")[0] for line in result.output.splitlines()[1:]] == ["p1"]
    result = _audit(data_root, "--sql", "WITH t AS (SELECT * FROM problems) SELECT max(level) "
                    "AS top FROM t", "--format", "csv")
    assert result.exit_code == 0 and result.output.split() == ["top", "1"]
