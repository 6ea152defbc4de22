"""The report's view of the noise in its held-out figures: each promotion's candidate - incumbent
difference with its interval, marked "inside the noise" when the interval holds 0, and the
several-sample figures (pass@k, maj@k) with theirs. Tables, and charts drawn by
storage/audit/charts.py; storage/audit/report.py places them on the page.

    promotion_noise_table(con).rows
    -> [{"round": 1, "promoted": True, "incumbent_accuracy": 0.2, "candidate_accuracy": 0.24,
         "difference": 0.04, "ci_low": -0.01, "ci_high": 0.09,
         "interval": "report: paired bootstrap over items, 95 %", "noise": "inside the noise",
         "reason": "accuracy 0.240 >= 0.200 - 0.000", "checkpoint": ".../checkpoint-..."}]

A round whose promote stage ran a paired test (`[promote] test`) shows that test's difference
and interval (its two-sided 1 - 2 * alpha interval, the one the decision read); otherwise the
report computes a 95 % paired bootstrap over the items both checkpoints answered (the pass
fraction of an item's samples, so an item counts once however many samples it has).
"""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.charts import line_chart, nice_max
from storage.audit.operations import promotion_decisions
from storage.audit.report_accuracy import model_order
from storage.audit.round_metrics import (
    bootstrap_interval,
    heldout_sample_metrics,
    paired_item_differences,
    promotion_test_metrics,
)
from storage.audit.snapshot import Result

INSIDE, BEYOND = "inside the noise", "beyond the noise"
_FIGURE_SUFFIXES = ("_low", "_high", "_unjudged", "_no_vote")


def round_differences(con: duckdb.DuckDBPyConnection) -> dict[int, dict[str, Any]]:
    """Round -> difference, ci_low, ci_high and interval (what computed it), for every decided
    round with a candidate whose items can be paired (module docstring)."""
    tested: dict[int, dict[str, float]] = {}
    for m in promotion_test_metrics(con):
        tested.setdefault(m["round"], {})[m["name"]] = m["value"]
    paired: dict[int, list[float]] = {}
    for r in paired_item_differences(con):
        paired.setdefault(r["round"], []).append(r["difference"])
    out = {}
    for round_index in sorted(set(tested) | set(paired)):
        test = tested.get(round_index, {})
        if {"accuracy_difference_low", "accuracy_difference_high"} <= set(test):
            out[round_index] = {"difference": test.get("accuracy_difference"),
                                "ci_low": test["accuracy_difference_low"],
                                "ci_high": test["accuracy_difference_high"],
                                "interval": "promote test ([promote] test, 1 - 2 alpha)"}
        elif paired.get(round_index):
            differences = paired[round_index]
            low, high = bootstrap_interval(differences)
            out[round_index] = {"difference": sum(differences) / len(differences),
                                "ci_low": low, "ci_high": high,
                                "interval": "report: paired bootstrap over items, 95 %"}
    return out


