"""The per-round summary that `flywheel status` and `run` print: one row per round from the
catalog's metrics (the funnel, held-out accuracy with its interval, the decision), the lines under
the table (the verifier's error rates; pass@k and maj@k with several samples per item), and the
cells of the table.
"""

from __future__ import annotations

import re
from typing import Any

from storage.audit.snapshot import format_cell
from storage.catalog import Catalog

# The per-round summary of `flywheel status` and `run`: each field of a `round_summary` row ->
# the label of its table column. JSON (`status --json`) prints the fields; only the table shows
# the labels.
SUMMARY_FIELDS = {"round": "round", "proposed": "proposed", "valid": "valid", "kept": "kept",
                  "pass_at_1_train": "pass@1(train)", "train_rows": "train rows",
                  "held_out_accuracy": "held-out acc", "held_out_interval": "held-out 95%",
                  "promoted": "promoted", "decision": "decision"}
SUMMARY_COLUMNS = list(SUMMARY_FIELDS.values())
_AT_K = re.compile(r"(pass|maj)_at_\d+")  # tasks/evaluate.py's pass@k and maj@k

JUDGE_COST = ("prompts", "calls", "seconds", "reply_tokens", "reused")
JUDGED_STAGES = (("", "verify"), ("train_", "train"), ("eval_", "evaluate"))  # field prefix, stage

_METRIC = {
    "proposed": ("synthesize", "proposed"),
    "valid": ("synthesize", "valid"),
    "novel": ("synthesize", "novel"),
    "kept": ("curate", "kept"),
    "pass_at_1_train": ("curate", "pass_at_1"),
    "train_rows": ("curate", "train_rows"),
    "held_out_accuracy": ("evaluate", "accuracy"),
    # the verifier's error rates on the round's canaries, with their 95 % intervals, and the
    # majority labels' precision and recall against references (tasks/verifier_rates.py)
    "verifier_fp": ("verify", "verifier_false_positive_rate"),
    "verifier_fp_low": ("verify", "verifier_false_positive_low"),
    "verifier_fp_high": ("verify", "verifier_false_positive_high"),
    "verifier_fn": ("verify", "verifier_false_negative_rate"),
    "verifier_fn_low": ("verify", "verifier_false_negative_low"),
    "verifier_fn_high": ("verify", "verifier_false_negative_high"),
    "label_reward_precision": ("verify", "label_reward_precision"),
    "label_reward_recall": ("verify", "label_reward_recall"),
    "promoted": ("promote", "promoted"),
    # what an LLM judge cost the round's verify and evaluate stages (tasks/judgements.py)
    **{f"{prefix}judge_{name}": (stage, f"judge_{name}") for prefix, stage in JUDGED_STAGES
       for name in JUDGE_COST},
}


