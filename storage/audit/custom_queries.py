"""The user's own audit queries: rows of one view or table filtered by a SQL condition
(`samples`, `flywheel audit RUN samples VIEW --where ...`) and any one SELECT over the snapshot
(`sql`, `flywheel audit RUN --sql ...`). Both run on the in-memory snapshot of `open_run` and
refuse anything that is not a read.

    samples(con, "rollouts", where="round = 1 AND completion = ''", limit=5)
    sql(con, "SELECT role, count(*) FROM train_rows GROUP BY role")
    write_sql_csv(con, "SELECT * FROM rollouts", print, limit=10_000_000)

`--sql` rows are fetched in batches of `BATCH_ROWS` and never past the limit, so a query with
10 M rows costs neither 10 M Python rows nor their memory; the rows the limit cut are counted by
DuckDB itself (`count(*)` over the query), not fetched.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from storage.audit.snapshot import (
    TABLES,
    AuditError,
    Result,
    csv_cell,
    result_from_relation,
)
from storage.datasets import KINDS

VIEWS = (*KINDS, *TABLES)
# --limit, the most rows printed, unless given: a sample is a glance, a --sql answer a result
SAMPLES_LIMIT = 20
SQL_LIMIT = 1000
BATCH_ROWS = 1000  # rows fetched from DuckDB at a time


def samples(con: duckdb.DuckDBPyConnection, view: str | None, *, where: str | None = None,
            limit: int = SAMPLES_LIMIT) -> Result:
    """Rows of one view (or catalog table), optionally filtered by a SQL condition.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    view
        A dataset view or catalog table, one of `VIEWS`.
    where
        A SQL condition on the view's columns; None: every row.
    limit
        The most rows returned.

    Returns
    -------
    Up to `limit` rows, with a note saying how many rows match in all (and `cut` how many
    were left out).

    Raises
    ------
    AuditError
        `view` is not one of `VIEWS`, or `where` is not valid SQL for the view (the message
        lists its columns).
    """
    if view not in VIEWS:
        raise AuditError(f"samples {view or ''}: name a view or table, one of {', '.join(VIEWS)}")
    relation = con.table(view)
    try:  # parsed as one expression, so it cannot close the WHERE and append SQL of its own
        matching = relation.filter(where) if where else relation
        result = result_from_relation(f"samples of {view}", matching.limit(limit))
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        msg = (f"--where {where!r}: {first} (a condition on the columns of {view}: "
               f"{', '.join(relation.columns)})")
        raise AuditError(msg) from None
    total = matching.aggregate("count(*)").fetchall()[0][0]
    result.notes.append(f"{len(result.rows)} of {total} matching rows (--limit {limit})")
    result.cut = total - len(result.rows)
    return result


def sql(con: duckdb.DuckDBPyConnection, text: str, *, limit: int = SQL_LIMIT) -> Result:
    """One SELECT query over the views (proposals, problems, rollouts, ...) and tables (runs,
    stages, ...) of a snapshot: its first `limit` rows.

    Read-only twice over: anything but a single SELECT (ATTACH, COPY, INSTALL, SET, DELETE,
    a second statement, ...) is refused before it runs, and the snapshot itself reads no file
    but the run's datasets (`open_run`).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    text
        The SQL; it runs on the in-memory snapshot, never on the catalog file.
    limit
        The most rows returned (`--limit`).

    Returns
    -------
    Its rows, titled "sql"; when the query has more, `cut` counts them and a note says so.

    Raises
    ------
    AuditError
        The text is not one SELECT, reaches for a file, runs out of memory, or DuckDB rejects
        it: the first line of its error, with what to do instead.
    """
    with _sql_errors(con):
        columns = _select(con, text)
        rows = [dict(zip(columns, row, strict=True))
                for batch in _batches(con, limit) for row in batch]
        cut = _cut(con, text, len(rows), limit)
    notes = [f"{len(rows)} of {len(rows) + cut} rows (--limit {limit})"] if cut else []
    return Result("sql", columns, rows, notes, cut)


def write_sql_csv(con: duckdb.DuckDBPyConnection, text: str, write: Callable[[str], Any], *,
                  limit: int) -> int:
    """One SELECT query (see `sql`) written as CSV while its rows arrive, a batch at a time:
    the header, then at most `limit` rows (list cells joined by "; ", as `render` does).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    text
        The SQL.
    write
        Called with each piece of CSV text (lines ending in a newline).
    limit
        The most rows written (`--limit`).

    Returns
    -------
    How many more rows the query had (0 when all were written).

    Raises
    ------
    AuditError
        As `sql`; rows written before a failure stay written.
    """
    with _sql_errors(con):
        write(_csv_lines([_select(con, text)]))
        written = 0
        for batch in _batches(con, limit):
            write(_csv_lines([csv_cell(v) for v in row] for row in batch))
            written += len(batch)
        return _cut(con, text, written, limit)


def _select(con: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    """Start `text` on `con` once it is known to be one SELECT; its column names."""
    statements = con.extract_statements(text)
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements) or "nothing"
        msg = (f"--sql runs one read-only SELECT query; this is {kinds} (the audit cannot "
               "change the catalog, the data or any file)")
        raise AuditError(msg)
    return [d[0] for d in con.execute(text).description]


def _batches(con: duckdb.DuckDBPyConnection, limit: int) -> Iterator[list[tuple[Any, ...]]]:
    """The started query's rows, `BATCH_ROWS` at a time, `limit` in all at most."""
    left = limit
    while left > 0 and (batch := con.fetchmany(min(BATCH_ROWS, left))):
        left -= len(batch)
        yield batch


def _cut(con: duckdb.DuckDBPyConnection, text: str, shown: int, limit: int) -> int:
    """How many rows of `text` lie past the `shown` ones: DuckDB counts them, with the query
    run a second time inside `count(*)` (its text up to its `;`, so a trailing comment cannot
    swallow the closing parenthesis), only when the limit was reached and a row is left."""
    if shown < limit or not con.fetchmany(1):
        return 0
    end = next((at for at, kind in duckdb.tokenize(text)
                if kind == duckdb.token_type.operator and text[at] == ";"), len(text))
    return con.execute(f"SELECT count(*) FROM (\n{text[:end]}\n)").fetchone()[0] - shown


def _csv_lines(rows: Any) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


@contextmanager
def _sql_errors(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DuckDB's errors from a `--sql` query on `con` as one-line `AuditError`s that say what
    to do instead."""
    try:
        yield
    except duckdb.PermissionException as exc:
        raise AuditError(f"--sql: {_first_line(exc)} (the audit reads this run's datasets only,"
                         " through the views)") from None
    except duckdb.OutOfMemoryException as exc:
        memory, spill = con.execute("SELECT current_setting('memory_limit'),"
                                    " current_setting('max_temp_directory_size')").fetchone()
        raise AuditError(f"--sql: {_first_line(exc)} (the audit's limits: {memory} of memory,"
                         f" {spill} spilled to disk; read fewer rows or columns)") from None
    except duckdb.Error as exc:
        msg = f"--sql: {_first_line(exc)} (views: {', '.join(KINDS)}; tables: {', '.join(TABLES)})"
        raise AuditError(msg) from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
