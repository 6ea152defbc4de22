"""The `flywheel` command line.

    flywheel run [--config F] [--rounds N] [--set KEY=VALUE ...] [--run-id ID] [--data-root DIR]
    flywheel resume RUN_ID [--config F] [--set KEY=VALUE ...] [--data-root DIR]
    flywheel validate RUN_ID [--round N] [--stage S] [--config F] [--data-root DIR]
    flywheel status RUN_ID [--json] [--data-root DIR]
    flywheel runs [--json] [--data-root DIR]
    flywheel checkpoint RUN_ID [--round N] [--data-root DIR]
    flywheel catalog snapshot [--out FILE] [--data-root DIR]  (a copy to query while a run writes)
    flywheel config show [RUN_ID | --config F] [--set KEY=VALUE ...] | config diff A B
    flywheel audit RUN_ID QUERY [ARGS] [--format table|json|csv] [--data-root DIR]
    flywheel report RUN_ID [--out DIR] [--data-root DIR]
    flywheel reverify RUN_ID [--round N] [--set verify.KEY=VALUE ...] [--json] [--data-root DIR]
    flywheel --version
    flywheel --install-completion | --show-completion     (bash, zsh, fish, powershell)

Every command takes `--data-root` (default `$FLYWHEEL_DATA_ROOT` or `./flywheel-data`). Errors a
user can cause (bad config, unknown run id, an unusable data root or model folder) print one
line and exit with status 2; nothing is written before they are checked. A data root in
another data root format (written by an earlier Flywheel, storage/catalog/schema.py) is refused
the same way by every command that opens its catalog (`_Group`), and so is a run id that breaks
the one rule of storage/paths.py (1 to 100 letters, digits, '.', '_', '-', starting with a
letter or digit), checked by every command that takes one before anything else. `status` imports
neither torch nor Prefect. Exit statuses: flows/exit_codes.py. The commands that read a run
back live in flows/inspect_cli.py (status, runs, checkpoint) and flows/audit_cli.py (audit,
report, validate); what they share in flows/cli_common.py. Results (tables, JSON, the final
line) go to stdout, log records and errors to stderr; when stdout's reader goes away (`| head`)
a command stops quietly with 141 (`_Group`, flows/exit_codes.py).
`run` and `resume` hold the run's lock (storage/lock.py): a run id that another live
process is running is refused in one line naming its pid and start time (exit status 3); what
a killed run left half written is reported one line per file, discarded and recomputed
(storage/recovery.py). How a run executes, is interrupted and fails: flows/execution.py.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from flows import audit_cli, exit_codes, inspect_cli, reverify_cli
from flows.cli_common import DataRoot, check_data_root, check_run_id, fail, print_summary
from flows.config_cli import SetOpt, config_app, parse_sets  # light: typer only
from flows.schedule_cli import schedule_app


class _Group(TyperGroup):
    """The command group: an unusable data root (storage.catalog.errors.DataRootUnusable, e.g. a
    catalog in another data root format) or a bad run id (storage.paths.InvalidRunId), wherever
    a command (`schedule ...` included) meets it, is one line and exit 2 (3 when another process
    holds the catalog), not a traceback. A closed stdout (`flywheel status RUN | head -1`) ends
    any command, `--help` and `--version` quietly with 141 (`_quiet_when_output_closed`)."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        with _quiet_when_output_closed():  # `flywheel --help`, `--version` print here
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with _quiet_when_output_closed():
                return super().invoke(ctx)
        except ValueError as exc:
            errors = sys.modules.get("storage.catalog.errors")  # not imported: not one of these
            paths = sys.modules.get("storage.paths")  # a bad run id met deeper down (the rule)
            if paths is not None and isinstance(exc, paths.InvalidRunId):
                fail(str(exc))
            if errors is None or not isinstance(exc, errors.DataRootUnusable):
                raise
            locked = isinstance(exc, errors.CatalogLocked)  # raised where the catalog opens
            fail(str(exc), code=exit_codes.LOCKED if locked else exit_codes.USER_ERROR)


@contextmanager
def _quiet_when_output_closed() -> Iterator[None]:
    """The reader of stdout (or stderr) went away: print nothing more and exit 141, as a shell
    tool killed by SIGPIPE does (flows/exit_codes.py). Unhandled, click would exit 1 and rich's
    console raises SystemExit(1) (`Console.on_broken_pipe`): a script would read a failed gate.
    What is still buffered for a closed stream goes to /dev/null, so Python's own flush at exit
    cannot fail with a second traceback."""
    try:
        yield
    except SystemExit as exc:
        if not isinstance(exc.__context__, BrokenPipeError):  # not rich meeting a closed pipe
            raise
    except BrokenPipeError:
        pass
    else:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            except (OSError, ValueError):  # not a file descriptor (a test's captured stream)
                pass
        except (OSError, ValueError):  # already closed
            pass
    raise typer.Exit(exit_codes.OUTPUT_CLOSED)


app = typer.Typer(cls=_Group, add_completion=True, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  help="Flywheel: self-improving model rounds as a resumable data pipeline.")
app.add_typer(schedule_app, name="schedule")  # flywheel schedule serve|deploy|show
app.add_typer(config_app, name="config")  # flywheel config show|diff
app.add_typer(inspect_cli.catalog_app, name="catalog")  # flywheel catalog snapshot


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


