"""One-row lookups in an audit snapshot, shared by the lineage modules (lineage.py,
checkpoint_lineage.py, training_plan.py)."""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.snapshot import fetch


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any] | None:
    """The first row of a query, or None.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    sql
        A query without a LIMIT clause (" LIMIT 1" is appended).
    params
        Its parameters.

    Returns
    -------
    The row as a dict by column name; None when the query returns no row.
    """
    found = fetch(con, sql + " LIMIT 1", params)
    return found[0] if found else None
