"""The report's held-out accuracy tables: per evaluated model overall with its 95 % interval,
per level with n, and per task and level for a domain of several tasks (reasoning_gym). Each is
a `Result` over the audit snapshot (`storage.audit.snapshot.open_run`); storage/audit/report.py
draws and places them.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from storage.audit.queries import heldout_accuracy_metrics, round_promotions
from storage.audit.round_metrics import heldout_item_passes, item_interval, wilson_interval
from storage.audit.snapshot import Result, run_config


def accuracy_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Held-out accuracy of the base model and of each round's candidate, overall and per level.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    A "base" row, then one row per evaluated round: overall accuracy and its 95 % interval
    (`ci95_low`, `ci95_high`: the evaluate metrics `accuracy_low` / `_high`, or for a run
    evaluated before they were recorded the same interval computed from its evals), one
    `level_N` column per level, and whether the round promoted its candidate (None for the
    base row).
    """
    metrics = heldout_accuracy_metrics(con)
    promoted = round_promotions(con)
    rows: dict[str, dict[str, Any]] = {}
    renamed = {"accuracy": "overall", "accuracy_low": "ci95_low", "accuracy_high": "ci95_high"}
    for m in metrics:
        label = "base" if m["stage"] == "baseline" else str(m["round"])
        row = rows.setdefault(label, {"round": label, "promoted": promoted.get(m["round"])
                                      if m["stage"] == "evaluate" else None})
        row[renamed.get(m["name"], m["name"].replace("accuracy_", ""))] = m["value"]
    passes = _item_passes_by_model(con)
    for label, row in rows.items():
        if row.get("ci95_low") is None and passes.get(label):
            row["ci95_low"], row["ci95_high"] = item_interval(passes[label])
    levels = sorted({k for r in rows.values() for k in r if k.startswith("level_")},
                    key=lambda k: int(k.split("_")[1]))
    ordered = sorted(rows.values(), key=lambda r: model_order(r["round"]))
    return Result("held-out accuracy",
                  ["round", "overall", "ci95_low", "ci95_high", *levels, "promoted"], ordered,
                  ["accuracy on the fixed held-out set (one greedy answer per item, or with "
                   "evaluate.samples > 1 the mean over an item's samples: pass@1); ci95: its 95 %"
                   " interval over the items, drawn as the error bar; promoted: the candidate"
                   " replaced the incumbent"])


def _item_passes_by_model(con: duckdb.DuckDBPyConnection) -> dict[str, list[float]]:
    """Evaluated model -> its held-out items' pass fractions."""
    out: dict[str, list[float]] = {}
    for r in heldout_item_passes(con):
        out.setdefault(r["model"], []).append(r["passed"])
    return out


def level_accuracy_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Held-out accuracy per evaluated model and level, with n and its 95 % interval.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of model ("base" or the round of the candidate), level, n (items), samples (answers
    per item), correct (correct answers), accuracy (correct / (n * samples)), ci95_low and
    ci95_high (`item_interval` over the items: Wilson with one sample per item, a bootstrap
    over items with several).
    """
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in heldout_item_passes(con):
        groups.setdefault((r["model"], r["level"]), []).append(r)
    rows = []
    for (model, level), items in groups.items():
        answers = sum(r["samples"] for r in items)
        correct = round(sum(r["passed"] * r["samples"] for r in items))
        low, high = item_interval([r["passed"] for r in items])
        rows.append({"model": model, "level": level, "n": len(items),
                     "samples": max(r["samples"] for r in items), "correct": correct,
                     "accuracy": correct / answers, "ci95_low": low, "ci95_high": high})
    return Result("held-out accuracy per level",
                  ["model", "level", "n", "samples", "correct", "accuracy", "ci95_low",
                   "ci95_high"], rows,
                  ["n held-out items per level; ci95: the 95 % interval of the accuracy over"
                   " the items (Wilson score interval with one sample per item, a bootstrap over"
                   " items with several; with few items a level's accuracy moves by its width"
                   " from noise alone)"])


# `accuracy_task_<task>` (all levels) and `accuracy_task_<task>_level_<N>`, tasks/evaluate.py
_TASK_METRIC = re.compile(r"^accuracy_task_(.+?)(?:_level_(\d+))?$")


def model_order(model: str) -> int:
    """The sort key of an evaluated model's label: "base" first, then the rounds in order."""
    return -1 if model == "base" else int(model)


