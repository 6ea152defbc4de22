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
    flywheel_format  one row: the data root format the catalog was written in (`version`)

Data root formats: a change that alters every stage fingerprint or a dataset's schema bumps
`FORMAT_VERSION`, so a data root written before it is refused (`check_format`, one line naming
the fix) rather than silently recomputed or mixed with new data. Format 1 is a catalog without
`flywheel_format` that records runs or stages (written before formats were recorded); format 2
came with the one verification path (every stage fingerprint changed; `problems` gained `task`
and `payload`). A new catalog, or one with no runs, stages or datasets yet, gets the current
format from `SCHEMA`; nothing else is written to a refused one.

Migrations: `SCHEMA` adds `stages.outputs` to a catalog created without it;
`ROUNDS_REASON_COLUMN` adds `rounds.reason` (run before a round is recorded); `migrate_paths`
rewrites absolute dataset paths inside run folders as relative ones.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from storage.catalog.errors import DataRootFormatError

# The data root format this Flywheel reads and writes (module docstring).
FORMAT_VERSION = 2
FORMAT_TABLE = "flywheel_format"
LEGACY_FORMAT = 1  # runs or stages recorded, no `flywheel_format` table

SCHEMA = f"""
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
CREATE TABLE IF NOT EXISTS flywheel_format (version INTEGER);
INSERT INTO flywheel_format SELECT {FORMAT_VERSION}
    WHERE NOT EXISTS (SELECT 1 FROM flywheel_format);
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
    old = con.execute(
        "SELECT DISTINCT path, run_id FROM datasets WHERE path LIKE '/%'").fetchall()
    for path, run_id in old:
        # only a path in the folder of its own run: one in a folder a run folder links to
        # (`/disk2/runs/other/round-000/...`, storage/paths.py) names no file of this data root
        if in_run_folder(Path(path)) and Path(path).parts[-3] == run_id:
            con.execute("UPDATE datasets SET path = ? WHERE path = ? AND run_id = ?",
                        [str(Path(*Path(path).parts[-4:])), path, run_id])


def catalog_format(con: duckdb.DuckDBPyConnection, database: str | None = None) -> int | None:
    """The data root format a catalog was written in, read without writing anything.

    Parameters
    ----------
    con
        A connection (read-only will do) to the catalog, or one where it is attached.
    database
        The attached catalog's name (`ATTACH ... AS name`); None for the connection's own.

    Returns
    -------
    The version its `flywheel_format` row records; `LEGACY_FORMAT` when it has no such row but
    records runs, stages or datasets; None when it records nothing yet (a fresh catalog, which
    `SCHEMA` marks with `FORMAT_VERSION`).
    """
    name = database or con.execute("SELECT current_database()").fetchone()[0]
    tables = {row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
        [name]).fetchall()}
    prefix = f'"{name}".main.'
    if FORMAT_TABLE in tables:
        version = con.execute(f"SELECT max(version) FROM {prefix}{FORMAT_TABLE}").fetchone()[0]
        if version is not None:
            return int(version)
    for table in ("runs", "stages", "datasets"):
        if table in tables and con.execute(
                f"SELECT count(*) FROM {prefix}{table}").fetchone()[0]:
            return LEGACY_FORMAT
    return None


def check_format(con: duckdb.DuckDBPyConnection, data_root: object,
                 database: str | None = None) -> None:
    """Refuse a catalog written in another data root format (see `catalog_format`).

    Parameters
    ----------
    con
        A connection to the catalog, or one where it is attached as `database`.
    data_root
        The data root, for the message.
    database
        The attached catalog's name; None for the connection's own.

    Raises
    ------
    DataRootFormatError
        Its format is neither `FORMAT_VERSION` nor unrecorded-and-empty; the message names the
        data root, both formats and the fix.
    """
    found = catalog_format(con, database)
    if found is not None and found != FORMAT_VERSION:
        raise DataRootFormatError(data_root, found, FORMAT_VERSION)
