"""Rows of runs and of their rounds' promotion decisions (`runs`, `rounds`)."""

from __future__ import annotations

import time

from storage.catalog.connection import CatalogFile
from storage.catalog.schema import ROUNDS_REASON_COLUMN
from storage.fingerprint import stable_hash


class RunRecords(CatalogFile):
    """What the catalog records of runs: config, status, and each round's promotion decision."""

    def ensure_run(self, run_id: str, config_json: str, status: str = "running") -> None:
        """Record `run_id` with this config and status, adding its row on the first call.

        An existing row gets the new config, its hash, the status and the current time;
        `created_at` is kept.

        Parameters
        ----------
        run_id
            The run.
        config_json
            The run's config as JSON; its `stable_hash` is stored next to it.
        status
            "running" (a run starting), or "completed" (a resume that found every stage done,
            flows/run.py `resume_without_work`).
        """
        now = time.time()
        with self.connect() as con:
            row = con.execute("SELECT config_hash FROM runs WHERE run_id = ?", [run_id]).fetchall()
            if row:
                con.execute(
                    "UPDATE runs SET config_json = ?, config_hash = ?, updated_at = ?,"
                    " status = ? WHERE run_id = ?",
                    [config_json, stable_hash(config_json), now, status, run_id],
                )
            else:
                con.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                    [run_id, config_json, stable_hash(config_json), now, now, status],
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
            con.execute(ROUNDS_REASON_COLUMN)
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
