"""Per-round figures the report charts and `flywheel status` prints: held-out accuracy metrics
(overall, per level, per task), promotion decisions and pass-rate counts per bin.

    heldout_accuracy_metrics(con)   # [{"round": 0, "stage": "baseline", "name": "accuracy",
                                    #   "value": 0.42}, ...]
"""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.snapshot import fetch


def heldout_accuracy_metrics(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The held-out accuracy metrics of the base model and of each round's candidate.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, stage ("baseline" or "evaluate"), name ("accuracy", or
    "accuracy_level_N" per difficulty level) and value, ordered by round.
    """
    return fetch(con, "SELECT round, stage, name, value FROM metrics WHERE stage IN"
                 " ('baseline', 'evaluate') AND name LIKE 'accuracy%' ORDER BY round")


def round_promotions(con: duckdb.DuckDBPyConnection) -> dict[int, bool | None]:
    """Whether each decided round's candidate replaced the incumbent.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Round -> `rounds.promoted`, for every round with a recorded decision.
    """
    return {r["round"]: r["promoted"] for r in fetch(con, "SELECT round, promoted FROM rounds")}


def pass_rate_counts(con: duckdb.DuckDBPyConnection, bins: int) -> list[dict[str, Any]]:
    """Judged curriculum problems per round and pass-rate bin.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    bins
        How many bins of equal width split [0, 1]; a pass rate of 1 falls in the last one.

    Returns
    -------
    Rows of round, bin (the bin's index, 0 to bins - 1, as a float) and n (problems with a
    pass rate in it), ordered by round, then bin; a bin without problems has no row.
    """
    return fetch(con, f"""
        SELECT round, least(floor(pass_rate * {int(bins)}), {int(bins) - 1}) AS bin, count(*) AS n
        FROM curriculum WHERE pass_rate IS NOT NULL GROUP BY ALL ORDER BY ALL""")


# Held-out accuracy per task and per task and level, as the evaluate stage records it for a
# domain of several tasks (reasoning_gym): `accuracy_task_<task>` and
# `accuracy_task_<task>_level_<N>` metrics of the baseline (round 0: the base model) and of each
# round's candidate.
TASK_ACCURACY_SQL = (
    "SELECT round, stage, name, value FROM metrics WHERE run_id = ?"
    " AND stage IN ('baseline', 'evaluate') AND name LIKE 'accuracy_task_%'"
    " ORDER BY round, stage, name")


def task_accuracy(catalog: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's per-task held-out accuracy metrics (round, stage, name, value), oldest first.

    Parameters
    ----------
    catalog
        A `storage.catalog.Catalog` (its `query` reads without writing).
    run_id
        The run.
    """
    return catalog.query(TASK_ACCURACY_SQL, [run_id])
