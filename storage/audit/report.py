"""`flywheel report RUN_ID`: one self-contained HTML page per run.

Plots (inline SVG drawn by matplotlib in `charts.py`, no scripts, nothing fetched): held-out
accuracy per round (overall with its 95 % interval drawn as an error bar, and per level; per
level with its n and 95 % interval; per task and level for a domain of several tasks,
reasoning_gym; pass@k and maj@k with their intervals when `[evaluate] samples` > 1), training
(the loss curve of each round, stage timings, promotion decisions with the candidate -
incumbent difference and its interval, a promotion whose interval holds 0 marked "inside the
noise", and checkpoint folders), the pass-rate histogram per round (never-solved problems
counted apart, so they do not dwarf the rest), the filter funnel, drop reasons, and difficulty
drift; under each plot the table it was drawn from. Every interval's unit is the held-out item
(storage/audit/round_metrics.py).
Everything comes from the audit snapshot (`storage.audit.snapshot.open_run`), so the page and
`flywheel audit` agree. The page's HTML comes from the jinja2 templates in
storage/audit/templates/ (autoescaped: a question or a path in a table cannot inject markup);
the same snapshot gives the same page byte for byte (no write time on it: the file has one).
Importable without torch, Prefect, matplotlib or jinja2 (each is imported when a page is built).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import duckdb

from storage.audit.charts import bar_chart, curve_chart, line_chart
from storage.audit.judge_quality import judge_lines
from storage.audit.operations import (
    pass_rate_counts_apart_from_zero,
    stage_timings,
    training_curves,
)
from storage.audit.queries import (
    drift,
    drops,
    funnel,
    labels,
)
from storage.audit.report_accuracy import (
    accuracy_table,
    level_accuracy_table,
    model_order,
    task_accuracy_table,
)
from storage.audit.report_noise import (
    promotion_chart,
    promotion_noise_table,
    sample_figures_chart,
    sample_figures_table,
)
from storage.audit.round_metrics import wilson_interval
from storage.audit.snapshot import AuditError, Result, format_cell, open_run, run_config, run_status
from storage.paths import run_folder

__all__ = ["AuditError", "build_report", "wilson_interval", "write_report"]

PASS_RATE_BINS = 10


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
    folder = Path(out_dir) if out_dir is not None else run_folder(data_root, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "report.html"
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(page, encoding="utf-8")
    temp.replace(path)
    return path


@cache
def _templates() -> Any:
    """The report's jinja2 environment: templates from the package (so an installed wheel
    finds them), autoescaped, with the cell formatting of `flywheel audit`."""
    from jinja2 import Environment, PackageLoader
    from markupsafe import Markup, escape

    env = Environment(loader=PackageLoader("storage.audit", "templates"), autoescape=True,
                      keep_trailing_newline=True)
    env.filters["cell"] = format_cell
    # a long column name may wrap after its underscores, so a wide table stays on the page
    env.filters["breakable"] = lambda name: Markup(str(escape(name)).replace("_", "_<wbr>"))
    env.tests["text_cell"] = lambda value: (isinstance(value, str | list) and not str(
        value).lstrip("-").replace(".", "").isdigit())
    return env


def _parts() -> Any:
    """The macros of templates/parts.html.j2 (table, figure, charts_row), callable here."""
    return _templates().get_template("parts.html.j2").module


def _safe(html: str) -> Any:
    """Mark HTML this module wrote (a chart's SVG, a fixed heading) as safe for the templates;
    never for user data, which the templates escape."""
    from markupsafe import Markup

    return Markup(html)


def _table(result: Result) -> Any:
    return _parts().table(result)


def pass_rate_histogram(con: duckdb.DuckDBPyConnection) -> Result:
    """Share of each round's judged problems per pass-rate bin (width 1/PASS_RATE_BINS), the
    never-solved ones (pass rate 0) in a row of their own.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    A "0 (never solved)" row, then one row per bin, labelled "(0.0, 0.1)", "[lo, hi)" (the
    last "[lo, hi]"), with `round_K` (problems in it) and `round_K_share` (of the round's
    judged problems) per round.
    """
    rows = pass_rate_counts_apart_from_zero(con, PASS_RATE_BINS)
    rounds = sorted({r["round"] for r in rows})
    totals = {k: sum(r["n"] for r in rows if r["round"] == k) for k in rounds}
    table = []
    for b in range(-1, PASS_RATE_BINS):
        bounds = "(0.0" if b == 0 else f"[{b / PASS_RATE_BINS:.1f}"
        bounds += f", {(b + 1) / PASS_RATE_BINS:.1f}" + (")" if b < PASS_RATE_BINS - 1 else "]")
        row: dict[str, Any] = {"pass_rate": "0 (never solved)" if b < 0 else bounds}
        for k in rounds:
            n = sum(r["n"] for r in rows if r["round"] == k and int(r["bin"]) == b)
            row[f"round_{k}"] = n
            row[f"round_{k}_share"] = n / totals[k] if totals[k] else None
        table.append(row)
    columns = ["pass_rate"] + [c for k in rounds for c in (f"round_{k}", f"round_{k}_share")]
    return Result("pass-rate histogram", columns, table,
                  ["problems per pass-rate bin (pass rate = mean reward over a problem's"
                   " rollouts); never-solved problems (pass rate 0) are counted in the first row"
                   " and left out of the chart, where they would dwarf the other bins"])


def stage_timings_table(con: duckdb.DuckDBPyConnection) -> Result:
    """Seconds each stage of each round took (its latest execution), and the round's total.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    One row per round: a column of seconds per stage in the order the stages ran, `total`,
    and `not completed` naming any stage whose latest execution did not complete.
    """
    timings = stage_timings(con)
    stages = list(dict.fromkeys(r["stage"] for r in timings))
    rows: dict[int, dict[str, Any]] = {}
    for r in timings:
        row = rows.setdefault(r["round"], {"round": r["round"], "total": 0.0,
                                           "not completed": ""})
        row[r["stage"]] = r["seconds"]
        row["total"] += r["seconds"] or 0.0
        if r["status"] != "completed":
            row["not completed"] = " ".join(filter(None, [row["not completed"],
                                                          f"{r['stage']} ({r['status']})"]))
    return Result("stage timings", ["round", *stages, "total", "not completed"],
                  [rows[k] for k in sorted(rows)],
                  ["seconds per stage (the catalog's stage rows; a stage found done took"
                   " the time of the execution that computed it)"])


def curve_table(con: duckdb.DuckDBPyConnection) -> Result:
    """The train stages' curves, one row per round and logged step (loss, learning rate,
    gradient norm)."""
    points: dict[tuple[int, int], dict[str, Any]] = {}
    for r in training_curves(con):
        points.setdefault((r["round"], r["step"]), {"round": r["round"], "step": r["step"]})[
            r["key"]] = r["value"]
    return Result("training curve", ["round", "step", "loss", "learning_rate", "grad_norm"],
                  [points[k] for k in sorted(points)],
                  ["every logged training step (all passes of a round on one step axis)"])


def training_section(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The report's training part: the loss curve per round, stage timings, promotions (the
    candidate - incumbent difference with its interval, drawn too)."""
    curve = curve_table(con)
    series = {f"round {k}": [(r["step"], r["loss"]) for r in curve.rows
                             if r["round"] == k and r.get("loss") is not None]
              for k in sorted({r["round"] for r in curve.rows})}
    chart = (curve_chart(series, title="training loss per round", y_label="loss")
             if series else '<p class="note">no training curve recorded</p>')
    return [
        _safe("<h2>Training</h2>"),
        _safe(f'<div class="row"><div>{chart}</div><div><details><summary>the curve\'s points'
              f" ({len(curve.rows)})</summary>{_table(curve)}</details></div></div>"),
        _safe("<h3>Stage timings</h3>"), _table(stage_timings_table(con)),
        _safe("<h3>Promotion decisions</h3>"), _promotions(con),
    ]


