"""The `flywheel` command line.

    flywheel run [--config F] [--rounds N] [--set KEY=VALUE ...] [--run-id ID] [--data-root DIR]
    flywheel resume RUN_ID [--config F] [--set KEY=VALUE ...] [--data-root DIR]
    flywheel validate RUN_ID [--round N] [--stage S] [--config F] [--data-root DIR]
    flywheel status RUN_ID [--json] [--data-root DIR]
    flywheel runs [--json] [--data-root DIR]
    flywheel checkpoint RUN_ID [--round N] [--data-root DIR]
    flywheel config show [RUN_ID | --config F] [--set KEY=VALUE ...] | config diff A B
    flywheel audit RUN_ID QUERY [ARGS] [--format table|json|csv] [--data-root DIR]
    flywheel report RUN_ID [--out DIR] [--data-root DIR]
    flywheel --version
    flywheel --install-completion | --show-completion     (bash, zsh, fish, powershell)

Every command takes `--data-root` (default `$FLYWHEEL_DATA_ROOT` or `./flywheel-data`). Errors a
user can cause (bad config, unknown run id, an unusable data root or model folder) print one
line and exit with status 2; nothing is written before they are checked. A data root in
another data root format (written by an earlier Flywheel, storage/catalog/schema.py) is refused
the same way by every command that opens its catalog (`_Group`), and so is a run id that breaks
the one rule of storage/paths.py (1 to 100 letters, digits, '.', '_', '-', starting with a
letter or digit), checked by every command that takes one before anything else. `status` imports
neither torch nor Prefect. Exit statuses: flows/exit_codes.py.
`run` and `resume` hold the run's lock (storage/lock.py): a run id that another live
process is running is refused in one line naming its pid and start time (exit status 3); what
a killed run left half written is reported one line per file, discarded and recomputed
(storage/recovery.py). How a run executes, is interrupted and fails: flows/execution.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from flows import exit_codes
from flows.config_cli import SetOpt, config_app, parse_sets  # light: typer only
from flows.schedule_cli import schedule_app


class _Group(TyperGroup):
    """The command group: an unusable data root (storage.catalog.errors.DataRootUnusable, e.g. a
    catalog in another data root format) or a bad run id (storage.paths.InvalidRunId), wherever
    a command (`schedule ...` included) meets it, is one line and exit 2 (3 when another process
    holds the catalog), not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValueError as exc:
            errors = sys.modules.get("storage.catalog.errors")  # not imported: not one of these
            paths = sys.modules.get("storage.paths")  # a bad run id met deeper down (the rule)
            if paths is not None and isinstance(exc, paths.InvalidRunId):
                fail(str(exc))
            if errors is None or not isinstance(exc, errors.DataRootUnusable):
                raise
            preflight = sys.modules.get("storage.preflight")
            locked = preflight is not None and isinstance(exc, preflight.CatalogLocked)
            fail(str(exc), code=exit_codes.LOCKED if locked else exit_codes.USER_ERROR)


app = typer.Typer(cls=_Group, add_completion=True, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  help="Flywheel: self-improving model rounds as a resumable data pipeline.")
app.add_typer(schedule_app, name="schedule")  # flywheel schedule serve|deploy|show
app.add_typer(config_app, name="config")  # flywheel config show|diff


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"flywheel {version('flywheel')}")
        except PackageNotFoundError:  # a source tree that was never installed
            typer.echo("flywheel (not installed: `pip install -e .`)")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print the version and exit")] = False) -> None:
    """Flywheel: self-improving model rounds as a resumable data pipeline."""

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


def _quiet_environment() -> None:
    """Defaults for a clean, offline, reproducible CPU run (flows/environment.py)."""
    from flows.environment import CLI_DEFAULTS, set_defaults

    set_defaults(CLI_DEFAULTS)


def _quit_on_signals() -> None:
    """Outside a running run (where flows/interrupts.py takes over), SIGINT/SIGTERM end the
    command with one line and 130/143: nothing is being written then."""
    import signal

    def quit_now(signum: int, frame: object) -> None:
        typer.echo(f"interrupted by {signal.Signals(signum).name}", err=True)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, quit_now)


