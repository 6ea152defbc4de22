"""Audit queries over the catalog. Fast to import: DuckDB only, no torch, Prefect or GX."""

from __future__ import annotations

from typing import Any

from flywheel.storage.catalog import Catalog

SUMMARY_COLUMNS = ["round", "proposed", "valid", "kept", "pass@1(train)", "train rows",
                   "held-out acc", "promoted"]

_METRIC = {
    "proposed": ("synthesize", "proposed"),
    "valid": ("synthesize", "valid"),
    "novel": ("synthesize", "novel"),
    "kept": ("curate", "kept"),
    "pass@1(train)": ("curate", "pass_at_1"),
    "train rows": ("curate", "train_rows"),
    "held-out acc": ("evaluate", "accuracy"),
    "promoted": ("promote", "promoted"),
}


def round_summary(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """One row per round with the funnel and held-out accuracy, from the catalog's metrics."""
    rows = catalog.query(
        "SELECT round, stage, name, value FROM metrics WHERE run_id = ? ORDER BY round", [run_id]
    )
    by_round: dict[int, dict[tuple[str, str], float]] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[(r["stage"], r["name"])] = r["value"]
    baseline = [r["value"] for r in rows if r["stage"] == "baseline" and r["name"] == "accuracy"]
    out = []
    if baseline:
        out.append({"round": "base", **{c: None for c in SUMMARY_COLUMNS[1:]}, "held-out acc": baseline[0]})
    for round_index, metrics in sorted(by_round.items()):
        row: dict[str, Any] = {"round": round_index}
        for column, key in _METRIC.items():
            row[column] = metrics.get(key)
        if row["promoted"] is not None:
            row["promoted"] = bool(row["promoted"])
        out.append(row)
    return out


def format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 1 or not value.is_integer() else str(int(value))
    return str(value)
