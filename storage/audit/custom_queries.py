"""The user's own audit queries: rows of one view or table filtered by a SQL condition
(`samples`, `flywheel audit RUN samples VIEW --where ...`) and any one SELECT over the snapshot
(`sql`, `flywheel audit RUN --sql ...`). Both run on the in-memory snapshot of `open_run` and
refuse anything that is not a read.

    samples(con, "rollouts", where="round = 1 AND completion = ''", limit=5)
    sql(con, "SELECT role, count(*) FROM train_rows GROUP BY role")
"""

from __future__ import annotations

import duckdb

from storage.audit.snapshot import TABLES, AuditError, Result, result_from_relation, result_from_sql
from storage.datasets import KINDS

VIEWS = (*KINDS, *TABLES)


def samples(con: duckdb.DuckDBPyConnection, view: str | None, *, where: str | None = None,
            limit: int = 20) -> Result:
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
    Up to `limit` rows, with a note saying how many rows match in all.

    Raises
    ------
    AuditError
        `view` is not one of `VIEWS`, `limit` is below 1, or `where` is not valid SQL for
        the view (the message lists its columns).
    """
    if view not in VIEWS:
        raise AuditError(f"samples {view or ''}: name a view or table, one of {', '.join(VIEWS)}")
    if limit < 1:
        raise AuditError(f"--limit {limit}: must be at least 1")
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
    return result


def sql(con: duckdb.DuckDBPyConnection, text: str) -> Result:
    """One SELECT query over the views (proposals, problems, rollouts, ...) and tables (runs,
    stages, ...) of a snapshot.

    Read-only twice over: anything but a single SELECT (ATTACH, COPY, INSTALL, SET, DELETE,
    a second statement, ...) is refused before it runs, and the snapshot itself reads no file
    outside the run's folder (`open_run`).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    text
        The SQL; it runs on the in-memory snapshot, never on the catalog file.

    Returns
    -------
    Its rows, titled "sql".

    Raises
    ------
    AuditError
        The text is not one SELECT, reaches for a file outside the run, or DuckDB rejects
        it: the first line of its error, with the names of the views and tables.
    """
    try:
        statements = con.extract_statements(text)
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            kinds = ", ".join(s.type.name for s in statements) or "nothing"
            msg = (f"--sql runs one read-only SELECT query; this is {kinds} (the audit cannot "
                   "change the catalog, the data or any file)")
            raise AuditError(msg)
        return result_from_sql(con, "sql", text)
    except duckdb.PermissionException as exc:
        first = str(exc).strip().splitlines()[0]
        raise AuditError(f"--sql: {first} (the audit reads this run's own files only)") from None
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        msg = f"--sql: {first} (views: {', '.join(KINDS)}; tables: {', '.join(TABLES)})"
        raise AuditError(msg) from None
