"""The `flywheel` command line.

    flywheel run [--config F] [--rounds N] [--run-id ID] [--data-root DIR]
    flywheel resume RUN_ID [--data-root DIR]
    flywheel status RUN_ID [--json] [--data-root DIR]

Every command takes `--data-root` (default `$FLYWHEEL_DATA_ROOT` or `./flywheel-data`). Errors a
user can cause (bad config, unknown run id) print one line and exit with status 2; nothing is
written before the config is valid. `status` imports neither torch nor Prefect.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Flywheel: self-improving model rounds as a resumable data pipeline.")

DataRoot = Annotated[
    Path,
    typer.Option("--data-root", envvar="FLYWHEEL_DATA_ROOT", help="where the catalog and datasets live"),
]
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _quiet_environment() -> None:
    """Defaults for a clean, offline CPU run; anything the user already set wins."""
    defaults = {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TOKENIZERS_PARALLELISM": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def _print_summary(data_root: Path, run_id: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from flywheel.storage.audit import SUMMARY_COLUMNS, format_cell, round_summary
    from flywheel.storage.catalog import Catalog

    table = Table(title=f"run {run_id}", box=None, header_style="bold")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right")
    for row in round_summary(Catalog(data_root), run_id):
        table.add_row(*(format_cell(row[c]) for c in SUMMARY_COLUMNS))
    Console().print(table)


def _execute(data_root: Path, run_id: str, config: Any) -> None:
    _quiet_environment()
    import logging

    from rich.logging import RichHandler

    logging.basicConfig(level=logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(show_path=False, show_time=False)])
    logging.getLogger("flywheel").setLevel(logging.INFO)
    from flywheel.flows.flywheel import RunSpec, flywheel_flow

    started = time.time()
    flywheel_flow(RunSpec(data_root=str(data_root.resolve()), run_id=run_id, config=config))
    _print_summary(data_root, run_id)
    typer.echo(f"run {run_id} finished in {time.time() - started:.0f} s; data in {data_root / 'runs' / run_id}")


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", help="run config TOML (default: tiny CPU run)")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help="self-improvement rounds after warm-up")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="run id (default: a timestamp)")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Run the flywheel: warm-up round 0, then N self-improvement rounds."""
    from flywheel.config import ConfigError, load_config

    overrides = {} if rounds is None else {"rounds": rounds}
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        fail(str(exc))
    run_id = run_id or time.strftime("run-%Y%m%d-%H%M%S")
    if not _RUN_ID.match(run_id):
        fail(f"--run-id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    _execute(data_root, run_id, cfg)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="the run to finish")],
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Finish a run with its recorded config: done stages are skipped, the rest recomputed."""
    from flywheel.config import ConfigError, validate_config
    from flywheel.storage.catalog import Catalog

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        fail(f"no catalog at {catalog.path} (check --data-root)")
    recorded = catalog.run_config_json(run_id)
    if recorded is None:
        fail(f"unknown run id {run_id!r} in {catalog.path} (see `flywheel status`)")
    try:
        cfg = validate_config(json.loads(recorded), f"run {run_id}")
    except ConfigError as exc:
        fail(str(exc))
    _execute(data_root, run_id, cfg)


@app.command()
def status(
    run_id: Annotated[str, typer.Argument(help="the run to show")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Show a run's stages and its per-round summary."""
    from flywheel.storage.audit import round_summary
    from flywheel.storage.catalog import Catalog

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        fail(f"no catalog at {catalog.path} (check --data-root)")
    runs = catalog.query("SELECT run_id, status FROM runs WHERE run_id = ?", [run_id])
    if not runs:
        fail(f"unknown run id {run_id!r} in {catalog.path}")
    stages = catalog.stage_rows(run_id)
    if as_json:
        payload = {"run_id": run_id, "status": runs[0]["status"], "stages": stages,
                   "rounds": round_summary(catalog, run_id)}
        typer.echo(json.dumps(payload, indent=2, default=str))
        return
    typer.echo(f"run {run_id}: {runs[0]['status']}")
    for s in stages:
        typer.echo(f"  round {s['round']:>3}  {s['stage']:<10} {s['status']:<11} "
                   f"{s['fingerprint'][:12]}  rows={s['rows'] if s['rows'] is not None else '-':<6} "
                   f"{s['seconds']:.1f}s" + (f"  {s['error']}" if s["error"] else ""))
    _print_summary(data_root, run_id)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