def promotion_noise_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Each decided round's promotion decision with the candidate - incumbent difference, its
    interval and whether the interval holds 0 (`noise`: "inside the noise" / "beyond the
    noise"; None where no items pair), its reason and the candidate's checkpoint."""
    differences = round_differences(con)
    rows = []
    for row in promotion_decisions(con):
        found = differences.get(row["round"], {})
        noise = None
        if found.get("ci_low") is not None and found.get("ci_high") is not None:
            noise = INSIDE if found["ci_low"] <= 0 <= found["ci_high"] else BEYOND
        rows.append({**row, **found, "noise": noise})
    noisy = [str(r["round"]) for r in rows if r["promoted"] and r["noise"] == INSIDE]
    notes = ["difference: candidate - incumbent held-out accuracy on the items both answered;"
             " ci: its interval (interval says which); inside the noise: the interval holds 0,"
             " so the difference may be noise",
             "checkpoint: the folder the round's train stage wrote (its candidate)"]
    if noisy:
        notes.insert(0, f"promoted inside the noise: round {', '.join(noisy)}")
    return Result("promotions", ["round", "promoted", "incumbent_accuracy", "candidate_accuracy",
                                 "difference", "ci_low", "ci_high", "interval", "noise", "reason",
                                 "checkpoint"], rows, notes)


def promotion_chart(table: Result) -> str | None:
    """The difference per decided round with its interval as an error bar, the points coloured
    by promoted (beyond the noise), promoted inside the noise, and rejected; None without any
    difference to draw."""
    rows = [r for r in table.rows if r.get("difference") is not None]
    if not rows:
        return None
    labels = [str(r["round"]) for r in rows]
    kinds = {"promoted": lambda r: r["promoted"] and r["noise"] != INSIDE,
             "promoted inside the noise": lambda r: r["promoted"] and r["noise"] == INSIDE,
             "rejected": lambda r: not r["promoted"]}
    series = {name: [r["difference"] if keep(r) else None for r in rows]
              for name, keep in kinds.items()}
    intervals = {name: [(r["ci_low"], r["ci_high"]) if keep(r) and r["ci_low"] is not None
                        else None for r in rows] for name, keep in kinds.items()}
    reach = max(abs(v) for r in rows for v in (r["difference"], r["ci_low"], r["ci_high"])
                if v is not None)
    top = nice_max(reach)
    return line_chart(labels, series, title="candidate - incumbent held-out accuracy",
                      y_label="difference", y_min=-top, y_max=top, percent=True,
                      intervals=intervals, connect=False)


def sample_figures_table(con: duckdb.DuckDBPyConnection) -> Result:
    """pass@k and maj@k of each evaluated model with their 95 % intervals (tasks/evaluate.py);
    no rows for a run evaluated with one answer per item.

    Returns
    -------
    Rows of model ("base" or the round of the candidate), samples, figure ("pass@2",
    "maj@4", ...), value, ci95_low, ci95_high and, for maj@n, unjudged (answers left out of
    the vote) and no_vote (items without a judged answer, counted as not correct).
    """
    by_model: dict[str, dict[str, float]] = {}
    for m in heldout_sample_metrics(con):
        model = "base" if m["stage"] == "baseline" else str(m["round"])
        by_model.setdefault(model, {})[m["name"]] = m["value"]
    rows = []
    for model in sorted(by_model, key=model_order):
        values = by_model[model]
        names = sorted((n for n in values if n != "samples" and not n.endswith(_FIGURE_SUFFIXES)),
                       key=lambda n: (n.startswith("maj"), int(n.rsplit("_", 1)[1])))
        for name in names:
            rows.append({"model": model, "samples": values.get("samples"),
                         "figure": name.replace("_at_", "@"), "value": values[name],
                         "ci95_low": values.get(f"{name}_low"),
                         "ci95_high": values.get(f"{name}_high"),
                         "unjudged": values.get(f"{name}_unjudged"),
                         "no_vote": values.get(f"{name}_no_vote")})
    return Result("held-out pass@k and maj@k",
                  ["model", "samples", "figure", "value", "ci95_low", "ci95_high", "unjudged",
                   "no_vote"], rows,
                  ["pass@k: the unbiased estimator 1 - C(n-c, k)/C(n, k) over an item's n"
                   " samples, c correct, averaged over items; maj@k: items whose majority answer"
                   " over k samples (the judged answers vote; the mean over an item's k-subsets)"
                   " is correct; unjudged: answers left out of maj@n's vote; no_vote: items"
                   " without a judged answer (counted as not correct); ci95: a bootstrap over"
                   " items (Wilson for maj@n, pass or fail per item)"])


def sample_figures_chart(table: Result) -> str:
    """Each figure (pass@k, maj@n) per evaluated model, with its interval as an error bar."""
    models = list(dict.fromkeys(r["model"] for r in table.rows))
    figures = list(dict.fromkeys(r["figure"] for r in table.rows))
    at = {(r["model"], r["figure"]): r for r in table.rows}
    series = {f: [at[(m, f)]["value"] if (m, f) in at else None for m in models]
              for f in figures}
    intervals = {f: [(at[(m, f)]["ci95_low"], at[(m, f)]["ci95_high"])
                     if (m, f) in at and at[(m, f)]["ci95_low"] is not None else None
                     for m in models] for f in figures}
    return line_chart(models, series, title="held-out pass@k and maj@k", y_label="share of items",
                      y_max=1.0, percent=True, intervals=intervals)
