"""Per-round figures the report charts and `flywheel status` prints: held-out accuracy metrics
(overall, per level, per task), promotion decisions and pass-rate counts per bin, and the 95 %
intervals of held-out figures (`item_interval`), which the evaluate stage records and the report
draws, so both read one definition.

    heldout_accuracy_metrics(con)   # [{"round": 0, "stage": "baseline", "name": "accuracy",
                                    #   "value": 0.42}, ...]
    item_interval([1.0, 0.0, 1.0, 1.0])      # (0.300..., 0.954...): Wilson, one sample per item
    item_interval([0.75, 0.25, 1.0, 0.5])    # bootstrap over items: pass fractions of 4 samples

The unit of every interval is the held-out item: an item's several samples are answers to the
same question, not independent trials, so an interval over (item, sample) rows would be too
narrow by up to a factor sqrt(samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from storage.audit.snapshot import fetch

Z95 = 1.96  # the two-sided 95 % normal quantile of the Wilson interval
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: the same evals give the same interval in the stage and the report


def wilson_interval(correct: float, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """The Wilson score interval of `correct` successes in `n` trials (95 % for z = 1.96);
    (None, None) for n = 0. Unlike p ± z·sqrt(p(1-p)/n) it stays inside [0, 1] and is not
    empty at p = 0 or 1, which held-out sets of a few dozen items per level often give."""
    if n == 0:
        return None, None
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float | None, float | None]:
    """The percentile 95 % interval of the mean of `values` (one per item), resampling items
    with replacement from a fixed seed; (None, None) without values. Used for per-item figures
    that are not pass/fail: a pass fraction over several samples, a pass@k estimate, or the
    paired difference candidate - incumbent of an item."""
    import numpy as np

    if not values:
        return None, None
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def item_interval(scores: Sequence[float]) -> tuple[float | None, float | None]:
    """The 95 % interval of the mean of per-item scores in [0, 1] (module docstring).

    Pass/fail scores (one sample per item, or an item's majority answer) get the Wilson
    interval of the passes among the items; fractional ones (an item's pass fraction over
    several samples, its pass@k estimate) the bootstrap over items (`bootstrap_interval`).
    (None, None) without items."""
    if all(score in (0.0, 1.0) for score in scores):
        return wilson_interval(sum(scores), len(scores))
    return bootstrap_interval(scores)


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


def heldout_sample_metrics(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The figures the evaluate stage records when it samples several answers per held-out item
    (`evaluate.samples` > 1, tasks/evaluate.py): `samples`, `pass_at_K` and `maj_at_K` with
    their `_low` / `_high` interval and maj@N's `_unjudged` and `_no_vote` counts.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, stage ("baseline" or "evaluate"), name and value, ordered by round and name;
    none for a run evaluated with one answer per item.
    """
    return fetch(con, "SELECT round, stage, name, value FROM metrics WHERE stage IN"
                 " ('baseline', 'evaluate') AND (name = 'samples' OR starts_with(name, 'pass_at_')"
                 " OR starts_with(name, 'maj_at_')) ORDER BY round, stage, name")


def promotion_test_metrics(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The paired test the promote stage ran (`[promote] test`, tasks/promote.py): per round
    its `accuracy_difference`, `_low`, `_high` and `p_value`; none with test = "none".

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, name and value, ordered by round and name.
    """
    return fetch(con, "SELECT round, name, value FROM metrics WHERE stage = 'promote' AND name IN"
                 " ('accuracy_difference', 'accuracy_difference_low', 'accuracy_difference_high',"
                 " 'p_value') ORDER BY round, name")


# The base model's checkpoint (its evals are the baseline's) and each checkpoint's items.
_ITEMS_SQL = """
    WITH base AS (SELECT arg_max(fingerprint, finished_at) AS fingerprint FROM stages
                  WHERE stage = 'base' AND status = 'completed'),
    items AS (SELECT checkpoint, min(round) AS round, level, item_id, count(*) AS samples,
                     avg(CAST(correct AS DOUBLE)) AS passed
              FROM evals GROUP BY checkpoint, level, item_id)"""


def heldout_item_passes(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per evaluated model and held-out item: its level, samples and pass fraction.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of model ("base" for the base model, else the round whose candidate was evaluated),
    level, item_id, samples (its eval rows: `evaluate.samples`) and passed (the share of them
    correct: 0 or 1 with one sample), ordered by model (base first), level and item.
    """
    return fetch(con, _ITEMS_SQL + """
        SELECT CASE WHEN i.checkpoint = (SELECT fingerprint FROM base) THEN 'base'
                    ELSE CAST(i.round AS VARCHAR) END AS model,
               i.level, i.item_id, i.samples, i.passed
        FROM items i
        ORDER BY i.checkpoint IS NOT DISTINCT FROM (SELECT fingerprint FROM base) DESC,
                 i.round, i.level, i.item_id""")


def paired_item_differences(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per decided round with a candidate: each held-out item both the candidate and the
    incumbent answered, and the difference of their pass fractions (candidate - incumbent).

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of round, item_id and difference (in [-1, 1]: -1, 0 or 1 with one sample per item),
    ordered by round and item.
    """
    return fetch(con, _ITEMS_SQL + """
        SELECT r.round, c.item_id, c.passed - i.passed AS difference
        FROM rounds r JOIN items c ON c.checkpoint = r.candidate
        JOIN items i ON i.checkpoint = r.incumbent AND i.item_id = c.item_id
        ORDER BY r.round, c.item_id""")


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


# The benchmark files' figures (`[evaluate] benchmarks`, tasks/benchmarks.py): the metrics
# `benchmark/<name>/<figure>` of the baseline (the base model) and of each round's candidate.
BENCHMARK_SQL = (
    "SELECT round, stage, name, value FROM metrics WHERE run_id = ?"
    " AND stage IN ('baseline', 'evaluate') AND name LIKE 'benchmark/%'"
    " ORDER BY round, stage, name")


def benchmark_figures(catalog: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's benchmark metrics (round, stage, name, value), oldest first.

    Parameters
    ----------
    catalog
        A `storage.catalog.Catalog` (its `query` reads without writing).
    run_id
        The run.
    """
    return catalog.query(BENCHMARK_SQL, [run_id])