def _print_summary(data_root: Path, run_id: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from storage.audit.snapshot import SUMMARY_COLUMNS, format_cell, round_summary
    from storage.catalog import Catalog

    table = Table(title=f"run {run_id}", box=None, header_style="bold")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right")
    for row in round_summary(Catalog(data_root), run_id):
        table.add_row(*(format_cell(row[c]) for c in SUMMARY_COLUMNS))
    Console(width=None if sys.stdout.isatty() else 120).print(table)


def _check_data_root(data_root: Path) -> None:
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


def _check_before_start(data_root: Path, config: Any) -> None:
    """What can be checked before anything is written, each failure one line (exit 2): the
    data root and its catalog, the model, the rollout backend, the task runner and the training
    device."""
    from flows.runners import RunnerUnavailable, check_task_runner
    from models.backends import BackendUnavailable, check_backend
    from models.preflight import ModelUnfit, check_model_folder, check_tiny_model_fits

    _check_data_root(data_root)
    model = config.model
    try:
        if model.path is not None:
            check_model_folder(model.path)
        else:
            check_tiny_model_fits(model.hidden_size, model.num_layers, model.intermediate_size)
        check_backend(config.rollout.backend)
        check_task_runner(config.scale)
    except (ModelUnfit, BackendUnavailable, RunnerUnavailable) as exc:
        fail(str(exc))
    from models.runtime import check_runtime
    from models.trainer import check_reporter

    try:  # a GPU for device = "cuda", peft for LoRA, enough GPUs for num_processes, the reporter
        check_runtime(config.train)
        check_reporter(config.train.report_to)
    except ValueError as exc:
        fail(str(exc))


def _log_handler() -> Any:
    """Rich's handler on a terminal; elsewhere (cron, CI, a pipe) one plain line per record,
    never wrapped, so each line of a log file is one whole record."""
    import logging

    if sys.stdout.isatty():
        from rich.logging import RichHandler

        return RichHandler(show_path=False, show_time=False)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(levelname)-8s %(message)s"))
    return handler


def _execute(data_root: Path, run_id: str, config: Any) -> None:
    _quiet_environment()
    _check_before_start(data_root, config)
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[_log_handler()])
    logging.getLogger("flywheel").setLevel(logging.INFO)
    from flows.execution import execute
    from storage.paths import run_folder
    from storage.recovery import plain_notices

    plain_notices()
    started = time.time()
    code = execute(data_root, run_id, config, command=" ".join(["flywheel", *sys.argv[1:]]),
                   echo=lambda line: typer.echo(line, err=True))
    if code != exit_codes.OK:
        raise typer.Exit(code)
    _print_summary(data_root, run_id)
    typer.echo(f"run {run_id} finished in {time.time() - started:.0f} s; "
               f"data in {run_folder(data_root, run_id)}")


