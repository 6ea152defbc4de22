"""What the `flywheel` commands share: the `--data-root` option, the one-line failure (exit 2
unless said otherwise), the run-id check every command makes first, and the catalog opened for
reading."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from flows import exit_codes

DataRoot = Annotated[
    Path,
    typer.Option("--data-root", envvar="FLYWHEEL_DATA_ROOT",
                 help="where the catalog and datasets live"),
]


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def check_run_id(run_id: str, what: str = "run id") -> str:
    """The run id of a command, checked before anything is read or written (the one rule of
    storage/paths.py): a bad one is one line naming it and the rule, exit 2."""
    from storage.paths import InvalidRunId
    from storage.paths import check_run_id as check

    try:
        return check(run_id, what)
    except InvalidRunId as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits


def check_data_root(data_root: Path) -> None:
    """The data root and its catalog, each failure one line: exit 3 when another process holds
    the catalog, else 2."""
    from storage.preflight import CatalogLocked, DataRootUnusable, check_catalog, check_data_root

    try:
        check_data_root(data_root)
        check_catalog(data_root)
    except CatalogLocked as exc:
        fail(str(exc), code=exit_codes.LOCKED)
    except DataRootUnusable as exc:
        fail(str(exc))


def open_catalog(data_root: Path) -> Any:
    from storage.catalog import Catalog

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        fail(f"no catalog at {catalog.path} (check --data-root)")
    return catalog


def print_summary(data_root: Path, run_id: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from storage.audit.round_summary import SUMMARY_COLUMNS, round_summary, summary_cells
    from storage.catalog import Catalog

    table = Table(title=f"run {run_id}", box=None, header_style="bold")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right")
    for row in round_summary(Catalog(data_root), run_id):
        table.add_row(*summary_cells(row))
    # In a pipe or a log, a line is never wrapped (a decision stays greppable whole)
    Console(width=None if sys.stdout.isatty() else 240).print(table)
