"""The round summary in Markdown that each round publishes as a Prefect artifact: its funnel,
drops and metrics, a pure function of the audit snapshot (`storage.audit.snapshot.open_run`)."""

from __future__ import annotations

import duckdb

from storage.audit.queries import drops, funnel
from storage.audit.snapshot import Result, clip, format_cell, result_from_sql


def _markdown_table(result: Result) -> str:
    head = "| " + " | ".join(result.columns) + " |"
    rule = "|" + "|".join("---" for _ in result.columns) + "|"
    body = ["| " + " | ".join(clip(format_cell(r.get(c)), 40).replace("|", "\\|")
                              for c in result.columns) + " |" for r in result.rows]
    return "\n".join([head, rule, *body])


def round_markdown(con: duckdb.DuckDBPyConnection, run_id: str, round_index: int) -> str:
    """Markdown for the Prefect UI: the round's funnel, drops and metrics (a pure function of
    the snapshot `con` from `open_run`).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    run_id
        The run, shown in the heading.
    round_index
        The round to summarise.

    Returns
    -------
    The Markdown document: a heading, then funnel, drops (up to two examples each) and
    metrics tables, ending in a newline.
    """
    parts = [f"# Flywheel run `{run_id}`, round {round_index}", "", "## Funnel", ""]
    parts.append(_markdown_table(funnel(con, round_index=round_index)))
    dropped = drops(con, round_index=round_index, examples=2)
    parts += ["", "## Drops", "", _markdown_table(dropped) if dropped.rows else "nothing dropped"]
    metrics = result_from_sql(
        con, "metrics", "SELECT stage, name, value FROM metrics WHERE round = ?"
        " AND name NOT LIKE 'curve/%' ORDER BY stage, name", [round_index])  # curve: the report
    parts += ["", "## Metrics", "", _markdown_table(metrics)]
    return "\n".join(parts) + "\n"
