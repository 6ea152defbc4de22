"""What `flywheel reverify` (tasks/reverify.py) reads from the catalog and records in it.

A re-judging starts from a run's *current* stages: per (round, stage) the latest completed
execution, with the fingerprints of its inputs (`current_stages`; the audit snapshot's
`current_files` takes the same ones). Its own files, under
`runs/<run_id>/reverify/<fingerprint12>/`, are recorded as `datasets` rows of stage `reverify`
and no `stages` row:

    datasets  ("demo", 1, "reverify", "3f2a...", "verdicts",
               "runs/demo/reverify/3f2a9c1b0d4e/verdicts.parquet", 256, "9c1f...")

So the run's own stage rows, its status (`flywheel status` reads the newest stage row), the
catalog's views and the audit views (both built from completed stage rows) and the crash
sweep (round folders only) never see a re-judging; `flywheel audit RUN --sql` finds the rows in
`datasets` (`WHERE stage = 'reverify'`).
"""

from __future__ import annotations

import json
from typing import Any

from storage.catalog.connection import CatalogFile
from storage.datasets import WrittenDataset

REVERIFY_STAGE = "reverify"


def current_stages(catalog: CatalogFile, run_id: str) -> dict[tuple[int, str], dict[str, Any]]:
    """The latest completed execution of every (round, stage) of a run.

    Parameters
    ----------
    catalog
        The data root's catalog (it must exist).
    run_id
        The run.

    Returns
    -------
    (round, stage) -> {"fingerprint": ..., "inputs": {input name: fingerprint}}.
    """
    rows = catalog.query(
        "SELECT round, stage, arg_max(fingerprint, finished_at) AS fingerprint,"
        " arg_max(inputs_json, finished_at) AS inputs_json FROM stages"
        " WHERE run_id = ? AND status = 'completed' GROUP BY round, stage", [run_id])
    return {(r["round"], r["stage"]): {"fingerprint": r["fingerprint"],
                                       "inputs": json.loads(r["inputs_json"] or "{}")}
            for r in rows}


def reverified_datasets(catalog: CatalogFile, run_id: str,
                        fingerprint: str) -> dict[str, dict[str, Any]] | None:
    """The recorded files of a re-judging, as `completed_datasets` gives a stage's.

    Parameters
    ----------
    catalog
        The data root's catalog (it must exist).
    run_id
        The run.
    fingerprint
        The re-judging's fingerprint.

    Returns
    -------
    Kind -> {"path", "rows", "checksum"}; None when none is recorded. The files themselves are
    not checked here (`storage.recovery.check_recorded`).
    """
    rows = catalog.query(
        "SELECT kind, path, rows, checksum FROM datasets WHERE run_id = ? AND fingerprint = ?"
        " AND stage = ?", [run_id, fingerprint, REVERIFY_STAGE])
    return {r["kind"]: {"path": catalog.resolve(r["path"]), "rows": r["rows"],
                        "checksum": r["checksum"]} for r in rows} or None


def record_reverified(catalog: CatalogFile, *, run_id: str, round_index: int, fingerprint: str,
                      outputs: list[WrittenDataset]) -> None:
    """Record the files of a re-judging (written before, so a row means its file is whole),
    replacing the rows of an earlier one with this fingerprint, in one transaction.

    Parameters
    ----------
    catalog
        The data root's catalog.
    run_id
        The run.
    round_index
        The round re-judged.
    fingerprint
        The re-judging's fingerprint.
    outputs
        The files written (`write_atomic`, `DatasetWriter`).
    """
    with catalog.connect() as con:
        con.execute("BEGIN")
        con.execute("DELETE FROM datasets WHERE run_id = ? AND fingerprint = ? AND stage = ?",
                    [run_id, fingerprint, REVERIFY_STAGE])
        for out in outputs:
            con.execute("INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, round_index, REVERIFY_STAGE, fingerprint, out.kind,
                         catalog.relative(out.path), out.rows, out.checksum])
        con.execute("COMMIT")