def _promotions(con: duckdb.DuckDBPyConnection) -> Any:
    table = promotion_noise_table(con)
    chart = promotion_chart(table)
    return _table(table) if chart is None else _figure(chart, table)


def _figure(svg: str, result: Result) -> Any:
    return _parts().figure(_safe(svg), result)


def accuracy_section(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The report's held-out part: accuracy per round (chart with the overall accuracy's 95 %
    interval as error bars, and table), then per level with n and its interval, pass@k and
    maj@k when evaluated with several samples, and per task for a domain of several tasks."""
    accuracy = accuracy_table(con)
    lines = [c for c in accuracy.columns[1:-1] if not c.startswith("ci95_")]
    series = {c: [r.get(c) for r in accuracy.rows] for c in lines}
    bars = [(r["ci95_low"], r["ci95_high"]) if r.get("ci95_low") is not None else None
            for r in accuracy.rows]
    parts = [
        _safe("<h2>Held-out accuracy per round</h2>"),
        _figure(line_chart([r["round"] for r in accuracy.rows], series,
                           title="held-out accuracy (overall and per level)",
                           y_label="accuracy", y_max=1.0, percent=True,
                           intervals={"overall": bars}), accuracy),
        _safe("<h3>Per level, with n and a 95 % interval</h3>"),
        _table(level_accuracy_table(con)),
    ]
    figures = sample_figures_table(con)
    if figures.rows:
        parts += [_safe("<h3>Several samples per item: pass@k and maj@k, with a 95 % interval"
                        "</h3>"),
                  _figure(sample_figures_chart(figures), figures)]
    by_task = task_accuracy_table(con)
    if not by_task.rows:
        return parts
    models = sorted({r["model"] for r in by_task.rows}, key=model_order)
    overall = {(r["model"], r["task"]): r["accuracy"] for r in by_task.rows if r["level"] == "all"}
    task_series = {task: [overall.get((model, task)) for model in models]
                   for task in sorted({r["task"] for r in by_task.rows})}
    return [*parts, _safe("<h3>Per task and level, with n and a 95 % interval</h3>"),
            _figure(line_chart(models, task_series, title="held-out accuracy per task",
                               y_label="accuracy", y_max=1.0, percent=True), by_task)]


VERIFIER_RATES = ("canary_problems", "verifier_false_positive_rate",
                  "verifier_false_positive_low", "verifier_false_positive_high",
                  "verifier_false_negative_rate", "verifier_false_negative_low",
                  "verifier_false_negative_high", "label_reward_precision", "label_reward_recall")


def verifier_rates_table(con: duckdb.DuckDBPyConnection) -> Result:
    """The verify stage's error rates per round (tasks/verifier_rates.py): the verifier's false
    positives and negatives on the canaries with Wilson 95 % intervals, and the majority labels'
    precision and recall against the references; no rows when no round recorded any."""
    names = ", ".join(f"'{name}'" for name in VERIFIER_RATES)
    by_round: dict[int, dict[str, Any]] = {}
    for round_index, name, value in con.execute(
            f"SELECT round, name, value FROM metrics WHERE stage = 'verify' AND name IN ({names})"
            " ORDER BY round").fetchall():
        by_round.setdefault(round_index, {"round": round_index})[name] = value
    return Result("verifier error rates per round", ["round", *VERIFIER_RATES],
                  list(by_round.values()),
                  ["false positive: a canary answer rewarded 1 that its known answer does not "
                   "reward; false negative: the reverse (verify.canary); label precision and "
                   "recall: the majority labels' rewards against the references'"])


def build_report(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The HTML page for the snapshot `con` of `run_id` (templates/report.html.j2).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    run_id
        The run, shown in the title.

    Returns
    -------
    A self-contained HTML document (inline CSS and SVG, no scripts), the same for the same
    snapshot.
    """
    hist = pass_rate_histogram(con)
    rounds = [c for c in hist.columns if c.startswith("round_") and not c.endswith("_share")]
    funnel_result = funnel(con)
    f_labels = [str(r["round"]) for r in funnel_result.rows]
    f_steps = ["proposed", "valid", "novel", "judged", "kept", "trained"]
    drop_result = drops(con, examples=3)
    drift_result = drift(con)
    level_columns = [c for c in drift_result.columns if c.startswith("level_")]
    d_labels = [str(r["round"]) for r in drift_result.rows]
    hist_series = {k.replace("_", " "): [r[f"{k}_share"] for r in hist.rows[1:]]
                   for k in rounds}  # the never-solved row is in the table only
    level_mix = {c.replace("_", " "): [r[c] for r in drift_result.rows] for c in level_columns}
    pass_rates = {"mean pass rate": [r["pass_rate_mean"] for r in drift_result.rows],
                  "kept: mean pass rate": [r["kept_pass_rate_mean"] for r in drift_result.rows],
                  "median pass rate": [r["pass_rate_p50"] for r in drift_result.rows]}
    return _templates().get_template("report.html.j2").render(
        run_id=run_id, status=str(run_status(con)), rounds=len(f_labels),
        config=json.dumps(run_config(con), indent=2),
        accuracy=accuracy_section(con), training=training_section(con),
        histogram=hist, histogram_chart=_safe(bar_chart(
            [f"{b / PASS_RATE_BINS:.1f}" for b in range(PASS_RATE_BINS)], hist_series,
            title="share of judged problems by pass rate (p > 0)", y_label="share of problems",
            x_title=f"pass rate (bins of width {1 / PASS_RATE_BINS:.1f}, labelled by their lower"
            " edge)", percent=True)),
        funnel=funnel_result, funnel_chart=_safe(bar_chart(
            f_labels, {s: [r[s] for r in funnel_result.rows] for s in f_steps},
            title="proposed → valid → novel → judged → kept → trained", y_label="problems")),
        drops=drop_result,
        drop_charts=[_safe(_drop_chart(drop_result, dataset, f_labels))
                     for dataset in ("proposals", "curriculum")],
        drift=drift_result, drift_charts=[_safe(bar_chart(
            d_labels, level_mix, title="level mix of the round's problems", y_label="share",
            stacked=True, y_max=1.0, percent=True)), _safe(line_chart(
            d_labels, pass_rates, title="pass rate of the round's problems",
            y_label="pass rate", y_max=1.0))],
        labels=labels(con), verifier_rates=verifier_rates_table(con),
        judge_lines=judge_lines(con))  # scores, agreement, position bias (judge_quality.py)


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
