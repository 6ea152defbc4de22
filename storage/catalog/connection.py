"""Opening the catalog file: one short-lived connection per operation, retried while another
process holds the lock, its errors translated once, and the paths it records relative to the
data root.

The file is attached per operation and detached at once, so another process (the `duckdb`
CLI, `flywheel audit`) can open it between writes: each process keeps one in-memory DuckDB
database (`_Attachments`) and attaches the catalog to it for the operation, which costs about
2 ms where opening the file as a database of its own costs 12-15 ms (most of it DuckDB
setting up a new database). Detaching releases the file's lock and checkpoints what the
operation wrote, as closing a connection did. A writable connection creates the file
(atomically, `CatalogFile._create`) and runs the schema and its migrations
(storage/catalog/schema.py) first. Every connection, read-only ones too, first checks the data
root format (`schema.check_format`): a catalog of another format raises `DataRootFormatError`
before anything is written to it.

What DuckDB raises about the file itself becomes one of storage/catalog/errors.py's one-line
errors here, and nowhere else (the CLI prints them, flows/cli.py `_Group`):

    error: catalog /srv/fw/catalog.duckdb is locked by process 4242 (for more than 5 s); ...
    error: catalog /srv/fw/catalog.duckdb cannot be read (IO Error: Could not read enough
    bytes from file ...); restore it from a backup, or move it aside (mv ...) ...

`CatalogLocked` when another process held the lock past the wait: 5 s for a read-only
connection (a command someone is waiting for), 30 s for a writable one (a run recording a
stage, which would otherwise fail the stage); `CatalogDamaged` when the file does not open, or a
read finds its bytes not as DuckDB wrote them (truncated, overwritten, a corrupted block).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from storage.catalog.errors import CatalogDamaged, CatalogLocked, DataRootUnusable
from storage.catalog.schema import SCHEMA, check_format, in_run_folder, migrate_paths
from storage.catalog.views import refresh_views
from storage.paths import CATALOG_FILE

T = TypeVar("T")

LOCK_WAIT_SECONDS = 30.0  # a writable connection: a run recording a stage
READ_LOCK_WAIT_SECONDS = 5.0  # a read-only one: a command someone is waiting for
# New catalogs use DuckDB 1.0's storage format, so the `duckdb` command line (PyPI `duckdb-cli`,
# which lags the Python package) and any DuckDB >= 1.0 can open catalog.duckdb.
STORAGE_CONFIG = {"storage_compatibility_version": "v1.0.0"}
INSERT_ROWS = 1000  # rows of one INSERT statement (insert_rows)
# Writable connections this process opened per catalog file (`CatalogFile.state`): a count, not a
# handle, so nothing stays open between operations.
_WRITES: dict[Path, int] = {}


class _Attachments:
    """This process's in-memory DuckDB database, to which each catalog operation attaches its
    catalog file, and the files attached now. One thread at a time uses it (the lock is held
    for each whole operation, so a catalog operation inside another, in the same thread, shares
    its attachment); a forked child starts afresh."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._database: duckdb.DuckDBPyConnection | None = None
        self.attached: dict[Path, list[Any]] = {}  # file -> [name, read_only, operations]

    def database(self) -> duckdb.DuckDBPyConnection:
        if self._database is None:
            self._database = duckdb.connect()
        return self._database

    @contextmanager
    def attach(self, path: Path, read_only: bool,
               wait: float) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose default database is the catalog `path`, attached for the block."""
        with self.lock:
            database = self.database()
            entry = self.attached.get(path)
            if entry is None:
                name = "catalog_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
                options = "READ_ONLY" if read_only else \
                    f"STORAGE_VERSION '{STORAGE_CONFIG['storage_compatibility_version']}'"
                quoted = str(path).replace("'", "''")
                database.execute(f"DETACH DATABASE IF EXISTS {name}")  # a detach that failed
                retry_while_locked(lambda: database.execute(
                    f"ATTACH '{quoted}' AS {name} ({options})"), wait, path)
                entry = self.attached[path] = [name, read_only, 0]
            elif entry[1] and not read_only:
                msg = f"a writable connection to {path} inside a read-only one"
                raise RuntimeError(msg)
            entry[2] += 1
            con = database.cursor()
            try:
                con.execute(f"USE {entry[0]}")
                yield con
            finally:
                con.close()  # rolls back a transaction the block left open
                entry[2] -= 1
                if entry[2] == 0:
                    del self.attached[path]
                    database.execute(f"DETACH {entry[0]}")  # releases the lock, checkpoints


_ATTACHMENTS = _Attachments()
_INHERITED: list[Any] = []  # a forked child's copy of the parent's database: never freed there


def _after_fork_in_child() -> None:
    """A fresh lock and database in a forked child. The parent's database object is kept, not
    freed: DuckDB's destructor in a child that did not inherit its threads crashes (a fork
    before exec runs this too, as Ray's launches do)."""
    _INHERITED.append(_ATTACHMENTS._database)
    _ATTACHMENTS.__init__()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_lock(exc: duckdb.Error) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def _is_damage(exc: duckdb.Error, path: Path | str) -> bool:
    """Whether DuckDB found the catalog's bytes not as it wrote them: a block whose checksum
    fails (DuckDB names no file then, but the catalog is the only database file a connection
    opens) or a read past the end of a truncated file (it names the file). A missing Parquet
    file behind a view, a SQL error or a full disk are not the catalog's damage.

    Parameters
    ----------
    exc
        What DuckDB raised.
    path
        The catalog file.
    """
    text = str(exc)
    return "Corrupt database file" in text or ("Could not read" in text and str(path) in text)


