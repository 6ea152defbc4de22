"""Audit queries of how a run went, for the report's training and evaluation sections: stage
timings, training curves, promotion decisions, pass rates with the never-solved problems apart
(the held-out items per model and level: storage/audit/round_metrics.py). Each is a pure
function of the audit snapshot (`storage.audit.snapshot.open_run`), like those of
`storage.audit.queries`.

    training_curves(con)   # [{"round": 0, "step": 10, "key": "loss", "value": 2.41}, ...]
"""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.snapshot import fetch


def stage_timings(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The latest execution of every (round, stage) of the run, in the order they ran.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, stage, status, seconds and rows (what the stage wrote), ordered by round,
    then start time.
    """
    return fetch(con, """
        SELECT round, stage, arg_max(status, finished_at) AS status,
               arg_max(seconds, finished_at) AS seconds, arg_max(rows, finished_at) AS rows,
               max(started_at) AS started_at
        FROM stages GROUP BY round, stage ORDER BY round, started_at""")


def training_curves(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The train stages' curves (metrics `curve/<key>/<step>`, tasks/train.py).

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, step, key (loss, learning_rate, grad_norm) and value, ordered by round,
    step, key.
    """
    return fetch(con, """
        SELECT round, CAST(split_part(name, '/', 3) AS INTEGER) AS step,
               split_part(name, '/', 2) AS key, value
        FROM metrics WHERE stage = 'train' AND name LIKE 'curve/%' ORDER BY ALL""")


def promotion_decisions(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Each decided round: the accuracies compared, the decision, its reason and the folder of
    the candidate's checkpoint (None when the round trained none).

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, promoted, incumbent_accuracy, candidate_accuracy, reason, checkpoint.
    """
    return fetch(con, """
        SELECT r.round, r.promoted, r.incumbent_accuracy, r.candidate_accuracy, r.reason,
               f.path AS checkpoint
        FROM rounds r LEFT JOIN current_files f
          ON f.round = r.round AND f.stage = 'train' AND f.kind = 'checkpoint'
        ORDER BY r.round""")


def pass_rate_counts_apart_from_zero(con: duckdb.DuckDBPyConnection,
                                     bins: int) -> list[dict[str, Any]]:
    """Like `pass_rate_counts`, but problems with a pass rate of exactly 0 (never solved) in a
    bin of their own, -1, so they do not fill the first bin.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    bins
        How many bins of equal width split (0, 1].

    Returns
    -------
    Rows of round, bin (-1 for pass rate 0, else 0 to bins - 1, as a float) and n.
    """
    return fetch(con, f"""
        SELECT round, CASE WHEN pass_rate = 0 THEN -1
                           ELSE least(floor(pass_rate * {int(bins)}), {int(bins) - 1}) END AS bin,
               count(*) AS n
        FROM curriculum WHERE pass_rate IS NOT NULL GROUP BY ALL ORDER BY ALL""")
