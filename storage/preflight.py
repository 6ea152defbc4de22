"""Checks of a data root made before a run writes anything, each failing with one line that
names the path and the fix (the CLI exits 2): a data root that is a file, read-only or on a
nearly full disk, and a catalog that is damaged, held by another process, or in another data
root format (`DataRootFormatError`, storage/catalog/schema.py).

A check that passes here can still fail later (the disk fills up mid-run); that failure is the
stage's, recorded in the catalog and resumable.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from storage.catalog import DataRootUnusable
from storage.catalog.connection import CatalogFile
from storage.catalog.errors import CatalogDamaged, CatalogLocked

__all__ = ["CatalogDamaged", "CatalogLocked", "DataRootUnusable", "check_catalog",
           "check_data_root"]

MIN_FREE_BYTES = 256 << 20  # a tiny CPU round writes about 60 MB; a checkpoint is about 10 MB


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_data_root(data_root: Path, *, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Check that the run can create and write its files under `data_root`.

    Parameters
    ----------
    data_root
        The data root; it need not exist yet (its nearest existing parent is checked then).
    min_free_bytes
        Free space the disk must have.

    Raises
    ------
    DataRootUnusable
        It is a file, is not writable, or its disk has less than `min_free_bytes` free.
    """
    existing = _nearest_existing(Path(data_root).absolute())
    if not existing.is_dir():
        msg = (f"--data-root {data_root}: {existing} is a file, not a folder (give a folder, or "
               "a path that does not exist yet)")
        raise DataRootUnusable(msg)
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        msg = (f"--data-root {data_root}: {existing} is on a read-only file system (choose "
               "another --data-root, or mount it writable)")
        raise DataRootUnusable(msg)
    if not os.access(existing, os.W_OK | os.X_OK):
        msg = (f"--data-root {data_root}: {existing} is not writable by this user (choose "
               "another --data-root, or make it writable)")
        raise DataRootUnusable(msg)
    free = shutil.disk_usage(existing).free
    if free < min_free_bytes:
        msg = (f"--data-root {data_root}: only {free >> 20} MiB free on its disk, a run needs at "
               f"least {min_free_bytes >> 20} MiB (free some space or choose another disk)")
        raise DataRootUnusable(msg)


def check_catalog(data_root: Path, *, wait: float | None = None) -> None:
    """Check that the data root's catalog (if there is one yet) opens, read-only, is in the
    data root format this Flywheel writes, and reads whole: every row of every table is read
    once (a catalog is megabytes), so a corrupted block fails here, before a run writes
    anything, rather than at the stage that first reads it.

    Parameters
    ----------
    data_root
        The data root.
    wait
        How long another process may hold a conflicting lock before this gives up (default
        storage/catalog/connection.py `READ_LOCK_WAIT_SECONDS`).

    Raises
    ------
    CatalogDamaged
        The catalog is damaged (not a DuckDB file, truncated, a corrupted block).
    DataRootFormatError
        The catalog is in another data root format (written by an earlier Flywheel).
    CatalogLocked
        Another process holds it (the message names its pid when DuckDB reports one).
    """
    catalog = CatalogFile(data_root)
    if not catalog.path.exists():
        return
    with catalog.connect(read_only=True, wait=wait) as con:
        tables = con.execute("SELECT table_name FROM duckdb_tables()"
                             " WHERE database_name = current_database()").fetchall()
        for (table,) in tables:  # hash(row) reads every column of every row
            con.execute(f'SELECT bit_xor(hash("{table}")) FROM "{table}"').fetchall()
