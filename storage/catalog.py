"""The DuckDB catalog at `<data-root>/catalog.duckdb`: what ran, on what, with what result.

Tables
    runs      one row per run id: config (JSON), its hash, created/updated time, status
    stages    one row per stage attempt: fingerprint, status (completed | failed | gate_failed),
              timings, total rows, error; a stage is *done* when a completed row exists for
              (run_id, fingerprint) and every dataset it lists exists with its checksum
    datasets  one row per file a completed stage wrote: kind, path, rows, sha256
    gates     one row per gate run on a dataset (result JSON)
    metrics   (run_id, round, stage, name, value)
    rounds    one row per decided round: incumbent, candidate, accuracies, promoted, reason (one
              line: "accuracy 0.242 >= 0.200 - 0.000", "no training rows"; candidate and its
              accuracy are null when the round had none; a `rounds` table without `reason`
              gets the column when it next records a round, and reads it as null until then)

Views `problems`, `rollouts`, `verdicts`, `curriculum`, `train_rows`, `evals`, `proposals`
read every Parquet file that a completed stage recorded, across rounds and runs.

The connection is opened per operation and closed at once, so another process (the `duckdb`
CLI, `flywheel audit`) can open the file between writes. Rows are written last: their presence
means the data they describe is complete.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow.parquet as pq

from storage import interruption
from storage.datasets import KINDS, WrittenDataset
from storage.fingerprint import stable_hash

T = TypeVar("T")
log = logging.getLogger("flywheel.catalog")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, config_json VARCHAR, config_hash VARCHAR,
    created_at DOUBLE, updated_at DOUBLE, status VARCHAR);
CREATE TABLE IF NOT EXISTS stages (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, status VARCHAR,
    started_at DOUBLE, finished_at DOUBLE, seconds DOUBLE, rows BIGINT, error VARCHAR,
    inputs_json VARCHAR, outputs INTEGER);
ALTER TABLE stages ADD COLUMN IF NOT EXISTS outputs INTEGER;
CREATE TABLE IF NOT EXISTS datasets (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    path VARCHAR, rows BIGINT, checksum VARCHAR);
CREATE TABLE IF NOT EXISTS gates (
    run_id VARCHAR, round INTEGER, stage VARCHAR, fingerprint VARCHAR, kind VARCHAR,
    success BOOLEAN, result_json VARCHAR, checked_at DOUBLE);
CREATE TABLE IF NOT EXISTS metrics (
    run_id VARCHAR, round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE);
CREATE TABLE IF NOT EXISTS rounds (
    run_id VARCHAR, round INTEGER, incumbent VARCHAR, candidate VARCHAR,
    incumbent_accuracy DOUBLE, candidate_accuracy DOUBLE, promoted BOOLEAN, decided_at DOUBLE,
    reason VARCHAR);
"""


_STAGE_COLUMNS = ("run_id, round, stage, fingerprint, status, started_at, finished_at, seconds,"
                  " rows, error, inputs_json, outputs")

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


