"""The catalog's tables and their migrations: what `connect` runs on every writable connection.

Tables
    runs      one row per run id: config (JSON), its hash, created/updated time, status
    stages    one row per stage attempt: fingerprint, status (completed | failed | gate_failed),
              timings, total rows, error; a stage is *done* when a completed row exists for
              (run_id, fingerprint) and every dataset it lists exists with its checksum
    datasets  one row per file a completed stage wrote: kind, path, rows, sha256
    gates     one row per gate run on a dataset (result JSON)
    metrics   (run_id, round, stage, name, value)
    rounds    one row per decided round: incumbent, candidate, accuracies, promoted, reason (one
              line: "accuracy 0.242 >= 0.200 - 0.000", "no training rows"; candidate and its
              accuracy are null when the round had none; a `rounds` table without `reason`
              gets the column when it next records a round, and reads it as null until then)

Migrations: `SCHEMA` adds `stages.outputs` to a catalog created without it;
`ROUNDS_REASON_COLUMN` adds `rounds.reason` (run before a round is recorded); `migrate_paths`
rewrites absolute dataset paths inside run folders as relative ones.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, config_json VARCHAR, config_hash VARCHAR,
    created_at DOUBLE, updated_at DOUBLE, status VARCHAR);
CREATE TABLE IF NOT EXISTS stages (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, status VARCHAR,
    started_at DOUBLE, finished_at DOUBLE, seconds DOUBLE, rows BIGINT, error VARCHAR,
    inputs_json VARCHAR, outputs INTEGER);
ALTER TABLE stages ADD COLUMN IF NOT EXISTS outputs INTEGER;
CREATE TABLE IF NOT EXISTS datasets (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    path VARCHAR, rows BIGINT, checksum VARCHAR);
CREATE TABLE IF NOT EXISTS gates (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    success BOOLEAN, result_json VARCHAR, checked_at DOUBLE);
CREATE TABLE IF NOT EXISTS metrics (
    run_id VARCHAR, round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE);
CREATE TABLE IF NOT EXISTS rounds (
    run_id VARCHAR, round INTEGER, incumbent VARCHAR, candidate VARCHAR,
    incumbent_accuracy DOUBLE, candidate_accuracy DOUBLE, promoted BOOLEAN, decided_at DOUBLE,
    reason VARCHAR);
"""

# a rounds table created without the column gets it when it next records a round
ROUNDS_REASON_COLUMN = "ALTER TABLE rounds ADD COLUMN IF NOT EXISTS reason VARCHAR"

STAGE_COLUMNS = ("run_id, round, stage, fingerprint, status, started_at, finished_at, seconds,"
                 " rows, error, inputs_json, outputs")


def in_run_folder(path: Path) -> bool:
    """Whether `path` ends in `runs/<run_id>/round-<NNN>/<name>`."""
    parts = path.parts
    return len(parts) >= 5 and parts[-4] == "runs" and parts[-2].startswith("round-")


def migrate_paths(con: duckdb.DuckDBPyConnection) -> None:
    """Rewrite absolute paths of files inside run folders as relative ones (how catalogs
    recorded paths before they were relative; `Catalog.resolve` reads both).

    Parameters
    ----------
    con
        A writable connection to the catalog.
    """
    old = [row[0] for row in con.execute(
        "SELECT DISTINCT path FROM datasets WHERE path LIKE '/%'").fetchall()]
    for path in old:
        if in_run_folder(Path(path)):
            con.execute("UPDATE datasets SET path = ? WHERE path = ?",
                        [str(Path(*Path(path).parts[-4:])), path])
