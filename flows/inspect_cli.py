"""`flywheel status`, `runs`, `checkpoint` and `catalog snapshot`: what a data root's runs did,
where their models are, and a copy of the catalog to query while a run writes. None of them
imports torch or Prefect. Their `--json` outputs share one shape (storage/json_output.py).

    flywheel catalog snapshot [--out FILE] [--data-root DIR]
        -> <data-root>/snapshots/catalog.duckdb     (its path, one line: `duckdb -readonly $(...)`)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli_common import DataRoot, check_run_id, fail, open_catalog, print_summary


def status(
    run_id: Annotated[str, typer.Argument(help="the run to show")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Show a run's stages and summary; exit 1, 4, 130 or 143: it stopped; 5: files damaged."""
    check_run_id(run_id)
    from flows.execution import log_path
    from flows.status_view import (
        effective_status,
        print_benchmarks,
        print_round_lines,
        print_task_accuracy,
        stop_line,
    )
    from storage.audit.round_summary import round_summary
    from storage.catalog import Catalog
    from storage.lock import live_holder

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        fail(f"no catalog at {catalog.path} (check --data-root)")
    run_status = catalog.run_status(run_id)
    if run_status is None:
        fail(f"unknown run id {run_id!r} in {catalog.path} (`flywheel runs` lists them)")
    stages = catalog.stage_rows(run_id)
    run_status = effective_status(run_status, stages[-1]["status"] if stages else None,
                                  live=live_holder(data_root, run_id) is not None)
    line, code = stop_line(run_id, run_status, stages, log_path(data_root, run_id))
    if run_status == "completed":  # its files still as recorded? (hashing the changed ones)
        from flows import exit_codes
        from storage.integrity import check_run, damaged_line

        damaged = check_run(catalog, run_id, checksums="modified").damaged
        if damaged:
            run_status, code = "damaged", exit_codes.VALIDATE_FAILED
            line = damaged_line(run_id, damaged)
    if as_json:
        from storage.json_output import to_json

        payload = {"run_id": run_id, "status": run_status, "exit_status": code, "stopped": line,
                   "stages": stages, "rounds": round_summary(catalog, run_id)}
        typer.echo(to_json(payload))
        raise typer.Exit(code)
    typer.echo(line or f"run {run_id}: {run_status}")  # the first line says what to do
    width = max([10, *(len(s["stage"]) for s in stages)])  # train-proposer, rationalize
    for s in stages:
        typer.echo(f"  round {s['round']:>3}  {s['stage']:<{width}} {s['status']:<11} "
                   f"{s['fingerprint'][:12]}  "
                   f"rows={s['rows'] if s['rows'] is not None else '-':<6} "
                   f"{s['seconds']:.1f}s" + (f"  {_clip(s['error'])}" if s["error"] else ""))
    print_summary(data_root, run_id)
    print_task_accuracy(catalog, run_id, typer.echo)  # reasoning_gym: per task and level
    print_benchmarks(catalog, run_id, typer.echo)  # [evaluate] benchmarks: per file and round
    print_round_lines(catalog, run_id, typer.echo)  # pass@k, verifier rates, judge cost
    raise typer.Exit(code)


def _clip(error: str) -> str:
    from flows.status_view import one_line

    return one_line(error, 100)


def runs(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """List the data root's runs: status, rounds, best held-out accuracy, promoted checkpoint."""
    from flows.status_view import effective_status
    from storage.integrity import check_run
    from storage.json_output import to_json
    from storage.lock import live_holder
    from storage.runs import runs_overview

    catalog = open_catalog(data_root)
    overview = runs_overview(catalog)
    for row in overview:
        row["status"] = effective_status(row["status"], row.pop("last_stage_status"),
                                         live=live_holder(data_root, row["run_id"]) is not None)
        if row["status"] == "completed" and check_run(  # as `status` says (changed files hashed)
                catalog, row["run_id"], checksums="modified").damaged:
            row["status"] = "damaged"
    if as_json:
        typer.echo(to_json([{**r, "incumbent": r["incumbent"] and r["incumbent"].record()}
                            for r in overview]))
        return
    _print_runs(overview)


def _print_runs(overview: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from storage.audit.snapshot import format_cell

    table = Table(box=None, header_style="bold")
    for column in ("run", "status", "rounds", "best acc", "incumbent", "acc", "checkpoint",
                   "updated"):
        table.add_column(column, justify="left" if column in ("run", "status", "checkpoint")
                         else "right", overflow="fold")
    for r in overview:
        winner = r["incumbent"]
        round_name = "-" if winner is None else "base" if winner.round is None else winner.round
        table.add_row(r["run_id"], r["status"], f"{r['decided_rounds']}/{r['planned_rounds']}",
                      format_cell(r["best_accuracy"]), format_cell(round_name),
                      format_cell(winner and winner.accuracy), (winner and winner.path) or "-",
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(r["updated_at"])))
    if not overview:
        typer.echo("no runs yet (`flywheel run` starts one)")
        return
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def checkpoint(
    run_id: Annotated[str, typer.Argument(help="the run")],
    round_index: Annotated[int | None, typer.Option(
        "--round", help="the incumbent after this round (default: the last decided one)")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Print the folder of the run's promoted checkpoint (its incumbent), for scripts."""
    check_run_id(run_id)
    from storage.runs import UndecidedRound, incumbent

    catalog = open_catalog(data_root)
    if catalog.run_status(run_id) is None:
        fail(f"unknown run id {run_id!r} in {catalog.path} (`flywheel runs` lists them)")
    try:
        winner = incumbent(catalog, run_id, round_index)
    except UndecidedRound as exc:
        fail(str(exc))
    if winner is None or winner.path is None:
        fail(f"run {run_id!r} has no checkpoint yet"
             + (f" at round {round_index}" if round_index is not None else ""))
    if not Path(winner.path).is_dir():
        fail(f"run {run_id!r}: its checkpoint {winner.path} is missing "
             f"(`flywheel resume {run_id}` recomputes it)")
    typer.echo(winner.path)


catalog_app = typer.Typer(no_args_is_help=True,
                          help="The data root's catalog: a copy to query while a run writes.")


@catalog_app.command("snapshot")
def snapshot(
    out: Annotated[Path | None, typer.Option(
        "--out", help="the file to write (default: <data-root>/snapshots/catalog.duckdb)")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Copy the catalog to a read-only file for `duckdb -readonly FILE`, safe while a run
    writes (opening catalog.duckdb itself is not); prints the copy's path."""
    from storage.audit.catalog_copy import SnapshotUnwritable, snapshot_catalog

    open_catalog(data_root)  # no catalog: one line
    try:
        typer.echo(snapshot_catalog(data_root, out))
    except SnapshotUnwritable as exc:
        fail(str(exc))