def task_accuracy_rows(metrics: list[dict[str, Any]], level_counts: list[dict[str, Any]],
                       per_level: int | None) -> list[dict[str, Any]]:
    """Rows of `task_accuracy_table` from the held-out accuracy metrics (`metrics`: round,
    stage, name, value), the held-out items per model and level (`level_counts`: model, level,
    n) and the run's `domain.heldout_per_level`.

    A task's n at a level is `per_level` when the level holds exactly `per_level` items per
    task (the held-out set has at most `per_level` per task and level, so the total tells);
    otherwise (a task space with fewer distinct items) it is unknown, and so is the interval.
    A task's "all" row sums its levels' n when every one is known.
    """
    accuracies: dict[tuple[str, str, int | None], float] = {}
    for m in metrics:
        match = _TASK_METRIC.match(m["name"])
        if match and m["stage"] in ("baseline", "evaluate"):
            model = "base" if m["stage"] == "baseline" else str(m["round"])
            level = int(match.group(2)) if match.group(2) else None
            accuracies[(model, match.group(1), level)] = m["value"]
    totals = {(r["model"], r["level"]): r["n"] for r in level_counts}
    tasks_at: dict[tuple[str, int], int] = {}
    for model, _, level in accuracies:
        if level is not None:
            tasks_at[(model, level)] = tasks_at.get((model, level), 0) + 1
    sizes: dict[tuple[str, str, int | None], int | None] = {}
    for model, task, level in accuracies:
        if level is not None:
            exact = per_level and totals.get((model, level)) == per_level * tasks_at[(model, level)]
            sizes[(model, task, level)] = per_level if exact else None
    for model, task, level in accuracies:
        if level is None:
            known = [n for (m_, t_, lv), n in sizes.items() if (m_, t_) == (model, task)]
            sizes[(model, task, None)] = sum(known) if known and None not in known else None
    rows = []
    for (model, task, level), accuracy in accuracies.items():
        n = sizes[(model, task, level)]
        correct = round(accuracy * n) if n is not None else None
        low, high = wilson_interval(correct, n) if n is not None else (None, None)
        rows.append({"model": model, "task": task, "level": "all" if level is None else level,
                     "n": n, "correct": correct, "accuracy": accuracy, "ci95_low": low,
                     "ci95_high": high})
    return sorted(rows, key=lambda r: (model_order(r["model"]), r["task"],
                                       r["level"] == "all", 0 if r["level"] == "all" else
                                       r["level"]))


def task_accuracy_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Held-out accuracy per evaluated model, task and level, for a domain of several tasks
    (the evaluate metrics `accuracy_task_*` that `flywheel status` shows), with n and the
    Wilson 95 % interval where n is known (`task_accuracy_rows`); no rows for other domains.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Rows of model ("base" or the round of the candidate), task, level (or "all"), n, correct,
    accuracy, ci95_low and ci95_high.
    """
    per_level = run_config(con).get("domain", {}).get("heldout_per_level")
    rows = task_accuracy_rows(heldout_accuracy_metrics(con), level_accuracy_table(con).rows,
                              per_level)
    return Result("held-out accuracy per task and level",
                  ["model", "task", "level", "n", "correct", "accuracy", "ci95_low",
                   "ci95_high"], rows,
                  ["n held-out items of the task at the level (domain.heldout_per_level; empty"
                   " where the task has fewer distinct items); ci95: the Wilson score interval"])
