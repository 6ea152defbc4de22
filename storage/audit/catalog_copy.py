"""A read-only copy of the whole catalog, to query with the `duckdb` command line (or any tool)
while a run writes: `flywheel catalog snapshot` (docs/audit.md).

    <data-root>/snapshots/catalog.duckdb    the default place; the next snapshot replaces it

Why a copy: DuckDB lets one process write a database file or any number of processes read it,
never both at once. Opening `catalog.duckdb` itself while the run writes fails, and a session
kept open on it blocks the run's next write (which waits, then fails the stage). The run's own
connections last milliseconds (storage/catalog/connection.py), so a copy taken between two of
them waits at most that long, and reading the copy holds no lock on the catalog at all.

The copy is made by DuckDB (`COPY FROM DATABASE`: every table and view, with whatever the
write-ahead log holds), in DuckDB 1.0's storage format like the catalog, under a temporary name
in the target's folder, then marked read-only (mode 0444) and renamed into place: a session
still open on the previous copy keeps reading that one. The views over Parquet files name their
files by absolute path, so they read the run's files from the copy too; `datasets.path` is
relative to the data root, as in the catalog.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import duckdb

from storage.catalog import STORAGE_CONFIG, Catalog, check_format, retry_while_locked

SNAPSHOT = Path("snapshots") / "catalog.duckdb"  # under the data root


class SnapshotUnwritable(ValueError):
    """The snapshot's file cannot be written there; the message names it and the fix."""


def _writable(target: Path) -> None:
    """Refuse, before the catalog is opened, a target that cannot be written."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            raise IsADirectoryError(21, "it is a folder")
        if not os.access(target.parent, os.W_OK):
            raise PermissionError(13, f"its folder {target.parent} is not writable")
    except OSError as exc:
        raise SnapshotUnwritable(f"cannot write the catalog snapshot {target}: "
                                 f"{exc.strerror or exc}; give another --out") from exc


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def snapshot_catalog(data_root: Path | str, out: Path | str | None = None) -> Path:
    """Copy the data root's catalog to `out` (default `<data-root>/snapshots/catalog.duckdb`).

    Parameters
    ----------
    data_root
        The data root; its catalog must exist.
    out
        The file to write; an existing one is replaced, missing folders are created.

    Returns
    -------
    The absolute path of the copy.

    Raises
    ------
    FileNotFoundError
        There is no catalog at the data root.
    DataRootFormatError
        The catalog is in another data root format (nothing is written).
    SnapshotUnwritable
        `out` cannot be written (nothing is left behind).
    """
    catalog = Catalog(data_root)
    if not catalog.path.exists():
        raise FileNotFoundError(f"no catalog at {catalog.path} (check --data-root)")
    target = Path(os.path.abspath(out if out is not None else catalog.data_root / SNAPSHOT))
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    version = STORAGE_CONFIG["storage_compatibility_version"]
    con = duckdb.connect(":memory:")
    try:
        try:
            retry_while_locked(lambda: con.execute(
                f"ATTACH {_quoted(catalog.path)} AS catalog_file (READ_ONLY)"))
            check_format(con, catalog.data_root, "catalog_file")  # before anything is written
            _writable(target)
            temporary.unlink(missing_ok=True)
            con.execute(f"ATTACH {_quoted(temporary)} AS copy (STORAGE_VERSION '{version}')")
            con.execute("COPY FROM DATABASE catalog_file TO copy")
        finally:
            con.close()  # releases the catalog's lock and writes the copy out
        temporary.chmod(0o444)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):  # a target that could not be written has neither
            temporary.unlink(missing_ok=True)
            Path(f"{temporary}.wal").unlink(missing_ok=True)
        raise
    return target
