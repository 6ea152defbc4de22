"""`flywheel audit`, `report` and `validate`: reading a run's stored data back, as tables, an
HTML report, or the data gates re-run."""

from __future__ import annotations

import signal
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
    limit: Annotated[int | None, typer.Option(
        "--limit", help="samples and --sql: the most rows printed (default 20 for samples, 1000 "
                        "for --sql); how many more there were is said")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="stop the query after this many seconds (exit 124)")] = 60.0,
    round_index: Annotated[int | None, typer.Option("--round", help="only this round")] = None,
    rows: Annotated[bool, typer.Option(
        "--rows", help="lineage CHECKPOINT: list every row")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table | json | csv")] = "table",
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Audit a run's data: funnel, drops, lineage, drift, labels, samples, or --sql."""
    check_run_id(run_id)
    from storage.audit.answer import QueryTimeout, print_answer
    from storage.audit.snapshot import AuditError, open_run

    # Ctrl-C is KeyboardInterrupt even where the shell started us ignoring SIGINT (a
    # background job of a script), as `run` and `resume` also take it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        con = open_run(data_root, run_id)
        try:
            print_answer(con, query, args or [], fmt=fmt, timeout=timeout, echo=typer.echo,
                         sql_text=sql, where=where, limit=limit, round_index=round_index,
                         rows=rows)
        finally:
            con.close()  # removes the snapshot's spill folder, if it spilled
    except QueryTimeout as exc:
        fail(str(exc), exit_codes.TIMED_OUT)
    except AuditError as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C: print_answer stopped the query first
        fail("interrupted by SIGINT (Ctrl-C): the query was stopped", exit_codes.INTERRUPTED)


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
    fmt: Annotated[str, typer.Option("--format", help="text | json")] = "text",
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    # Two adjacent literals, not a wrapped docstring: `flywheel --help` would show the break
    ("""Compare every stored output with its recorded checksum and re-run the data gates on """
     """them (exit 5 when a file is damaged or a gate fails).""")
    check_run_id(run_id)
    if fmt not in ("text", "json"):
        fail(f"--format {fmt!r}: use text or json")
    from configs import ConfigError
    from configs.presets import config_file
    from validators.summary import ValidateError, validate_run

    try:
        found = validate_run(data_root, run_id, round_index=round_index, stage=stage,
                             config_path=config_file(config))
    except (ValidateError, ConfigError) as exc:
        fail(str(exc))
    if fmt == "json":
        from storage.json_output import to_json

        typer.echo(to_json(found.record()))
    else:
        for line in found.lines():
            typer.echo(line)
    if not found.ok:
        raise typer.Exit(exit_codes.VALIDATE_FAILED)
