"""Opening the catalog file: one short-lived connection per operation, retried while another
process holds the lock, and the paths it records relative to the data root.

The connection is opened per operation and closed at once, so another process (the `duckdb`
CLI, `flywheel audit`) can open the file between writes. A writable connection creates the
file (atomically, `CatalogFile._create`) and runs the schema and its migrations
(storage/catalog/schema.py) first. Every connection, read-only ones too, first checks the data
root format (`schema.check_format`): a catalog of another format raises `DataRootFormatError`
before anything is written to it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from storage.catalog.schema import SCHEMA, check_format, in_run_folder, migrate_paths
from storage.catalog.views import refresh_views

T = TypeVar("T")

LOCK_WAIT_SECONDS = 30.0
# New catalogs use DuckDB 1.0's storage format, so the `duckdb` command line (PyPI `duckdb-cli`,
# which lags the Python package) and any DuckDB >= 1.0 can open catalog.duckdb.
STORAGE_CONFIG = {"storage_compatibility_version": "v1.0.0"}


def retry_while_locked(open_connection: Callable[[], T], wait: float = LOCK_WAIT_SECONDS) -> T:
    """Call `open_connection` until no other process holds a conflicting lock on the file.

    DuckDB lets one process write or any number read at a time; every connection to the
    catalog lives for one operation (milliseconds), so a conflict clears quickly. Between
    tries it sleeps 5 ms, doubling up to 0.1 s.

    Parameters
    ----------
    open_connection
        Opens the connection (or runs a statement that opens the file, such as ATTACH).
    wait
        Seconds to keep trying while the file is locked.

    Returns
    -------
    What `open_connection` returned.

    Raises
    ------
    duckdb.IOException
        The file is still locked after `wait` seconds, or opening failed for another reason
        (which is raised at once).
    """
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        try:
            return open_connection()
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class CatalogFile:
    """The catalog file of one data root: its paths and its connections; every operation opens
    its own short-lived connection.

    Parameters
    ----------
    data_root
        The data root; the catalog is `<data-root>/catalog.duckdb`, created (with its
        tables) by the first writable `connect`.
    """

    def __init__(self, data_root: Path | str):
        self.data_root = Path(data_root).resolve()
        self._given_root = Path(os.path.abspath(data_root))  # as named, links not followed
        self.path = self.data_root / "catalog.duckdb"
        self._format_checked = False  # set once a connection found the format readable

    def relative(self, path: Path | str) -> str:
        """How a path is recorded: relative to the data root when it lies inside it.

        A copied (`cp -a`) or moved data root then names its own files, not the original's. A
        path inside the data root by name but elsewhere once resolved (a run folder that is a
        link to another disk, storage/paths.py) is recorded by its name, so it is read back
        through the same link.

        Parameters
        ----------
        path
            A file or folder, absolute or relative to the working directory.

        Returns
        -------
        `runs/<run_id>/round-<NNN>/<name>` for a path inside the data root; the absolute
        path for one outside it (a local model folder).
        """
        absolute = Path(path).resolve()
        if absolute.is_relative_to(self.data_root):
            return str(absolute.relative_to(self.data_root))
        named = Path(os.path.abspath(path))  # `..` folded by name, links not followed
        for root in (self.data_root, self._given_root):
            if named.is_relative_to(root):
                return str(named.relative_to(root))
        return str(absolute)

    def resolve(self, recorded: str) -> str:
        """The absolute path a recorded path names in this data root.

        Parameters
        ----------
        recorded
            A `datasets.path` value: relative to the data root, or absolute. An absolute
            `.../runs/<run_id>/round-<NNN>/<name>` (how catalogs recorded paths before they
            were relative, migrated by the first writable `connect`) is read as that file of
            this data root, unless only the recorded one exists.

        Returns
        -------
        The absolute path, as a string.
        """
        path = Path(recorded)
        if not path.is_absolute():
            return str(self.data_root / path)
        if not in_run_folder(path):
            return recorded
        mapped = self.data_root.joinpath(*path.parts[-4:])
        # a file of a folder some run folder links to (which `migrate_paths` leaves as it is)
        return recorded if not mapped.exists() and path.exists() else str(mapped)

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the catalog for one operation, closed when the block ends.

        A writable connection creates the data root and any missing table first (marking a new
        catalog, or one that records nothing yet, with the current data root format).

        Parameters
        ----------
        read_only
            Open read-only: never creates the file, and other readers can open it meanwhile.

        Yields
        ------
        The open connection.

        Raises
        ------
        FileNotFoundError
            `read_only` and there is no catalog yet (the message says to run `flywheel run`).
        DataRootFormatError
            The catalog is in another data root format (written by an earlier Flywheel);
            nothing was written to it.
        duckdb.IOException
            Another process holds a conflicting lock for longer than `LOCK_WAIT_SECONDS`.
        """
        if not read_only:
            self.data_root.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                self._create()
        elif not self.path.exists():
            raise FileNotFoundError(f"no catalog at {self.path} (run `flywheel run` first)")
        con = retry_while_locked(
            lambda: duckdb.connect(str(self.path), read_only=read_only, config=STORAGE_CONFIG))
        try:
            if not self._format_checked:  # before any write: a refused catalog stays as it was
                check_format(con, self.data_root)
                self._format_checked = True
            if not read_only:
                con.execute(SCHEMA)
                migrate_paths(con)
            yield con
        finally:
            con.close()

    def check_format(self) -> None:
        """Refuse, before anything is written, a data root whose catalog is in another data root
        format; a data root without a catalog passes (its first writable `connect` marks it).

        Raises
        ------
        DataRootFormatError
            The catalog is in another format (the message names it and the fix).
        """
        if self.path.exists():
            with self.connect(read_only=True):
                pass

    def _create(self) -> None:
        """Create the catalog with its tables under a temporary name, then link it into place:
        a process killed meanwhile leaves no half-created catalog, and of two processes
        creating it at once one wins and the other opens the winner's."""
        for stale in self.data_root.glob(".catalog.duckdb.tmp-*"):
            pid = stale.name.rsplit("-", 1)[1].split(".")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                stale.unlink(missing_ok=True)  # left by a process killed while creating it
        temp = self.data_root / f".catalog.duckdb.tmp-{os.getpid()}"
        temp.unlink(missing_ok=True)
        with duckdb.connect(str(temp), config=STORAGE_CONFIG) as con:
            con.execute(SCHEMA)
        try:
            os.link(temp, self.path)
        except FileExistsError:
            pass
        finally:
            temp.unlink(missing_ok=True)

    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Run one read-only statement on the catalog (tables and views) and fetch its rows.

        Parameters
        ----------
        sql
            The statement, with `?` placeholders.
        params
            Values for the placeholders.

        Returns
        -------
        One dict per row, keyed by column name.

        Raises
        ------
        FileNotFoundError
            There is no catalog at the data root.
        """
        with self.connect(read_only=True) as con:
            cur = con.execute(sql, params or [])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def _refresh_views(self, con: duckdb.DuckDBPyConnection) -> None:
        refresh_views(con, self.resolve)
