"""Rows of gate runs on datasets (`gates`), and the stage rows a gate decides: the completed row
of a stage that passes on a re-check, and the newest completed dataset of a kind (the baseline a
drift check compares with). A stage that failed its gate is found by `recorded_stage`
(storage/catalog/stages.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import duckdb

from storage.catalog.connection import CatalogFile, insert_rows
from storage.catalog.schema import STAGE_COLUMNS

GateRow = tuple[str, bool, str]  # (dataset kind, passed, the gate's result JSON)


def insert_gates(con: duckdb.DuckDBPyConnection, *, run_id: str, round_index: int,
                 stage: str, fingerprint: str, gates: Sequence[GateRow]) -> None:
    """Insert the rows of a stage's gate runs on `con`, stamped with the current time: the
    stage's own transaction, so its gates and its stage row are recorded together.

    Parameters
    ----------
    con
        A writable connection, inside the transaction that records the stage.
    run_id
        The run.
    round_index
        The round of the stage whose outputs were checked.
    stage
        The stage's name.
    fingerprint
        The stage's fingerprint.
    gates
        One (dataset kind, passed, the gate's full result as JSON) per gate run.
    """
    checked = time.time()
    insert_rows(con, "gates", [(run_id, round_index, stage, fingerprint, kind, success,
                                result_json, checked) for kind, success, result_json in gates])


class GateRecords(CatalogFile):
    """What the catalog records of gates, and the stage rows their results decide."""

    def record_gate_passed(self, *, run_id: str, round_index: int, stage: str,
                           fingerprint: str, started_at: float,
                           gates: Sequence[GateRow] = ()) -> None:
        """A gate_failed stage whose stored outputs now pass (thresholds fixed): add its
        completed row, with the rows of the gates that passed; its datasets and metrics rows
        are already there.

        The new row copies round, stage, rows and inputs from the stage's latest gate_failed
        row that has inputs; nothing is added when there is none. The views are refreshed.

        Parameters
        ----------
        run_id
            The run.
        round_index
            The stage's round.
        stage
            The stage's name.
        fingerprint
            The stage's fingerprint.
        started_at
            When the re-check started (`time.time()`).
        gates
            The gate runs of the re-check (`insert_gates`).
        """
        finished = time.time()
        with self.connect() as con:
            con.execute("BEGIN")
            insert_gates(con, run_id=run_id, round_index=round_index, stage=stage,
                         fingerprint=fingerprint, gates=gates)
            con.execute(
                f"INSERT INTO stages ({STAGE_COLUMNS}) SELECT run_id, round, stage, fingerprint,"
                " 'completed', ?, ?, ? - ?, rows, NULL, inputs_json, outputs FROM stages"
                " WHERE run_id = ? AND fingerprint = ?"
                " AND status = 'gate_failed' AND inputs_json IS NOT NULL"
                " ORDER BY finished_at DESC LIMIT 1",
                [started_at, finished, finished, started_at, run_id, fingerprint],
            )
            con.execute("COMMIT")
            self._refresh_views(con, self._recorded_kinds(con, run_id, fingerprint))

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
