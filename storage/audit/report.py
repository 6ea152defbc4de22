"""`flywheel report RUN_ID`: one self-contained HTML page per run.

Plots (inline SVG drawn by `svg.py`, no scripts, nothing fetched): held-out accuracy per round
(overall and per level), the pass-rate histogram per round, the filter funnel, drop reasons,
and difficulty drift; under each plot the table it was drawn from. Everything comes from the
audit snapshot (`storage.audit.snapshot.open_run`), so the page and `flywheel audit` agree.
Importable without torch or Prefect.
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Any

import duckdb

from storage.audit.queries import (
    drift,
    drops,
    funnel,
    heldout_accuracy_metrics,
    labels,
    pass_rate_counts,
    round_promotions,
)
from storage.audit.snapshot import AuditError, Result, format_cell, open_run, run_config, run_status
from storage.audit.svg import bar_chart, line_chart

__all__ = ["AuditError", "build_report", "write_report"]

PASS_RATE_BINS = 10
_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1180px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ccc; }
.row { display: flex; flex-wrap: wrap; gap: 16px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; max-width: 420px; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; }
.note { color: #555; font-size: 12px; } details { margin: 8px 0; } pre { font-size: 11px; }
"""


def write_report(data_root: Path | str, run_id: str, out_dir: Path | str | None = None) -> Path:
    """Write `report.html` for the run into `out_dir` (default: the run's folder).

    The page is written to a temporary file next to it and renamed, so a reader never sees a
    partial page.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run.
    out_dir
        The folder to write into (created when missing); None: `<data-root>/runs/<run_id>`.

    Returns
    -------
    The path of the written `report.html`.

    Raises
    ------
    AuditError
        There is no catalog, or it has no such run (see `open_run`).
    """
    con = open_run(data_root, run_id)
    try:
        page = build_report(con, run_id)
    finally:
        con.close()
    folder = Path(out_dir) if out_dir is not None else Path(data_root) / "runs" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "report.html"
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(page, encoding="utf-8")
    temp.replace(path)
    return path


