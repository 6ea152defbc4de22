"""Catalog rows of stages one run shares with a new run (storage/fork.py copies their files)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from storage.catalog.connection import CatalogFile, insert_rows
from storage.catalog.schema import STAGE_COLUMNS
from storage.datasets import WrittenDataset


class ForkRecords(CatalogFile):
    """What the catalog records when a run's finished stages are given to a new run."""

    def has_rows(self, run_id: str) -> bool:
        """Whether any table holds a row of `run_id`."""
        if not self.path.exists():
            return False
        with self.connect(read_only=True) as con:
            return any(con.execute(f"SELECT 1 FROM {table} WHERE run_id = ? LIMIT 1",
                                   [run_id]).fetchall()
                       for table in ("runs", "stages", "datasets", "gates", "metrics", "rounds"))

    def record_fork(self, *, source: str, target: str, fingerprints: Collection[str],
                    outputs: Sequence[tuple[str, WrittenDataset]]) -> list[tuple[int, str, str]]:
        """Give `target` the completed stages of `source` with these fingerprints, in one
        transaction: their latest completed stage rows, gate rows and metrics as `source`
        recorded them, their datasets at the copies in `outputs` ((fingerprint, the copy) pairs),
        and the promotion decision of every round whose promote stage is among them.

        Parameters
        ----------
        source
            The run whose stages are shared.
        target
            The new run (no rows yet: storage/fork.py checks).
        fingerprints
            The stages shared, each completed in `source`.
        outputs
            The copies of the stages' files, written under `target`'s folder.

        Returns
        -------
        (round, stage, fingerprint) of every stage given, in the order `source` finished them.
        """
        shared = list(fingerprints)
        with self.connect() as con:
            stages = con.execute(
                f"SELECT {STAGE_COLUMNS} FROM (SELECT *, row_number() OVER (PARTITION BY"
                " fingerprint ORDER BY finished_at DESC) AS n FROM stages WHERE run_id = ?"
                " AND status = 'completed' AND list_contains(?, fingerprint)) WHERE n = 1"
                " ORDER BY finished_at", [source, shared]).fetchall()
            given = [(round_index, stage, fingerprint)
                     for _, round_index, stage, fingerprint, *_ in stages]
            where = {fingerprint: (round_index, stage) for round_index, stage, fingerprint in given}
            decided = [round_index for round_index, stage, _ in given if stage == "promote"]
            con.execute("BEGIN")
            insert_rows(con, "stages", [(target, *row[1:]) for row in stages])
            insert_rows(con, "datasets", [
                (target, *where[fingerprint], fingerprint, out.kind, self.relative(out.path),
                 out.rows, out.checksum) for fingerprint, out in outputs])
            con.execute(
                "INSERT INTO gates SELECT ? AS run_id, * EXCLUDE (run_id) FROM gates"
                " WHERE run_id = ? AND list_contains(?, fingerprint)", [target, source, shared])
            for round_index, stage in sorted(set(where.values())):
                con.execute(
                    "INSERT INTO metrics SELECT ? AS run_id, * EXCLUDE (run_id) FROM metrics"
                    " WHERE run_id = ? AND round = ? AND stage = ?",
                    [target, source, round_index, stage])
            if decided:
                con.execute(
                    "INSERT INTO rounds SELECT ? AS run_id, * EXCLUDE (run_id) FROM rounds"
                    " WHERE run_id = ? AND list_contains(?, round)", [target, source, decided])
            con.execute("COMMIT")
            self._refresh_views(con, {out.kind for _, out in outputs})
        return given