def catalog_error(exc: duckdb.Error, path: Path | str | None, wait: float) -> DataRootUnusable:
    """The one-line error a DuckDB error opening or reading the catalog stands for.

    Parameters
    ----------
    exc
        What DuckDB raised.
    path
        The catalog file (None: the file DuckDB's own text names, as for an ATTACH).
    wait
        How long the lock was waited for, for the message.

    Returns
    -------
    `CatalogLocked` for a lock held by another process (naming its pid when DuckDB reports
    it); `DataRootUnusable` for a file this user may not open; else `CatalogDamaged`.
    """
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if path is None and (named := re.search(r'file "([^"]+)"', text)):
        path = named[1]
    where = "the catalog" if path is None else f"catalog {path}"
    if _is_lock(exc):
        holder = re.search(r"PID (\d+)", text)
        who = f"process {holder[1]}" if holder else "another process"
        return CatalogLocked(f"{where} is locked by {who} (for more than {wait:g} s); wait for "
                             "it to finish, or stop it")
    if "Permission denied" in text:
        return DataRootUnusable(f"{where} cannot be opened ({text}); make it readable and "
                                "writable by this user")
    aside = f"mv {path} {path}.damaged" if path is not None else "mv catalog.duckdb elsewhere"
    return CatalogDamaged(f"{where} cannot be read ({text}); restore it from a backup, or move "
                          f"it aside ({aside}): `flywheel resume RUN_ID` then recomputes a run "
                          "from the config recorded in its folder")


def retry_while_locked(open_connection: Callable[[], T], wait: float | None = None,
                       path: Path | str | None = None) -> T:
    """Call `open_connection` until no other process holds a conflicting lock on the file.

    DuckDB lets one process write or any number read at a time; every connection to the
    catalog lives for one operation (milliseconds), so a conflict clears quickly. Between
    tries it sleeps 5 ms, doubling up to 0.1 s.

    Parameters
    ----------
    open_connection
        Opens the connection (or runs a statement that opens the file, such as ATTACH).
    wait
        Seconds to keep trying while the file is locked (default `READ_LOCK_WAIT_SECONDS`).
    path
        The catalog file, for the messages.

    Returns
    -------
    What `open_connection` returned.

    Raises
    ------
    CatalogLocked
        The file is still locked after `wait` seconds.
    CatalogDamaged, DataRootUnusable
        Opening failed for another reason (raised at once): see `catalog_error`.
    """
    wait = READ_LOCK_WAIT_SECONDS if wait is None else wait
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        try:
            return open_connection()
        except duckdb.Error as exc:
            if not _is_lock(exc) or time.monotonic() > deadline:
                raise catalog_error(exc, path, wait) from exc
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@contextmanager
def catalog_errors(path: Path | str) -> Iterator[None]:
    """For a block that reads an open catalog: a read that finds the file damaged
    (`_is_damage`) raises `CatalogDamaged`; every other error passes unchanged."""
    try:
        yield
    except duckdb.Error as exc:
        if not _is_damage(exc, path):
            raise
        raise catalog_error(exc, path, 0) from exc


