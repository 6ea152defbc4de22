"""Audit queries over the catalog. Fast to import: DuckDB and pyarrow only, no torch, Prefect or
GX.

    flywheel audit RUN_ID funnel | drops | lineage ID | drift | labels | samples VIEW --where ..
    flywheel audit RUN_ID --sql "SELECT ..."

`open_run` takes a snapshot: it opens `catalog.duckdb` read-only for the few milliseconds it
takes to copy the run's rows of the catalog tables (runs, stages, datasets, gates, metrics,
rounds) into an in-memory DuckDB database, closes it, and defines one view per dataset kind
(`proposals`, `problems`, `rollouts`, `verdicts`, `curriculum`, `train_rows`, `evals`) over
the run's Parquet files. Queries then run without holding the catalog's lock, so a run that is
writing is never blocked by an audit, however long the query.

The snapshot is bounded and sealed: DuckDB uses at most `MEMORY_LIMIT` and spills the rest (up
to `SPILL_LIMIT`) into a folder of the data root that it creates only when it spills and removes
when the connection closes; once the views exist, it can read the run's recorded Parquet files
and nothing else, and its settings are locked (`_seal`).

The views hold the *current* outputs of the run: for every (round, stage) the latest completed
execution. A stage recomputed after a config change leaves its older files on disk (and in the
views inside `catalog.duckdb`, which cover every completed file), but not in the audit views.

A query returns a `Result` (columns, rows, notes); `render` prints it as an aligned text
table, JSON (a list of row objects) or CSV.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from storage.catalog import Catalog, check_format, create_parquet_view, retry_while_locked
from storage.datasets import KINDS, SCHEMAS

TABLES = ("runs", "stages", "datasets", "gates", "metrics", "rounds")
FORMATS = ("table", "json", "csv")
# What one audit may use: a query over 10 M rollouts stays within this memory, spilling sorts,
# joins and aggregates that need more to disk (the spill folder is the query's own data only)
MEMORY_LIMIT = "1GB"
SPILL_LIMIT = "10GB"


class AuditError(ValueError):
    """A query the user asked for cannot be answered; the message is one line with the fix."""


@dataclass
class Result:
    """A query's answer: rows (dicts with `columns` as keys) and notes printed above them.

    Parameters
    ----------
    title
        The first line of the table rendering.
    columns
        The columns, in display order.
    rows
        One dict per row; a missing key renders as "-".
    notes
        One-line explanations shown under the title.
    cut
        How many more rows the query had than `--limit` let through (not in `rows`).
    """

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    cut: int = 0



# ---- the snapshot ---------------------------------------------------------------------------


def open_run(data_root: Path | str, run_id: str, *,
             memory_limit: str = MEMORY_LIMIT) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's catalog rows and views over its files.

    The catalog file is attached read-only only while its rows are copied (waiting while a
    writer holds it, see `retry_while_locked`); the views cover the run's current files
    (module docstring). A table the catalog lacks is created empty, and a dataset kind
    without a file becomes an empty table with its documented columns. The connection is
    bounded and sealed before it is returned (module docstring, `_seal`).

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run to snapshot.
    memory_limit
        The most memory DuckDB may use before it spills (`MEMORY_LIMIT`; DuckDB's units).

    Returns
    -------
    The connection; the caller closes it (which also removes the spill folder).

    Raises
    ------
    AuditError
        There is no catalog, or it has no such run (the message lists up to five recent
        runs).
    DataRootFormatError
        The catalog is in another data root format (written by an earlier Flywheel).
    """
    catalog = Catalog(data_root)
    if not catalog.path.exists():
        raise AuditError(f"no catalog at {catalog.path} (check --data-root)")
    spill = catalog.data_root / f".audit-spill-{os.getpid()}-{secrets.token_hex(4)}"
    con = duckdb.connect(":memory:", config={
        "memory_limit": memory_limit, "max_temp_directory_size": SPILL_LIMIT,
        "temp_directory": str(spill)})  # not DuckDB's default: `.tmp` of the working directory
    con.execute("SET enable_progress_bar = false")  # long queries must not draw on the output
    path = str(catalog.path).replace("'", "''")
    retry_while_locked(lambda: con.execute(f"ATTACH '{path}' AS catalog_file (READ_ONLY)"))
    try:
        check_format(con, catalog.data_root, "catalog_file")
    except ValueError:  # DataRootFormatError: written by another Flywheel
        con.close()
        raise
    try:
        present = {row[0] for row in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'catalog_file'"
        ).fetchall()}
        for table in TABLES:
            if table in present:
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM catalog_file.{table}"
                            " WHERE run_id = ?", [run_id])
        known = [r[0] for r in con.execute(
            "SELECT run_id FROM catalog_file.runs ORDER BY created_at DESC LIMIT 5").fetchall()] \
            if "runs" in present else []
    finally:
        con.execute("DETACH catalog_file")
    if "runs" not in present or not con.execute("SELECT count(*) FROM runs").fetchone()[0]:
        con.close()
        hint = f"known runs: {', '.join(known)}" if known else "the catalog has no runs yet"
        raise AuditError(f"unknown run id {run_id!r} in {catalog.path} ({hint})")
    for table in TABLES:  # a catalog without one of the tables gets an empty one here
        if table not in present:
            con.execute(f"CREATE TABLE {table} AS SELECT NULL::VARCHAR AS run_id WHERE false")
    for (recorded,) in con.execute("SELECT DISTINCT path FROM datasets").fetchall():
        if (path := catalog.resolve(recorded)) != recorded:  # recorded relative to the root
            con.execute("UPDATE datasets SET path = ? WHERE path = ?", [path, recorded])
    _create_views(con)
    _seal(con)
    return con


