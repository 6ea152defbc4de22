"""A run's catalog metrics as nested mappings, for a reader outside storage that needs every
figure of its rounds (the run's tracker, tasks/tracking.py), so SQL stays in storage:

    run_metrics(catalog, "demo")[1]["evaluate"]["accuracy"]       # 0.335
    run_metrics(catalog, "demo")[1]["train"]["curve/loss/10"]     # 2.31
"""

from __future__ import annotations

from storage.catalog import Catalog


def run_metrics(catalog: Catalog, run_id: str) -> dict[int, dict[str, dict[str, float]]]:
    """Every metric the run's stages recorded: round -> stage -> name -> value.

    A stage's metrics are those of its latest completed execution (the catalog replaces them
    when a stage of the same round runs again: `Catalog.record_completed`).

    Parameters
    ----------
    catalog
        The catalog.
    run_id
        The run.

    Returns
    -------
    Rounds in order; an empty mapping for a run without metrics.
    """
    out: dict[int, dict[str, dict[str, float]]] = {}
    for row in catalog.query("SELECT round, stage, name, value FROM metrics WHERE run_id = ?"
                             " ORDER BY round, stage, name", [run_id]):
        out.setdefault(row["round"], {}).setdefault(row["stage"], {})[row["name"]] = row["value"]
    return out