def insert_rows(con: duckdb.DuckDBPyConnection, table: str,
                rows: Sequence[Sequence[Any]]) -> None:
    """Insert `rows` (each a value per column of `table`, in order) with one statement: a
    stage's hundreds of metric rows (the trainer's curve) cost one round trip, not hundreds.

    Parameters
    ----------
    con
        A writable connection.
    table
        The table (a name of storage/catalog/schema.py, never user input).
    rows
        The rows, all of one length, sent `INSERT_ROWS` at a time; none: nothing is done.
    """
    for start in range(0, len(rows), INSERT_ROWS):
        part = rows[start:start + INSERT_ROWS]
        one = "(" + ", ".join("?" * len(part[0])) + ")"
        con.execute(f"INSERT INTO {table} VALUES " + ", ".join([one] * len(part)),
                    [value for row in part for value in row])


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
        self.path = self.data_root / CATALOG_FILE
        self._format_checked = False  # set once a connection found the format readable
        self._tables_ensured = False  # set once a writable connection ran SCHEMA and migrations

    def state(self) -> tuple[Any, ...]:
        """What tells whether the catalog changed since an earlier read: this process's count of
        writable connections to it (any CatalogFile) and the size, time and inode of the file
        and of DuckDB's write-ahead log (another process's writes). Equal states mean no write
        came in between, so what was read then may be used again (`StageRecords`).

        Returns
        -------
        A tuple to compare with `==`.
        """
        files = []
        for path in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                info = path.stat()
            except FileNotFoundError:
                files.append(None)
            else:
                files.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        return (_WRITES.get(self.path, 0), *files)

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
    def connect(self, read_only: bool = False,
                wait: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the catalog for one operation, closed when the block ends.

        A writable connection creates the data root and any missing table first (marking a new
        catalog, or one that records nothing yet, with the current data root format).

        Parameters
        ----------
        read_only
            Open read-only: never creates the file, and other readers can open it meanwhile.
        wait
            Seconds to wait while another process holds the lock (default
            `READ_LOCK_WAIT_SECONDS` read-only, else `LOCK_WAIT_SECONDS`).

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
        CatalogLocked
            Another process holds a conflicting lock for longer than `wait`.
        CatalogDamaged
            The file does not open, or a read in the block finds it damaged (`_is_damage`).
        """
        if not read_only:
            self.data_root.mkdir(parents=True, exist_ok=True)
            with _ATTACHMENTS.lock:  # one thread creates it; processes race in `_create`
                if not self.path.exists():
                    self._create()
        elif not self.path.exists():
            raise FileNotFoundError(f"no catalog at {self.path} (run `flywheel run` first)")
        if wait is None:
            wait = READ_LOCK_WAIT_SECONDS if read_only else LOCK_WAIT_SECONDS
        try:
            with _ATTACHMENTS.attach(self.path, read_only, wait) as con, \
                    catalog_errors(self.path):
                if not self._format_checked:  # before any write: a refused catalog stays as it was
                    check_format(con, self.data_root)
                    self._format_checked = True
                if not read_only and not self._tables_ensured:  # once, as the format check
                    con.execute(SCHEMA)
                    migrate_paths(con)
                    self._tables_ensured = True
                yield con
        finally:
            if not read_only:
                _WRITES[self.path] = _WRITES.get(self.path, 0) + 1

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

    @staticmethod
    def _recorded_kinds(con: duckdb.DuckDBPyConnection, run_id: str,
                        fingerprint: str) -> set[str]:
        """The kinds of the datasets recorded for one stage execution."""
        return {row[0] for row in con.execute(
            "SELECT DISTINCT kind FROM datasets WHERE run_id = ? AND fingerprint = ?",
            [run_id, fingerprint]).fetchall()}

    def _refresh_views(self, con: duckdb.DuckDBPyConnection, kinds: Iterable[str]) -> None:
        """Refresh the views of the dataset kinds a write changed (storage/catalog/views.py)."""
        refresh_views(con, self.resolve, kinds)