def _seal(con: duckdb.DuckDBPyConnection) -> None:
    """Lock the snapshot down: from here on it reads the run's recorded Parquet files (what
    the views and lineage read) and no other file, and writes none.

    External access is switched off only now, after the views are defined, with the run's
    dataset files as the one exception (`allowed_paths`: exact files, so not the run's logs or
    config, another run, the catalog, /etc/passwd or the working directory; DuckDB adds its
    own spill folder, which holds this query's data only). So no ATTACH, no COPY TO, no
    read_text or glob of anything else; no extension is installed or loaded; and no setting
    (these, the memory limit, the spill folder) can be changed back (`lock_configuration`).
    The audit's queries are also SELECT-only (`storage.audit.custom_queries.sql`)."""
    paths = con.execute("SELECT DISTINCT path FROM datasets WHERE list_contains(?, kind)"
                        " ORDER BY path", [list(KINDS)]).fetchall()
    quoted = ", ".join("'" + p.replace("'", "''") + "'" for (p,) in paths)
    for statement in (f"SET allowed_paths = [{quoted}]",
                      "SET autoinstall_known_extensions = false",
                      "SET autoload_known_extensions = false",
                      "SET enable_external_access = false",
                      "SET lock_configuration = true"):
        con.execute(statement)


def current_stages(con: duckdb.DuckDBPyConnection) -> list[tuple[int, str, str]]:
    """(round, stage, fingerprint) of the latest completed execution of every (round, stage).

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    One tuple per (round, stage) with a completed execution, ordered by round, then stage.
    """
    return con.execute(
        "SELECT round, stage, arg_max(fingerprint, finished_at) FROM stages"
        " WHERE status = 'completed' GROUP BY round, stage ORDER BY round, stage"
    ).fetchall()


def _create_views(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE TABLE current_files AS SELECT d.round, d.stage, d.kind, d.fingerprint, d.path,"
        " d.rows FROM datasets d JOIN (SELECT round, stage, arg_max(fingerprint, finished_at) AS"
        " fingerprint FROM stages WHERE status = 'completed' GROUP BY round, stage) s"
        " USING (round, stage, fingerprint) ORDER BY d.round, d.stage"
    )
    files = con.execute("SELECT kind, path FROM current_files ORDER BY round, stage").fetchall()
    for kind in KINDS:
        paths = [p for k, p in files if k == kind and Path(p).exists()]
        if paths:
            create_parquet_view(con, kind, paths)  # a file lacking a column reads it as null
        else:  # no file of this kind yet: an empty table with the documented columns
            columns = ", ".join(f"{f.name} {_SQL_TYPES[str(f.type)]}" for f in SCHEMAS[kind])
            con.execute(f"CREATE TABLE {kind} ({columns})")


# Parquet column types of SCHEMAS -> DuckDB types (registering an Arrow table would import pandas)
_SQL_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN"}


def fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None
) -> list[dict[str, Any]]:
    """Run one statement and fetch its rows as dicts.

    Parameters
    ----------
    con
        The connection (usually a snapshot from `open_run`).
    sql
        The statement, with `?` placeholders; it must return rows.
    params
        Values for the placeholders.

    Returns
    -------
    One dict per row, keyed by column name.
    """
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def run_config(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The run's recorded config.

    Parameters
    ----------
    con
        A snapshot from `open_run` (its `runs` table holds the one run).

    Returns
    -------
    The config parsed from `runs.config_json`; {} when it is missing or empty.
    """
    row = con.execute("SELECT config_json FROM runs").fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def run_status(con: duckdb.DuckDBPyConnection) -> str | None:
    """The run's recorded status.

    Parameters
    ----------
    con
        A snapshot from `open_run` (its `runs` table holds the one run).

    Returns
    -------
    "running", "completed", "failed" or "gate_failed", as `runs.status` holds it.
    """
    return fetch(con, "SELECT status FROM runs")[0]["status"]


# ---- output ---------------------------------------------------------------------------------


def format_cell(value: Any) -> str:
    """One value as table text.

    Parameters
    ----------
    value
        A cell of a `Result` row.

    Returns
    -------
    "-" for None; "yes"/"no" for a bool; a float with 3 decimals when below 1 or not whole,
    else as an integer ("nan" for NaN); a list or tuple as its formatted items joined by
    "; "; anything else as `str(value)`.
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3f}" if value < 1 or not value.is_integer() else str(int(value))
    if isinstance(value, list | tuple):
        return "; ".join(format_cell(v) for v in value)
    return str(value)


def clip(text: str, width: int) -> str:
    """Text on one line, cut to `width` characters.

    Parameters
    ----------
    text
        The text; newlines become a literal `\\n`.
    width
        The most characters returned.

    Returns
    -------
    The text, or its first `width - 1` characters and "…" when it is longer.
    """
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def render(result: Result, fmt: str = "table", *, max_width: int = 60) -> str:
    """The result as text: an aligned table (with title and notes), JSON rows, or CSV.

    Parameters
    ----------
    result
        What to render.
    fmt
        "table", "json" (a list of row objects) or "csv" (list cells joined by "; ").
    max_width
        In a table, the most characters of a cell (see `clip`); numeric columns are right
        aligned.

    Returns
    -------
    The text, without a trailing newline.

    Raises
    ------
    AuditError
        `fmt` is not one of `FORMATS`.
    """
    if fmt == "json":  # the commands' one JSON shape: ISO-8601 times, no NaN
        from storage.json_output import to_json

        return to_json(result.rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=result.columns, lineterminator="\n")
        writer.writeheader()
        for row in result.rows:
            writer.writerow({c: csv_cell(v) for c, v in row.items()})
        return out.getvalue().rstrip("\n")
    if fmt != "table":
        raise AuditError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    cells = [[clip(format_cell(row.get(c)), max_width) for c in result.columns]
             for row in result.rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    numeric = [all(_is_number(row.get(c)) for row in result.rows) for c in result.columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w)
                         for v, w, n in zip(values, widths, numeric, strict=True)).rstrip()

    lines = [result.title, *(f"  {note}" for note in result.notes), line(result.columns)]
    lines += [line(r) for r in cells] or ["(no rows)"]
    return "\n".join(lines)


def csv_cell(value: Any) -> Any:
    """One value as a CSV cell: a list's items joined by "; ", anything else as it is."""
    return "; ".join(map(str, value)) if isinstance(value, list) else value


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def result_from_sql(con: duckdb.DuckDBPyConnection, title: str, sql: str,
                    params: list[Any] | None = None) -> Result:
    """Run one statement and wrap its rows in a `Result` titled `title`.

    Parameters
    ----------
    con
        The connection (usually a snapshot from `open_run`).
    title
        The result's title.
    sql
        The statement, with `?` placeholders.
    params
        Values for the placeholders.

    Returns
    -------
    The rows with the statement's columns; no columns and no rows for a statement that
    returns none (SET, CREATE ...).

    Raises
    ------
    duckdb.Error
        The statement fails (callers turn it into an `AuditError` with a hint).
    """
    cur = con.execute(sql, params or [])
    if cur.description is None:  # a statement without rows (SET, CREATE ...)
        return Result(title, [], [])
    columns = [d[0] for d in cur.description]
    rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    return Result(title, columns, rows)


def result_from_relation(title: str, relation: duckdb.DuckDBPyRelation) -> Result:
    """The rows of a DuckDB relation as a `Result` titled `title`.

    Parameters
    ----------
    title
        The result's title.
    relation
        A relation built with DuckDB's relational API (`con.table(...).filter(...)`).

    Returns
    -------
    Its rows with its columns.
    """
    columns = list(relation.columns)
    rows = [dict(zip(columns, row, strict=True)) for row in relation.fetchall()]
    return Result(title, columns, rows)
