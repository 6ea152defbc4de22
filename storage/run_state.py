"""What a run's result is, independent of how it got there: for comparing a resumed run with
an uninterrupted one (tests/flows, bench/chaos.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.catalog import Catalog
from storage.paths import run_folder


def completed_state(data_root: Path, run_id: str) -> dict[str, Any]:
    """Per completed stage its fingerprint and row count, per recorded file its row count and
    checksum (keyed by round, stage and kind: paths differ between data roots), and the names
    in the run's folder (nothing half written, duplicated or stale may be left over).

    Parameters
    ----------
    data_root
        The data root.
    run_id
        The run.

    Returns
    -------
    {"stages": [...], "files": [...], "names": [...]}, each sorted.
    """
    catalog = Catalog(data_root)
    stages = catalog.query(
        "SELECT round, stage, fingerprint, rows FROM stages"
        " WHERE run_id = ? AND status = 'completed'", [run_id])
    files = catalog.query(
        "SELECT d.round, d.stage, d.kind, d.rows, d.checksum FROM datasets d JOIN stages s"
        " ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint"
        " WHERE d.run_id = ? AND s.status = 'completed'", [run_id])
    run_dir = run_folder(data_root, run_id)
    names = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name != "run.lock")
    return {
        "stages": sorted((s["round"], s["stage"], s["fingerprint"], s["rows"]) for s in stages),
        "files": sorted((f["round"], f["stage"], f["kind"], f["rows"], f["checksum"])
                        for f in files),
        "names": names,
    }