def _launch_server_early(data_root: Path) -> None:
    """Launch the run's temporary Prefect server now when `data_root` already holds a catalog
    (flows/execution.py `start_server`): its start overlaps the checks and the imports that
    follow. Only there, and only once the data root and its catalog pass their check (a damaged,
    foreign or locked catalog is its one-line error now): nothing is created in a data root
    before the checks pass, and the server's log goes to `<data-root>/logs/`. Elsewhere
    `execute` launches it, after them; so it does when this launch fails (a data root or
    Prefect home it cannot write: the checks that follow name the cause)."""
    from storage.paths import CATALOG_FILE

    if (data_root / CATALOG_FILE).is_file():
        check_data_root(data_root)
        _quiet_environment()  # the server inherits them
        from flows.execution import start_server

        with suppress(OSError):
            start_server(data_root)


def _check_before_start(data_root: Path, config: Any) -> Any:
    """What can be checked before anything is written, each failure one line (exit 2): the
    data root and its catalog, the model, the rollout backend, the task runner, the domain's
    own input and the training device. The domain is built here as a stage builds it, so its
    constructor's checks (dataset files row by row, reasoning-gym task names) refuse bad input
    now rather than fail a stage later; the CLI knows no domain. Returns `config` with a hub
    id's snapshot pinned (`model.revision` = its commit hash, models/hub.py), the config the
    run records, so a resume loads the same snapshot."""
    from domains import get_domain
    from domains.base import DomainInputError
    from flows.runners import RunnerUnavailable, check_task_runner
    from models.backends import BackendUnavailable, check_backend
    from models.preflight import ModelUnfit

    check_data_root(data_root)
    try:
        config = config.model_copy(update={"model": _checked_model(config.model, "model")})
        if config.proposer.separate:  # its snapshot is recorded too
            proposer = _checked_model(config.proposer.model, "proposer.model")
            config = config.model_copy(update={
                "proposer": config.proposer.model_copy(update={"model": proposer})})
        check_backend(config.rollout.backend)
        check_task_runner(config.scale)
        get_domain(config.domain.name, config)
    except (ModelUnfit, BackendUnavailable, RunnerUnavailable, DomainInputError) as exc:
        fail(str(exc))
    from models.runtime import check_runtime
    from models.trainer import check_reporter

    try:  # a GPU for device = "cuda", peft for LoRA, enough GPUs for num_processes, the reporter
        check_runtime(config.train)
        check_reporter(config.train.report_to)
    except ValueError as exc:
        fail(str(exc))
    return config


def _checked_model(model: Any, section: str) -> Any:
    """`model` (the `[model]` section, or `section`'s) checked before the run starts: a folder or
    hub id whole and well formed, returned with a hub id's snapshot pinned (`revision` = its
    commit hash), or a tiny model that fits in memory; ModelUnfit names `section` otherwise."""
    from models.preflight import check_model_folder, check_tiny_model_fits

    if model.path is None:
        check_tiny_model_fits(model.hidden_size, model.num_layers, model.intermediate_size,
                              section=section)
        return model
    source = check_model_folder(model.path, model.revision, section=section)
    return model.model_copy(update={"revision": source.revision})


def _log_handler() -> Any:
    """Log records go to stderr, so stdout holds only the results (the summary table, the final
    line) for a script to read: Rich's handler when stderr is a terminal; elsewhere (cron, CI,
    a pipe) one plain line per record (flows/log_lines.py)."""
    from flows.log_lines import console_handler

    return console_handler(sys.stderr, terminal=sys.stderr.isatty())


def _execute(data_root: Path, run_id: str, config: Any) -> None:
    _quiet_environment()
    config = _check_before_start(data_root, config)
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
    print_summary(data_root, run_id)
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
    _launch_server_early(data_root)
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
    _launch_server_early(data_root)
    from configs import ConfigError, apply_overrides, load_config, validate_config
    from configs.presets import config_file
    from flows.config_cli import recorded_config
    from storage.catalog import Catalog
    from storage.paths import run_folder

    check_data_root(data_root)
    catalog = Catalog(data_root)
    try:  # killed before its catalog row: its record; none is read when --config replaces it
        recorded = recorded_config(data_root, run_id) if config is None else None
    except ConfigError as exc:  # the record is not a JSON object (a busy catalog: _Group)
        fail(str(exc))
    if recorded is None and config is None:
        if run_folder(data_root, run_id).is_dir():
            fail(f"run {run_id!r} stopped before it recorded its config; give it again: "
                 f"`flywheel resume {run_id} --config FILE`")
        where = catalog.path if catalog.path.exists() else f"{data_root} (no catalog yet)"
        fail(f"unknown run id {run_id!r} in {where} (check --data-root, or `flywheel status`)")
    label = f"run {run_id}"
    try:
        overrides = parse_sets(sets)
        cfg = (validate_config(apply_overrides(recorded, overrides, label), label)
               if config is None else load_config(config_file(config), overrides))
    except ValueError as exc:  # a bad --set, or a ConfigError naming the key
        fail(str(exc))
    _execute(data_root, run_id, cfg)


# Registered after run and resume, so `flywheel --help` lists the commands in this order.
for _command in (inspect_cli.status, inspect_cli.runs, inspect_cli.checkpoint,
                 audit_cli.audit, audit_cli.report, audit_cli.validate, reverify_cli.reverify):
    app.command()(_command)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