def round_summary(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """One row per round with the funnel and held-out accuracy, from the catalog's metrics, and
    the promotion decision's reason from `rounds` (None when the round has no recorded reason).

    Parameters
    ----------
    catalog
        The catalog (read directly, not through a snapshot).
    run_id
        The run.

    Returns
    -------
    Rows keyed by the fields of `SUMMARY_FIELDS` (and `novel`, `model` and
    `held_out_samples`, `held_out_at_k`: `heldout_figures`), in round order:
    `round` is the round's index and `model` "candidate"; first, when the baseline was
    evaluated, the base model's row (`round` None, `model` "base") with only its held-out
    figures. A metric a round has not recorded is None; `promoted` is a bool once recorded.

    Raises
    ------
    FileNotFoundError
        There is no catalog at the data root.
    """
    rows = catalog.query(
        "SELECT round, stage, name, value FROM metrics WHERE run_id = ? ORDER BY round", [run_id]
    )
    reasons = {r["round"]: r.get("reason") for r in catalog.query(
        "SELECT * FROM rounds WHERE run_id = ?", [run_id])}
    by_round: dict[int, dict[tuple[str, str], float]] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[(r["stage"], r["name"])] = r["value"]
    baseline = [r["value"] for r in rows if r["stage"] == "baseline" and r["name"] == "accuracy"]
    out = []
    if baseline:
        out.append({"round": None, "model": "base", **dict.fromkeys(_METRIC),
                    "held_out_accuracy": baseline[0], "decision": None,
                    **heldout_figures(by_round[0], "baseline")})
    for round_index, metrics in sorted(by_round.items()):
        row: dict[str, Any] = {"round": round_index, "model": "candidate"}
        for column, key in _METRIC.items():
            row[column] = metrics.get(key)
        if row["promoted"] is not None:
            row["promoted"] = bool(row["promoted"])
        row["decision"] = reasons.get(round_index)
        row.update(heldout_figures(metrics, "evaluate"))
        out.append(row)
    return out


def heldout_figures(metrics: dict[tuple[str, str], float], stage: str) -> dict[str, Any]:
    """The held-out accuracy's 95 % interval (`held_out_interval`: [low, high]) and, with
    n samples per item, pass@n and maj@n with theirs in one line (`held_out_samples`, e.g.
    "pass@4 0.620 [0.550, 0.690]; maj@4 0.480 [0.410, 0.550], 2 unjudged left out": in the
    JSON rows only, the table stays narrow) and every k's figures (`held_out_at_k`:
    `at_k_figures`, the lines under the table), from `stage`'s metrics (tasks/evaluate.py); None
    where not recorded."""
    samples = metrics.get((stage, "samples"))
    parts = []
    for name in ([] if samples is None else [f"pass_at_{int(samples)}", f"maj_at_{int(samples)}"]):
        if (stage, name) not in metrics:
            continue
        low, high = metrics.get((stage, f"{name}_low")), metrics.get((stage, f"{name}_high"))
        figure = name.replace("_at_", "@")
        part = f"{figure} {format_cell(metrics[(stage, name)])}"
        if low is not None and high is not None:
            part += f" [{format_cell(low)}, {format_cell(high)}]"
        if (unjudged := metrics.get((stage, f"{name}_unjudged"))):
            part += f", {int(unjudged)} unjudged left out"
        parts.append(part)
    low, high = metrics.get((stage, "accuracy_low")), metrics.get((stage, "accuracy_high"))
    return {"held_out_interval": None if low is None or high is None else [low, high],
            "held_out_samples": "; ".join(parts) or None,
            "held_out_at_k": at_k_figures(metrics, stage)}


def with_interval(value: float | None, low: float | None, high: float | None) -> str:
    """A figure and its 95 % interval as the status lines print them: "0.212 [0.183, 0.244]",
    the value alone without both ends, "-" without a value."""
    if value is None:
        return "-"
    interval = "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"
    return f"{value:.3f}{interval}"


def at_k_figures(metrics: dict[tuple[str, str], float], stage: str) -> dict[str, list] | None:
    """Every pass@k and maj@k `stage` recorded (tasks/evaluate.py: k = 1, 2, 4, ..., n), each
    as [value, low, high] under its metric name, pass@k first, k ascending; None with one
    sample per item."""
    names = [name for s, name in metrics if s == stage and _AT_K.fullmatch(name)]
    if not names:
        return None
    names.sort(key=lambda name: (name.startswith("maj"), int(name.rsplit("_", 1)[1])))
    return {name: [metrics[(stage, name)], metrics.get((stage, f"{name}_low")),
                   metrics.get((stage, f"{name}_high"))] for name in names}


def at_k_lines(rows: list[dict[str, Any]]) -> list[str]:
    """pass@k and maj@k of every evaluated model with several samples per item (the rows'
    `held_out_at_k`), with their 95 % intervals over items, as the lines `flywheel status`
    prints under its table; none with one sample per item."""
    measured = [r for r in rows if r.get("held_out_at_k")]
    if not measured:
        return []
    names = list(dict.fromkeys(name for r in measured for name in r["held_out_at_k"]))

    def cell(figure: list | None) -> str:
        return "-" if figure is None else with_interval(*figure)

    lines = ["held-out with several samples per item: pass@k and maj@k, 95 % intervals over items",
             "  " + "  ".join([f"{'round':>5}", *(f"{n.replace('_at_', '@'):<20}" for n in names)])]
    for r in measured:
        label = "base" if r["model"] == "base" else str(r["round"])
        cells = [f"{cell(r['held_out_at_k'].get(n)):<20}" for n in names]
        lines.append("  " + "  ".join([f"{label:>5}", *cells]).rstrip())
    return lines


def verifier_rate_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The verifier's error rates per round (`round_summary` rows: canary false positives and
    negatives with their 95 % intervals, the majority labels' precision and recall), as the
    lines `flywheel status` prints under its table; none when no round recorded any."""
    fields = ("verifier_fp", "verifier_fn", "label_reward_precision", "label_reward_recall")
    measured = [r for r in rows if r["model"] == "candidate" and any(
        r.get(f) is not None for f in fields)]
    if not measured:
        return []

    def rate(row: dict[str, Any], name: str) -> str:
        return with_interval(row.get(name), row.get(f"{name}_low"), row.get(f"{name}_high"))

    lines = ["verifier error rates per round (false positives / negatives on the canaries, "
             "majority labels vs references)",
             f"  {'round':>5}  {'false pos':<20}  {'false neg':<20}  label precision  recall"]
    for r in measured:
        lines.append(f"  {r['round']:>5}  {rate(r, 'verifier_fp'):<20}  "
                     f"{rate(r, 'verifier_fn'):<20}  {rate(r, 'label_reward_precision'):>15}  "
                     f"{rate(r, 'label_reward_recall'):>6}")
    return lines


def judge_cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What an LLM judge cost per round and stage (`round_summary` rows), as the lines `flywheel
    status` prints under its table; none when no stage judged with one."""
    lines = []
    for r in rows:
        for prefix, stage in JUDGED_STAGES:
            cost = [r.get(f"{prefix}judge_{name}") for name in JUDGE_COST]
            if cost[0] is None or r["model"] != "candidate":
                continue
            prompts, calls, seconds, tokens, reused = cost
            lines.append(f"  {r['round']:>5}  {stage:<8}  {prompts:>7.0f}  {calls:>5.0f}  "
                         f"{seconds:>7.1f}  {tokens:>12.0f}  {reused:>6.0f}")
    if not lines:
        return []
    return ["judge cost per round (prompts sent, backend calls, seconds, reply tokens, prompts "
            "answered by stored judgements)",
            f"  {'round':>5}  {'stage':<8}  prompts  calls  seconds  reply tokens  reused",
            *lines]


def summary_cells(row: dict[str, Any]) -> list[str]:
    """A `round_summary` row as the cells of its table, in `SUMMARY_COLUMNS` order; the base
    model's row shows "base" as its round."""
    return ["base" if field == "round" and row["model"] == "base" else format_cell(row[field])
            for field in SUMMARY_FIELDS]
