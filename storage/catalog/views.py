"""Views over Parquet files: `problems`, `rollouts`, `verdicts`, `curriculum`, `train_rows`,
`evals`, `proposals` read every file that a completed stage recorded, across rounds and runs.

A view's columns are the union of its files' (a file without one of its kind's nullable columns
reads it as null); a damaged file is left out with a warning on the `flywheel.catalog` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from storage import interruption
from storage.datasets import KINDS

log = logging.getLogger("flywheel.catalog")


def readable_parquet(paths: list[str]) -> tuple[list[str], list[str]]:
    """Split Parquet files into those whose footer reads and the damaged rest.

    Parameters
    ----------
    paths
        Parquet files.

    Returns
    -------
    (readable, damaged), each in the order given.
    """
    readable, damaged = [], []
    for path in paths:
        try:
            pq.read_metadata(path)
        except Exception:  # noqa: BLE001 - any unreadable footer means a damaged file
            interruption.check()  # unless the read was interrupted
            damaged.append(path)
        else:
            readable.append(path)
    return readable, damaged


def create_parquet_view(con: duckdb.DuckDBPyConnection, name: str, paths: list[str], *,
                        replace: bool = False) -> list[str]:
    """A view over Parquet files whose columns are the union of theirs (union_by_name): a file
    without one of its kind's nullable columns reads it as null.

    A damaged file (no readable footer: truncated, overwritten) is left out of the view and
    named in a warning, so one bad file never makes a data root unreadable; the stage runner
    recomputes it on the next `resume`. Reading the footers costs about 0.1 ms a file.

    Parameters
    ----------
    con
        The connection to define the view in.
    name
        The view's name (a dataset kind).
    paths
        The Parquet files, at least one; quotes in them are escaped.
    replace
        Replace an existing view of that name (`CREATE OR REPLACE VIEW`).

    Returns
    -------
    The damaged files left out; no view is created when every file is damaged.
    """
    readable, damaged = readable_parquet(paths)
    for path in damaged:
        log.warning("flywheel: %s view: left out %s (truncated or unreadable Parquet file; "
                    "`flywheel resume` recomputes it)", name, path)
    if readable:
        files = ", ".join("'" + p.replace("'", "''") + "'" for p in readable)
        con.execute(f"CREATE {'OR REPLACE ' if replace else ''}VIEW {name} AS SELECT * FROM"
                    f" read_parquet([{files}], union_by_name = true)")
    return damaged


def refresh_views(con: duckdb.DuckDBPyConnection, resolve: Callable[[str], str],
                  kinds: Iterable[str] = KINDS) -> None:
    """Point the view of each dataset kind at the existing files of its completed stages.

    Parameters
    ----------
    con
        A writable connection to the catalog.
    resolve
        Recorded path -> absolute path (`Catalog.resolve`).
    kinds
        The kinds whose files changed (default: every kind). A view reads the footer of each of
        its files, across every run of the data root, so a stage refreshes only its own kinds.
    """
    for kind in sorted(set(kinds) & set(KINDS)):
        recorded = [resolve(row[0]) for row in con.execute(
            "SELECT DISTINCT d.path FROM datasets d JOIN stages s"
            " ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint"
            " WHERE d.kind = ? AND s.status = 'completed' ORDER BY d.path",
            [kind],
        ).fetchall()]
        paths = [path for path in recorded if Path(path).exists()]
        if paths:
            create_parquet_view(con, kind, paths, replace=True)