@app.command()
def run(
    config: Annotated[Path | None, typer.Option(
        "--config", help="run config TOML or a preset's name, e.g. r-zero (default: the tiny "
                         "CPU run)")] = None,
    rounds: Annotated[int | None, typer.Option(
        "--rounds", help="self-improvement rounds after warm-up")] = None,
    run_id: Annotated[str | None, typer.Option(
        "--run-id", help="run id: 1 to 100 letters, digits, '.', '_' or '-' (default: a "
                         "timestamp)")] = None,
    sets: SetOpt = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Run the flywheel: warm-up round 0, then N self-improvement rounds."""
    _quit_on_signals()
    if run_id is not None:  # `--run-id ''` is an error, not a timestamped run
        check_run_id(run_id, "--run-id")
    from configs import load_config
    from configs.presets import config_file

    try:
        overrides = parse_sets(sets)
        if rounds is not None:
            overrides["rounds"] = rounds
        cfg = load_config(config_file(config), overrides)
    except ValueError as exc:  # a bad --set, or a ConfigError naming the key
        fail(str(exc))
    if run_id is None:
        run_id = time.strftime("run-%Y%m%d-%H%M%S")
    _execute(data_root, run_id, cfg)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="the run to finish")],
    config: Annotated[Path | None, typer.Option(
        "--config", help="use this config instead of the recorded one (e.g. fixed gate "
                         "thresholds); stages whose fingerprint is unchanged are skipped")] = None,
    sets: SetOpt = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Finish a run with its recorded config: done stages are skipped, the rest recomputed."""
    _quit_on_signals()
    check_run_id(run_id)
    from configs import apply_overrides, load_config, validate_config
    from configs.presets import config_file
    from flows.config_cli import recorded_config
    from storage.catalog import Catalog
    from storage.paths import run_folder

    _check_data_root(data_root)
    catalog = Catalog(data_root)
    recorded = recorded_config(data_root, run_id)  # killed before its catalog row: its record
    if recorded is None and config is None:
        if run_folder(data_root, run_id).is_dir():
            fail(f"run {run_id!r} stopped before it recorded its config; give it again: "
                 f"`flywheel resume {run_id} --config FILE`")
        where = catalog.path if catalog.path.exists() else f"{data_root} (no catalog yet)"
        fail(f"unknown run id {run_id!r} in {where} (check --data-root, or `flywheel status`)")
    label = f"run {run_id}"
    try:
        overrides = parse_sets(sets)
        cfg = (validate_config(apply_overrides(json.loads(recorded), overrides, label), label)
               if config is None else load_config(config_file(config), overrides))
    except ValueError as exc:  # a bad --set, or a ConfigError naming the key
        fail(str(exc))
    _execute(data_root, run_id, cfg)


@app.command()
def status(
    run_id: Annotated[str, typer.Argument(help="the run to show")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Show a run's stages and its per-round summary; a stopped run exits 1, 4 or 130."""
    check_run_id(run_id)
    from flows.execution import log_path
    from flows.status_view import effective_status, print_task_accuracy, stop_line
    from storage.audit.snapshot import round_summary
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
    if as_json:
        payload = {"run_id": run_id, "status": run_status, "exit_status": code, "stopped": line,
                   "stages": stages, "rounds": round_summary(catalog, run_id)}
        typer.echo(json.dumps(payload, indent=2, default=str))
        raise typer.Exit(code)
    typer.echo(line or f"run {run_id}: {run_status}")  # the first line says what to do
    for s in stages:
        typer.echo(f"  round {s['round']:>3}  {s['stage']:<10} {s['status']:<11} "
                   f"{s['fingerprint'][:12]}  "
                   f"rows={s['rows'] if s['rows'] is not None else '-':<6} "
                   f"{s['seconds']:.1f}s" + (f"  {_clip(s['error'])}" if s["error"] else ""))
    _print_summary(data_root, run_id)
    print_task_accuracy(catalog, run_id, typer.echo)  # reasoning_gym: per task and level
    raise typer.Exit(code)


def _clip(error: str) -> str:
    from flows.status_view import one_line

    return one_line(error, 100)


def _open_catalog(data_root: Path) -> Any:
    from storage.catalog import Catalog

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        fail(f"no catalog at {catalog.path} (check --data-root)")
    return catalog


@app.command()
def runs(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """List the data root's runs: status, rounds, best held-out accuracy, promoted checkpoint."""
    from dataclasses import asdict

    from flows.status_view import effective_status
    from storage.lock import live_holder
    from storage.runs import runs_overview

    overview = runs_overview(_open_catalog(data_root))
    for row in overview:
        row["status"] = effective_status(row["status"], row.pop("last_stage_status"),
                                         live=live_holder(data_root, row["run_id"]) is not None)
    if as_json:
        typer.echo(json.dumps([{**r, "incumbent": r["incumbent"] and asdict(r["incumbent"])}
                               for r in overview], indent=2))
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


@app.command()
def checkpoint(
    run_id: Annotated[str, typer.Argument(help="the run")],
    round_index: Annotated[int | None, typer.Option(
        "--round", help="the incumbent after this round (default: the last decided one)")] = None,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Print the folder of the run's promoted checkpoint (its incumbent), for scripts."""
    check_run_id(run_id)
    from storage.runs import incumbent

    catalog = _open_catalog(data_root)
    if catalog.run_status(run_id) is None:
        fail(f"unknown run id {run_id!r} in {catalog.path} (`flywheel runs` lists them)")
    winner = incumbent(catalog, run_id, round_index)
    if winner is None or winner.path is None:
        fail(f"run {run_id!r} has no checkpoint yet"
             + (f" at round {round_index}" if round_index is not None else ""))
    if not Path(winner.path).is_dir():
        fail(f"run {run_id!r}: its checkpoint {winner.path} is missing "
             f"(`flywheel resume {run_id}` recomputes it)")
    typer.echo(winner.path)


@app.command()
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


@app.command()
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


@app.command()
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


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
