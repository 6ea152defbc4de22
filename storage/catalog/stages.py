"""Rows of stage attempts and the datasets they wrote (`stages`, `datasets`, `metrics`).

A stage is *done* when a completed row exists for (run_id, fingerprint) and every dataset it
lists exists with its checksum; the completed row is written last, in the same transaction as
its datasets and metrics, so its presence means the data is complete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from storage.catalog.connection import CatalogFile, insert_rows
from storage.catalog.gates import GateRow, insert_gates
from storage.catalog.schema import STAGE_COLUMNS
from storage.datasets import WrittenDataset


class RecordedStage(NamedTuple):
    """A stage execution as the catalog holds it (`StageRecords.recorded_stage`)."""

    status: str  # "completed", or "gate_failed": its latest attempt failed its gate
    datasets: dict[str, dict[str, Any]]  # kind -> {"path", "rows", "checksum"}
    outputs: int | None  # the datasets its row says it wrote (None: the row predates the count)


# Per catalog file, (run_id, CatalogFile.state(), its recorded stages) of the last
# `recorded_stages` read by any instance of this process (a run makes a RunContext per round)
_RECORDED: dict[Path, tuple[str, tuple[Any, ...], dict[str, RecordedStage]]] = {}


class StageRecords(CatalogFile):
    """What the catalog records of stage attempts: completed, failed, gate_failed, discarded."""

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
        recorded = self.recorded_stage(run_id, fingerprint)
        return recorded.datasets if recorded and recorded.status == "completed" else None

    def recorded_stage(self, run_id: str, fingerprint: str) -> RecordedStage | None:
        """What the stage runner needs to know of a stage before computing it: its completed row
        (the latest) with its datasets, else its latest attempt when that failed its gate
        (`tasks/gates.py regate_stored`).

        Parameters
        ----------
        run_id
            The run.
        fingerprint
            The stage's fingerprint.

        Returns
        -------
        RecordedStage; None when the stage has no completed row and its latest attempt did not
        fail its gate (never run, failed, discarded), or there is no catalog yet.
        """
        return self.recorded_stages(run_id).get(fingerprint)

    def recorded_stages(self, run_id: str) -> dict[str, RecordedStage]:
        """`recorded_stage` of every stage of a run, by fingerprint, read on one connection.

        Opening the catalog costs more than the queries, and a run asks this before every stage:
        a resume that finds every stage done opens the catalog once for all of them. What was
        read is used again, by every instance for this file, until the catalog changes
        (`CatalogFile.state`: any write of this process, or a change of the file by another).

        Parameters
        ----------
        run_id
            The run.

        Returns
        -------
        Fingerprint -> RecordedStage, for the stages that have a completed row or whose latest
        attempt failed its gate; empty when there is no catalog yet.
        """
        state = self.state()
        memo = _RECORDED.get(self.path)
        if memo is not None and memo[:2] == (run_id, state):
            return memo[2]
        if not self.path.exists():
            return {}
        with self.connect(read_only=True) as con:  # which writes nothing: `state` still holds
            recorded = self._read_recorded(con, run_id)
        _RECORDED[self.path] = (run_id, state, recorded)
        return recorded

    def _read_recorded(self, con: duckdb.DuckDBPyConnection,
                       run_id: str) -> dict[str, RecordedStage]:
        """`recorded_stages` as read on `con`."""
        latest = con.execute(
            "SELECT fingerprint, status, outputs FROM (SELECT fingerprint, status, outputs,"
            " row_number() OVER (PARTITION BY fingerprint ORDER BY status = 'completed' DESC,"
            " finished_at DESC) AS n FROM stages WHERE run_id = ?)"
            " WHERE n = 1 AND status IN ('completed', 'gate_failed')", [run_id]).fetchall()
        datasets = con.execute(
            "SELECT fingerprint, kind, path, rows, checksum FROM datasets WHERE run_id = ?",
            [run_id]).fetchall()
        recorded = {fingerprint: RecordedStage(status, {}, outputs)
                    for fingerprint, status, outputs in latest}
        for fingerprint, kind, path, rows, checksum in datasets:
            if fingerprint in recorded:
                recorded[fingerprint].datasets[kind] = {"path": self.resolve(path), "rows": rows,
                                                        "checksum": checksum}
        return recorded

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
        gates: Sequence[GateRow] = (),
    ) -> None:
        """Record a finished stage: datasets, metrics, its gates, then the completed stage row,
        in one transaction, so a crash leaves either all of them or none.

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
        gates
            The gate runs on its outputs (`insert_gates`).
        """
        finished = time.time()
        with self.connect() as con:
            replaced = self._recorded_kinds(con, run_id, fingerprint)
            con.execute("BEGIN")
            con.execute(
                "DELETE FROM datasets WHERE run_id = ? AND fingerprint = ?", [run_id, fingerprint]
            )
            con.execute(
                "DELETE FROM metrics WHERE run_id = ? AND round = ? AND stage = ?",
                [run_id, round_index, stage],
            )
            insert_rows(con, "datasets", [
                (run_id, round_index, stage, fingerprint, out.kind, self.relative(out.path),
                 out.rows, out.checksum) for out in outputs])
            insert_rows(con, "metrics", [(run_id, round_index, stage, name, float(value))
                                         for name, value in (metrics or {}).items()])
            insert_gates(con, run_id=run_id, round_index=round_index, stage=stage,
                         fingerprint=fingerprint, gates=gates)
            con.execute(
                f"INSERT INTO stages ({STAGE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, round_index, stage, fingerprint, status, started_at, finished,
                 finished - started_at, sum(o.rows for o in outputs), error, json.dumps(inputs),
                 len(outputs)],
            )
            con.execute("COMMIT")
            self._refresh_views(con, {out.kind for out in outputs} | replaced)
            # the next stage's done check, read while no other process can write; only this
            # process writes the run's stages (the run lock), so what another writes after this
            # connection closes is another run's
            recorded = self._read_recorded(con, run_id)
        _RECORDED[self.path] = (run_id, self.state(), recorded)

    def record_failed(
        self, *, run_id: str, round_index: int, stage: str, fingerprint: str,
        started_at: float, error: str, status: str = "failed", gates: Sequence[GateRow] = (),
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
        gates
            The gate runs of a re-check that failed (`insert_gates`), recorded with the row.
        """
        finished = time.time()
        with self.connect() as con:
            con.execute("BEGIN")
            insert_gates(con, run_id=run_id, round_index=round_index, stage=stage,
                         fingerprint=fingerprint, gates=gates)
            con.execute(
                f"INSERT INTO stages ({STAGE_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, NULL, NULL)",
                [run_id, round_index, stage, fingerprint, status, started_at, finished,
                 finished - started_at, error],
            )
            con.execute("COMMIT")

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
            discarded = self._recorded_kinds(con, run_id, fingerprint)
            con.execute("BEGIN")
            con.execute(
                "UPDATE stages SET status = 'discarded', error = ? WHERE run_id = ?"
                " AND fingerprint = ? AND status = 'completed'", [reason, run_id, fingerprint],
            )
            con.execute(
                "DELETE FROM datasets WHERE run_id = ? AND fingerprint = ?", [run_id, fingerprint]
            )
            con.execute("COMMIT")
            self._refresh_views(con, discarded)

    def round_metrics(self, run_id: str, last_round: int) -> dict[tuple[int, str, str], float]:
        """Every metric the run recorded for rounds 0..`last_round`, as (round, stage, name) ->
        value: each stage's latest execution (a stage recomputed replaces its metrics).

        Parameters
        ----------
        run_id
            The run.
        last_round
            The last round read (later rounds of an earlier attempt are left out).
        """
        with self.connect(read_only=True) as con:  # writes nothing: `state` still holds
            rows = con.execute(
                "SELECT round, stage, name, value FROM metrics WHERE run_id = ? AND round <= ?",
                [run_id, last_round],
            ).fetchall()
        return {(r, stage, name): value for r, stage, name, value in rows}

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