class Catalog:
    """The catalog of one data root; every method opens its own short-lived connection.

    Parameters
    ----------
    data_root
        The data root; the catalog is `<data-root>/catalog.duckdb`, created (with its
        tables) by the first writable `connect`.
    """

    def __init__(self, data_root: Path | str):
        self.data_root = Path(data_root).resolve()
        self.path = self.data_root / "catalog.duckdb"

    def relative(self, path: Path | str) -> str:
        """How a path is recorded: relative to the data root when it lies inside it.

        A copied (`cp -a`) or moved data root then names its own files, not the original's.

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
        return str(absolute.relative_to(self.data_root)) if absolute.is_relative_to(
            self.data_root) else str(absolute)

    def resolve(self, recorded: str) -> str:
        """The absolute path a recorded path names in this data root.

        Parameters
        ----------
        recorded
            A `datasets.path` value: relative to the data root, or absolute. An absolute
            `.../runs/<run_id>/round-<NNN>/<name>` (how catalogs recorded paths before they
            were relative, migrated by the first writable `connect`) is read as that file of
            this data root.

        Returns
        -------
        The absolute path, as a string.
        """
        path = Path(recorded)
        if not path.is_absolute():
            return str(self.data_root / path)
        return str(self.data_root.joinpath(*path.parts[-4:])) if _in_run_folder(path) else recorded

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the catalog for one operation, closed when the block ends.

        A writable connection creates the data root and any missing table first.

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
            if not read_only:
                con.execute(_SCHEMA)
                self._migrate_paths(con)
            yield con
        finally:
            con.close()

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
            con.execute(_SCHEMA)
        try:
            os.link(temp, self.path)
        except FileExistsError:
            pass
        finally:
            temp.unlink(missing_ok=True)

    def _migrate_paths(self, con: duckdb.DuckDBPyConnection) -> None:
        """Rewrite absolute paths of files inside run folders as relative ones (`resolve`)."""
        old = [row[0] for row in con.execute(
            "SELECT DISTINCT path FROM datasets WHERE path LIKE '/%'").fetchall()]
        for path in old:
            if _in_run_folder(Path(path)):
                con.execute("UPDATE datasets SET path = ? WHERE path = ?",
                            [str(Path(*Path(path).parts[-4:])), path])

    # ---- runs -------------------------------------------------------------------------------

    def ensure_run(self, run_id: str, config_json: str) -> None:
        """Record `run_id` as running with this config, adding its row on the first call.

        An existing row gets the new config, its hash and the current time; `created_at` is
        kept.

        Parameters
        ----------
        run_id
            The run.
        config_json
            The run's config as JSON; its `stable_hash` is stored next to it.
        """
        now = time.time()
        with self.connect() as con:
            row = con.execute("SELECT config_hash FROM runs WHERE run_id = ?", [run_id]).fetchall()
            if row:
                con.execute(
                    "UPDATE runs SET config_json = ?, config_hash = ?, updated_at = ?,"
                    " status = 'running' WHERE run_id = ?",
                    [config_json, stable_hash(config_json), now, run_id],
                )
            else:
                con.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, ?, 'running')",
                    [run_id, config_json, stable_hash(config_json), now, now],
                )

    def set_run_status(self, run_id: str, status: str) -> None:
        """Set the run's status and `updated_at`; a run without a row is left unrecorded.

        Parameters
        ----------
        run_id
            The run.
        status
            "running", "completed", "failed" or "gate_failed".
        """
        with self.connect() as con:
            con.execute(
                "UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?",
                [status, time.time(), run_id],
            )

    def run_config_json(self, run_id: str) -> str | None:
        """The config the run was last started with.

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        The config as JSON, as `ensure_run` stored it; None when the run has no row.

        Raises
        ------
        FileNotFoundError
            There is no catalog at the data root.
        """
        with self.connect(read_only=True) as con:
            rows = con.execute("SELECT config_json FROM runs WHERE run_id = ?", [run_id]).fetchall()
        return rows[0][0] if rows else None

    def run_status(self, run_id: str) -> str | None:
        """The recorded status of `run_id`.

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        "running", "completed", "failed" or "gate_failed"; None when the catalog does not
        exist or has no such run.
        """
        if not self.path.exists():
            return None
        with self.connect(read_only=True) as con:
            rows = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
        return rows[0][0] if rows else None

    def last_decided_round(self, run_id: str) -> int:
        """The highest self-improvement round of `run_id` with a promotion decision.

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        The round index; 0 when no round is decided yet (or the catalog does not exist).
        """
        if not self.path.exists():
            return 0
        with self.connect(read_only=True) as con:
            rows = con.execute(
                "SELECT max(round) FROM rounds WHERE run_id = ?", [run_id]).fetchall()
        return int(rows[0][0] or 0)

    # ---- stages -----------------------------------------------------------------------------

    def completed_datasets(
        self, run_id: str, fingerprint: str
    ) -> dict[str, dict[str, Any]] | None:
        """The datasets of a completed stage, or None when the stage is not recorded as done.

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.

        Returns
        -------
        Kind -> {"path", "rows", "checksum"} for every dataset row of the stage (empty when
        it wrote none); None when no completed stage row exists for (run_id, fingerprint).
        The files themselves are not checked here (see `storage.recovery.check_recorded`).
        """
        with self.connect() as con:
            done = con.execute(
                "SELECT count(*) FROM stages WHERE run_id = ? AND fingerprint = ?"
                " AND status = 'completed'",
                [run_id, fingerprint],
            ).fetchall()[0][0]
            if not done:
                return None
            rows = con.execute(
                "SELECT kind, path, rows, checksum FROM datasets WHERE run_id = ?"
                " AND fingerprint = ?",
                [run_id, fingerprint],
            ).fetchall()
        return {kind: {"path": self.resolve(path), "rows": n, "checksum": c}
                for kind, path, n, c in rows}

    def recorded_output_count(self, run_id: str, fingerprint: str) -> int | None:
        """How many datasets the latest completed row of a stage says it wrote.

        `completed_datasets` lists the `datasets` rows that are there; when fewer are there
        than this count, a row was lost and the stage is not done.

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.

        Returns
        -------
        The count; None when the stage has no completed row or it predates the count.
        """
        with self.connect() as con:
            rows = con.execute(
                "SELECT outputs FROM stages WHERE run_id = ? AND fingerprint = ?"
                " AND status = 'completed' ORDER BY finished_at DESC LIMIT 1",
                [run_id, fingerprint]).fetchall()
        return rows[0][0] if rows else None

    def lost_outputs(self, run_id: str) -> list[dict[str, Any]]:
        """Completed stages whose catalog lists fewer datasets than the stage wrote (a
        `datasets` row was lost): `resume` recomputes them, `validate` reports them.

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        One dict per such stage: round, stage, fingerprint, listed (datasets rows there) and
        outputs (how many the stage wrote), in round and stage order.
        """
        return self.query(
            "SELECT s.round, s.stage, s.fingerprint, count(DISTINCT d.kind) AS listed,"
            " max(s.outputs) AS outputs FROM stages s LEFT JOIN datasets d"
            " ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint"
            " WHERE s.run_id = ? AND s.status = 'completed' AND s.outputs IS NOT NULL"
            " GROUP BY s.round, s.stage, s.fingerprint HAVING listed < max(s.outputs)"
            " ORDER BY s.round, min(s.started_at)", [run_id])

    def record_completed(
        self,
        *,
        run_id: str,
        round_index: int,
        stage: str,
        fingerprint: str,
        started_at: float,
        outputs: list[WrittenDataset],
        inputs: dict[str, str],
        metrics: dict[str, float] | None = None,
        status: str = "completed",
        error: str | None = None,
    ) -> None:
        """Record a finished stage: datasets, metrics, then the completed stage row, in one
        transaction, so a crash leaves either all of them or none.

        status = "gate_failed" records a stage whose outputs failed their gate: its datasets
        are kept for audit but the stage is not done (views and `completed_datasets` ignore
        it). Dataset rows of the same (run_id, fingerprint) and metrics of the same (run_id,
        round, stage) are replaced; the views are refreshed afterwards.

        Parameters
        ----------
        run_id
            The run.
        round_index
            The round the stage belongs to.
        stage
            The stage's name.
        fingerprint
            The stage's fingerprint.
        started_at
            When the stage started (`time.time()`); `seconds` is measured from it.
        outputs
            The files the stage wrote (`write_atomic` results); their rows are summed into
            the stage row.
        inputs
            Input names -> the fingerprints they came from (stored as `inputs_json`).
        metrics
            Metric name -> value, stored as floats.
        status
            "completed", or "gate_failed" (see above).
        error
            Why a gate_failed stage failed.
        """
        finished = time.time()
        with self.connect() as con:
            con.execute("BEGIN")
            con.execute(
                "DELETE FROM datasets WHERE run_id = ? AND fingerprint = ?", [run_id, fingerprint]
            )
            con.execute(
                "DELETE FROM metrics WHERE run_id = ? AND round = ? AND stage = ?",
                [run_id, round_index, stage],
            )
            for out in outputs:
                con.execute(
                    "INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, round_index, stage, fingerprint, out.kind,
                     self.relative(out.path), out.rows, out.checksum],
                )
            for name, value in (metrics or {}).items():
                con.execute(
                    "INSERT INTO metrics VALUES (?, ?, ?, ?, ?)",
                    [run_id, round_index, stage, name, float(value)],
                )
            con.execute(
                f"INSERT INTO stages ({_STAGE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, round_index, stage, fingerprint, status, started_at, finished,
                 finished - started_at, sum(o.rows for o in outputs), error, json.dumps(inputs),
                 len(outputs)],
            )
            con.execute("COMMIT")
            self._refresh_views(con)

    def record_failed(
        self, *, run_id: str, round_index: int, stage: str, fingerprint: str,
        started_at: float, error: str, status: str = "failed",
    ) -> None:
        """Record a stage attempt that did not complete: a stage row without rows or inputs.

        Parameters
        ----------
        run_id
            The run.
        round_index
            The round the stage belongs to.
        stage
            The stage's name.
        fingerprint
            The stage's fingerprint.
        started_at
            When the attempt started (`time.time()`).
        error
            What went wrong, for `flywheel status` and the audit.
        status
            "failed" (the stage raised), or "gate_failed" (its stored outputs failed their
            gate again).
        """
        finished = time.time()
        with self.connect() as con:
            con.execute(
                f"INSERT INTO stages ({_STAGE_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, NULL, NULL)",
                [run_id, round_index, stage, fingerprint, status, started_at, finished,
                 finished - started_at, error],
            )

    def discard_stage(self, run_id: str, fingerprint: str, reason: str) -> None:
        """Mark a completed stage whose files were found damaged as `discarded` (with the
        reason in `error`) and forget its datasets, so it is no longer done.

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.
        reason
            Why it was discarded (one line).
        """
        with self.connect() as con:
            con.execute("BEGIN")
            con.execute(
                "UPDATE stages SET status = 'discarded', error = ? WHERE run_id = ?"
                " AND fingerprint = ? AND status = 'completed'", [reason, run_id, fingerprint],
            )
            con.execute(
                "DELETE FROM datasets WHERE run_id = ? AND fingerprint = ?", [run_id, fingerprint]
            )
            con.execute("COMMIT")
            self._refresh_views(con)

    def stage_rows(self, run_id: str) -> list[dict[str, Any]]:
        """Every stage attempt of a run, oldest first.

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        One dict per stage row with round, stage, fingerprint, status, seconds, rows and
        error, ordered by start time.

        Raises
        ------
        FileNotFoundError
            There is no catalog at the data root.
        """
        with self.connect(read_only=True) as con:
            cur = con.execute(
                "SELECT round, stage, fingerprint, status, seconds, rows, error FROM stages"
                " WHERE run_id = ? ORDER BY started_at",
                [run_id],
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    # ---- gates ------------------------------------------------------------------------------

    def record_gate(self, *, run_id: str, round_index: int, stage: str, fingerprint: str,
                    kind: str, success: bool, result_json: str) -> None:
        """Record one gate run on a dataset, stamped with the current time.

        Parameters
        ----------
        run_id
            The run.
        round_index
            The round of the stage whose output was checked.
        stage
            The stage's name.
        fingerprint
            The stage's fingerprint.
        kind
            The dataset kind that was checked.
        success
            Whether the dataset passed.
        result_json
            The gate's full result as JSON.
        """
        with self.connect() as con:
            con.execute(
                "INSERT INTO gates VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, round_index, stage, fingerprint, kind, success, result_json, time.time()],
            )

    def gate_failed_datasets(
        self, run_id: str, fingerprint: str
    ) -> dict[str, dict[str, Any]] | None:
        """The datasets of a stage whose last attempt failed its gate, or None (see
        record_completed(status="gate_failed")).

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.

        Returns
        -------
        Kind -> {"path", "rows", "checksum"}; None when the stage's latest row (by finish
        time) is not gate_failed, or it has no dataset rows.
        """
        with self.connect() as con:
            last = con.execute(
                "SELECT status FROM stages WHERE run_id = ? AND fingerprint = ?"
                " ORDER BY finished_at DESC LIMIT 1", [run_id, fingerprint],
            ).fetchall()
            if not last or last[0][0] != "gate_failed":
                return None
            rows = con.execute(
                "SELECT kind, path, rows, checksum FROM datasets WHERE run_id = ?"
                " AND fingerprint = ?",
                [run_id, fingerprint],
            ).fetchall()
        return {
            kind: {"path": self.resolve(path), "rows": n, "checksum": c}
            for kind, path, n, c in rows
        } or None

    def record_gate_passed(self, *, run_id: str, fingerprint: str, started_at: float) -> None:
        """A gate_failed stage whose stored outputs now pass (thresholds fixed): add its
        completed row; its datasets and metrics rows are already there.

        The new row copies round, stage, rows and inputs from the stage's latest gate_failed
        row that has inputs; nothing is added when there is none. The views are refreshed.

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.
        started_at
            When the re-check started (`time.time()`).
        """
        finished = time.time()
        with self.connect() as con:
            con.execute(
                f"INSERT INTO stages ({_STAGE_COLUMNS}) SELECT run_id, round, stage, fingerprint,"
                " 'completed', ?, ?, ? - ?, rows, NULL, inputs_json, outputs FROM stages"
                " WHERE run_id = ? AND fingerprint = ?"
                " AND status = 'gate_failed' AND inputs_json IS NOT NULL"
                " ORDER BY finished_at DESC LIMIT 1",
                [started_at, finished, finished, started_at, run_id, fingerprint],
            )
            self._refresh_views(con)

    def latest_dataset(self, run_id: str, round_index: int, kind: str) -> str | None:
        """Path of the newest completed dataset of `kind` in a round of a run (drift baseline).

        Parameters
        ----------
        run_id
            The run.
        round_index
            The round.
        kind
            The dataset kind.

        Returns
        -------
        The path recorded by the most recently finished completed stage; None when there is
        none or no catalog yet.
        """
        rows = self.query(
            "SELECT d.path FROM datasets d JOIN stages s ON d.run_id = s.run_id"
            " AND d.fingerprint = s.fingerprint AND s.status = 'completed'"
            " WHERE d.run_id = ? AND d.round = ? AND d.kind = ?"
            " ORDER BY s.finished_at DESC LIMIT 1", [run_id, round_index, kind],
        ) if self.path.exists() else []
        return self.resolve(rows[0]["path"]) if rows else None

    # ---- rounds and metrics -----------------------------------------------------------------

    def record_round(
        self, *, run_id: str, round_index: int, incumbent: str, candidate: str | None,
        incumbent_accuracy: float, candidate_accuracy: float | None, promoted: bool,
        reason: str | None = None,
    ) -> None:
        """Record a round's promotion decision, replacing an earlier one for the same round.

        Parameters
        ----------
        run_id
            The run.
        round_index
            The round decided.
        incumbent
            Fingerprint of the checkpoint that entered the round.
        candidate
            Fingerprint of the round's trained checkpoint; None when the round trained none.
        incumbent_accuracy
            The incumbent's held-out accuracy.
        candidate_accuracy
            The candidate's held-out accuracy; None without a candidate.
        promoted
            Whether the candidate replaced the incumbent.
        reason
            The decision in one line, e.g. "accuracy 0.242 >= 0.200 - 0.000".
        """
        with self.connect() as con:
            # a rounds table created without the column gets it here
            con.execute("ALTER TABLE rounds ADD COLUMN IF NOT EXISTS reason VARCHAR")
            con.execute("BEGIN")
            con.execute("DELETE FROM rounds WHERE run_id = ? AND round = ?", [run_id, round_index])
            con.execute(
                "INSERT INTO rounds (run_id, round, incumbent, candidate, incumbent_accuracy,"
                " candidate_accuracy, promoted, decided_at, reason)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, round_index, incumbent, candidate, incumbent_accuracy,
                 candidate_accuracy, promoted, time.time(), reason],
            )
            con.execute("COMMIT")

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

    # ---- views ------------------------------------------------------------------------------

    def _refresh_views(self, con: duckdb.DuckDBPyConnection) -> None:
        for kind in KINDS:
            recorded = [self.resolve(row[0]) for row in con.execute(
                "SELECT DISTINCT d.path FROM datasets d JOIN stages s"
                " ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint"
                " WHERE d.kind = ? AND s.status = 'completed' ORDER BY d.path",
                [kind],
            ).fetchall()]
            paths = [path for path in recorded if Path(path).exists()]
            if paths:
                create_parquet_view(con, kind, paths, replace=True)


def _in_run_folder(path: Path) -> bool:
    """Whether `path` ends in `runs/<run_id>/round-<NNN>/<name>`."""
    parts = path.parts
    return len(parts) >= 5 and parts[-4] == "runs" and parts[-2].startswith("round-")


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