def _table(result: Result) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in result.columns)
    body = []
    for row in result.rows:
        cells = []
        for c in result.columns:
            value = row.get(c)
            text = (isinstance(value, str | list)
                    and not str(value).lstrip("-").replace(".", "").isdigit())
            cells.append(f'<td class="{"text" if text else ""}">{escape(format_cell(value))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in result.notes)
    rows = "".join(body) or f'<tr><td colspan="{len(result.columns)}">no rows</td></tr>'
    return f'{notes}<div class="scroll"><table><tr>{head}</tr>{rows}</table></div>'


def accuracy_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Held-out accuracy of the base model and of each round's candidate, overall and per level.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    A "base" row, then one row per evaluated round: overall accuracy, one `level_N` column
    per level, and whether the round promoted its candidate (None for the base row).
    """
    metrics = heldout_accuracy_metrics(con)
    promoted = round_promotions(con)
    rows: dict[str, dict[str, Any]] = {}
    for m in metrics:
        label = "base" if m["stage"] == "baseline" else str(m["round"])
        row = rows.setdefault(label, {"round": label, "promoted": promoted.get(m["round"])
                                      if m["stage"] == "evaluate" else None})
        column = "overall" if m["name"] == "accuracy" else m["name"].replace("accuracy_", "")
        row[column] = m["value"]
    levels = sorted({k for r in rows.values() for k in r if k.startswith("level_")},
                    key=lambda k: int(k.split("_")[1]))
    ordered = sorted(rows.values(), key=lambda r: -1 if r["round"] == "base" else int(r["round"]))
    return Result("held-out accuracy", ["round", "overall", *levels, "promoted"], ordered,
                  [("accuracy of greedy answers to the fixed held-out set; promoted: the candidate"
                    " replaced the incumbent")])


def pass_rate_histogram(con: duckdb.DuckDBPyConnection) -> Result:
    """Share of each round's judged problems per pass-rate bin (width 1/PASS_RATE_BINS).

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    One row per bin, labelled "[lo, hi)" (the last "[lo, hi]"), with `round_K` (problems in
    the bin) and `round_K_share` (of the round's judged problems) per round.
    """
    rows = pass_rate_counts(con, PASS_RATE_BINS)
    rounds = sorted({r["round"] for r in rows})
    totals = {k: sum(r["n"] for r in rows if r["round"] == k) for k in rounds}
    table = []
    for b in range(PASS_RATE_BINS):
        bounds = f"[{b / PASS_RATE_BINS:.1f}, {(b + 1) / PASS_RATE_BINS:.1f}"
        row: dict[str, Any] = {"pass_rate": bounds + (")" if b < PASS_RATE_BINS - 1 else "]")}
        for k in rounds:
            n = sum(r["n"] for r in rows if r["round"] == k and int(r["bin"]) == b)
            row[f"round_{k}"] = n
            row[f"round_{k}_share"] = n / totals[k] if totals[k] else None
        table.append(row)
    columns = ["pass_rate"] + [c for k in rounds for c in (f"round_{k}", f"round_{k}_share")]
    return Result("pass-rate histogram", columns, table,
                  ["problems per pass-rate bin (pass rate = mean reward over a problem's"
                   " rollouts)"])


def _figure(svg: str, result: Result) -> str:
    return f'<div class="row"><div>{svg}</div><div>{_table(result)}</div></div>'


def build_report(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The HTML page for the snapshot `con` of `run_id`.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    run_id
        The run, shown in the title.

    Returns
    -------
    A self-contained HTML document (inline CSS and SVG, no scripts), stamped with the
    current local time.
    """
    accuracy = accuracy_table(con)
    acc_labels = [r["round"] for r in accuracy.rows]
    acc_series = {c: [r.get(c) for r in accuracy.rows] for c in accuracy.columns[1:-1]}
    hist = pass_rate_histogram(con)
    rounds = [c for c in hist.columns if c.startswith("round_") and not c.endswith("_share")]
    funnel_result = funnel(con)
    f_labels = [str(r["round"]) for r in funnel_result.rows]
    f_steps = ["proposed", "valid", "novel", "judged", "kept", "trained"]
    drop_result = drops(con, examples=3)
    drift_result = drift(con)
    level_columns = [c for c in drift_result.columns if c.startswith("level_")]
    d_labels = [str(r["round"]) for r in drift_result.rows]
    label_result = labels(con)
    config = run_config(con)
    status = run_status(con)

    written = time.strftime("%Y-%m-%d %H:%M:%S")
    hist_series = {k.replace("_", " "): [r[f"{k}_share"] for r in hist.rows] for k in rounds}
    level_mix = {c.replace("_", " "): [r[c] for r in drift_result.rows] for c in level_columns}
    pass_rates = {"mean pass rate": [r["pass_rate_mean"] for r in drift_result.rows],
                  "kept: mean pass rate": [r["kept_pass_rate_mean"] for r in drift_result.rows],
                  "median pass rate": [r["pass_rate_p50"] for r in drift_result.rows]}
    sections = [
        f"<h1>Flywheel run <code>{escape(run_id)}</code></h1>",
        (f'<p class="note">status: {escape(str(status))}; written {written};'
         f" rounds in the catalog: {len(f_labels)}</p>"),
        ("<details><summary>run config</summary><pre>"
         + escape(json.dumps(config, indent=2)) + "</pre></details>"),
        "<h2>Held-out accuracy per round</h2>",
        _figure(line_chart(acc_labels, acc_series,
                           title="held-out accuracy (overall and per level)",
                           y_label="accuracy", y_max=1.0, percent=True), accuracy),
        "<h2>Pass-rate histogram per round</h2>",
        _figure(bar_chart([f"{b / PASS_RATE_BINS:.1f}" for b in range(PASS_RATE_BINS)],
                          hist_series, title="share of judged problems by pass rate",
                          y_label="share of problems",
                          x_title=f"pass rate (bins of width {1 / PASS_RATE_BINS:.1f}, labelled by"
                          " their lower edge)", percent=True), hist),
        "<h2>Filter funnel</h2>",
        _figure(bar_chart(f_labels, {s: [r[s] for r in funnel_result.rows] for s in f_steps},
                          title="proposed → valid → novel → judged → kept → trained",
                          y_label="problems"), funnel_result),
        "<h2>Drop reasons</h2>",
        '<div class="row">' + "".join(
            f"<div>{_drop_chart(drop_result, dataset, f_labels)}</div>"
            for dataset in ("proposals", "curriculum")) + "</div>" + _table(drop_result),
        "<h2>Difficulty drift</h2>",
        '<div class="row"><div>' + bar_chart(
            d_labels, level_mix, title="level mix of the round's problems", y_label="share",
            stacked=True, y_max=1.0, percent=True) + "</div><div>" + line_chart(
            d_labels, pass_rates, title="pass rate of the round's problems",
            y_label="pass rate", y_max=1.0) + "</div></div>"
        + _table(drift_result),
        "<h2>Pseudo-labels vs references</h2>",
        _table(label_result),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>flywheel run {escape(run_id)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def _drop_chart(result: Result, dataset: str, labels_: list[str]) -> str:
    rows = [r for r in result.rows if r["dataset"] == dataset]
    reasons = sorted({r["reason"] for r in rows})
    series = {reason: [next((r["count"] for r in rows
                             if r["reason"] == reason and str(r["round"]) == k), None)
                       for k in labels_] for reason in reasons}
    if not series:
        return f'<p class="note">no {dataset} dropped</p>'
    return bar_chart(labels_, series, title=f"dropped {dataset} by reason", y_label="count",
                     stacked=True)
