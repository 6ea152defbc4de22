"""`flywheel audit`, `report` and `validate`: reading a run's stored data back, as tables, an
HTML report, or the data gates re-run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows import exit_codes
from flows.cli_common import DataRoot, check_run_id, fail


def audit(
    run_id: Annotated[str, typer.Argument(help="the run to audit")],
    query: Annotated[str | None, typer.Argument(
        help="funnel | drops | lineage ID | drift | labels | verifier | samples VIEW")] = None,
    args: Annotated[list[str] | None, typer.Argument(
        help="lineage: a train row / rollout / problem / proposal id or a checkpoint; "
             "samples: a view")] = None,
    sql: Annotated[str | None, typer.Option(
        "--sql", help="run this SQL over the views instead")] = None,
    where: Annotated[str | None, typer.Option("--where", help="samples: a SQL condition")] = None,
    limit: Annotated[int, typer.Option("--limit", help="samples: most rows shown")] = 20,
    round_index: Annotated[int | None, typer.Option("--round", help="only this round")] = None,
    rows: Annotated[bool, typer.Option(
        "--rows", help="lineage CHECKPOINT: list every row")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table | json | csv")] = "table",
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Audit a run's data: funnel, drops, lineage, drift, labels, samples, or --sql."""
    check_run_id(run_id)
    from storage.audit.answer import answer
    from storage.audit.snapshot import FORMATS, AuditError, open_run, render

    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    try:
        con = open_run(data_root, run_id)
        result = answer(con, query, args or [], sql_text=sql, where=where, limit=limit,
                        round_index=round_index, rows=rows)
    except AuditError as exc:
        fail(str(exc))
    typer.echo(render(result, fmt))


def report(
    run_id: Annotated[str, typer.Argument(help="the run to report on")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="folder (default: the run's folder)")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Write a self-contained HTML report of a run: plots and the tables behind them."""
    check_run_id(run_id)
    from storage.audit.report import write_report
    from storage.audit.snapshot import AuditError

    try:
        path = write_report(data_root, run_id, out)
    except AuditError as exc:
        fail(str(exc))
    typer.echo(f"report written to {path}")


def validate(
    run_id: Annotated[str, typer.Argument(help="the run whose stored outputs to check")],
    round_index: Annotated[int | None, typer.Option("--round", help="only this round")] = None,
    stage: Annotated[str | None, typer.Option(
        "--stage", help="only this stage (e.g. verify)")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="thresholds from this config instead of the run's recorded one")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    # Two adjacent literals, not a wrapped docstring: `flywheel --help` would show the break
    ("""Re-run the data gates on a run's stored outputs and print the report (exit 5 on a """
     """failure).""")
    check_run_id(run_id)
    from configs import ConfigError
    from configs.presets import config_file
    from validators.summary import ValidateError, validate_run

    try:
        ok = validate_run(data_root, run_id, round_index=round_index, stage=stage,
                          config_path=config_file(config), echo=typer.echo)
    except (ValidateError, ConfigError) as exc:
        fail(str(exc))
    if not ok:
        raise typer.Exit(exit_codes.VALIDATE_FAILED)
