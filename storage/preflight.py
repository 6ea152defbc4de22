"""Checks of a data root made before a run writes anything, each failing with one line that
names the path and the fix (the CLI exits 2): a data root that is a file, read-only or on a
nearly full disk, and a catalog that is damaged, held by another process, or in another data
root format (`DataRootFormatError`, storage/catalog/schema.py).

A check that passes here can still fail later (the disk fills up mid-run); that failure is the
stage's, recorded in the catalog and resumable.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import duckdb

from storage.catalog import STORAGE_CONFIG, DataRootUnusable, check_format, retry_while_locked

MIN_FREE_BYTES = 256 << 20  # a tiny CPU round writes about 60 MB; a checkpoint is about 10 MB
CATALOG_WAIT_SECONDS = 5.0  # a run's own connections last milliseconds


class CatalogLocked(DataRootUnusable):
    """Another process holds the catalog (the CLI exits 3, as for a locked run)."""


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


def check_catalog(data_root: Path, *, wait: float = CATALOG_WAIT_SECONDS) -> None:
    """Check that the data root's catalog (if there is one yet) opens, read-only, and is in the
    data root format this Flywheel writes.

    Parameters
    ----------
    data_root
        The data root.
    wait
        How long another process may hold a conflicting lock before this gives up.

    Raises
    ------
    DataRootUnusable
        The catalog is damaged (not a DuckDB file, truncated).
    DataRootFormatError
        The catalog is in another data root format (written by an earlier Flywheel).
    CatalogLocked
        Another process holds it (the message names its pid when DuckDB reports one).
    """
    path = Path(data_root) / "catalog.duckdb"
    if not path.exists():
        return
    try:
        con = retry_while_locked(lambda: duckdb.connect(str(path), read_only=True,
                                                        config=STORAGE_CONFIG), wait=wait)
        with con:
            check_format(con, Path(data_root).resolve())
    except duckdb.IOException as exc:
        text = str(exc)
        if "Could not set lock" in text or "Conflicting lock" in text:
            holder = re.search(r"PID (\d+)", text)
            who = f"process {holder[1]}" if holder else "another process"
            msg = (f"catalog {path} is locked by {who} (for more than {wait:g} s); wait for it "
                   "to finish, or stop it")
            raise CatalogLocked(msg) from None
        raise DataRootUnusable(_damaged(path, exc)) from None
    except duckdb.Error as exc:
        raise DataRootUnusable(_damaged(path, exc)) from None


def _damaged(path: Path, exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"catalog {path} cannot be read ({first}); restore it from a backup, or move it "
            "aside to start a new catalog in this data root")
