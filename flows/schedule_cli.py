"""`flywheel schedule serve|deploy|show`: nightly rounds of one run id on a Prefect server.

    flywheel schedule show   [--cron EXPR] [--timezone TZ] [--config F]      next five ticks
    flywheel schedule serve  [...] [--run-id ID] [--data-root DIR] [--interval S]  blocks
    flywheel schedule deploy [...] [--work-pool NAME]          for `prefect worker start`

Cron, time zone and run id come from the config's `[schedule]` section; the options override
it. A bad cron string or time zone is one line naming it (exit 2), and so is a data root in
another data root format (storage/catalog/schema.py), refused before anything is registered.
`serve` and `deploy` talk to the server in PREFECT_API_URL (`make server` prints it); `show`
needs no server.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

schedule_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="Nightly rounds: one more round of a run id per cron tick.")

ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="run config TOML (default: tiny CPU run)")]
CronOpt = Annotated[str | None, typer.Option(
    "--cron", help="five-field cron string or a nickname such as @daily (default: the "
                   "config's schedule.cron)")]
TzOpt = Annotated[str | None, typer.Option(
    "--timezone", help="IANA time zone (default: the config's schedule.timezone)")]
RunIdOpt = Annotated[str | None, typer.Option(
    "--run-id", help="run to continue (default: the config's schedule.run_id)")]
DataRootOpt = Annotated[Path, typer.Option("--data-root", envvar="FLYWHEEL_DATA_ROOT",
                                           help="where the catalog and datasets live")]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _load(config: Path | None, cron: str | None, timezone: str | None, run_id: str | None) -> Any:
    from configs import ConfigError, load_config
    from configs.cron import check_cron, check_timezone
    from configs.presets import config_file

    for option, value, check in (("--cron", cron, check_cron),
                                 ("--timezone", timezone, check_timezone)):
        try:  # options first, so the error names the option and the value the user typed
            if value is not None:
                check(value)
        except ValueError as exc:
            _fail(f"{option}: {exc}")
    overrides = {f"schedule.{key}": value for key, value in
                 (("cron", cron), ("timezone", timezone), ("run_id", run_id)) if value is not None}
    try:
        return load_config(config_file(config), overrides)
    except ConfigError as exc:
        _fail(str(exc))


def _check_data_root(data_root: Path) -> None:
    """Refuse a data root in another data root format before registering nightly rounds that
    would each fail on it (the `flywheel` command group prints the one-line error)."""
    from storage.catalog import CatalogFile

    CatalogFile(data_root).check_format()


def _require_server() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        _fail("PREFECT_API_URL is not set: start a server with `make server` and export the URL "
              "it prints (export PREFECT_API_URL=http://127.0.0.1:4200/api)")
    return url


@schedule_app.command()
def show(config: ConfigOpt = None, cron: CronOpt = None, timezone: TzOpt = None,
         run_id: RunIdOpt = None) -> None:
    """Print the next five times a round starts."""
    from schedules.times import next_runs

    cfg = _load(config, cron, timezone, run_id)
    s = cfg.schedule
    typer.echo(f"run {s.run_id}: cron {s.cron!r} in {s.timezone}; next rounds start at")
    for tick in next_runs(s.cron, s.timezone, datetime.now(UTC), 5):
        typer.echo(f"  {tick:%Y-%m-%d %H:%M %Z}  ({tick.astimezone(UTC):%Y-%m-%d %H:%M} UTC)")


@schedule_app.command()
def serve(config: ConfigOpt = None, cron: CronOpt = None, timezone: TzOpt = None,
          run_id: RunIdOpt = None, data_root: DataRootOpt = Path("flywheel-data"),
          interval: Annotated[float | None, typer.Option(
              "--interval", min=1, help="every S seconds instead of the cron, first tick in 15 s "
                                        "(demos and tests)")] = None) -> None:
    """Register the deployment and run its schedule in this process until Ctrl-C."""
    cfg = _load(config, cron, timezone, run_id)
    _check_data_root(data_root)
    url = _require_server()
    from flows.nightly import nightly_round
    from schedules.deployments import serve_nightly

    when = (f"every {interval:g} s" if interval
            else f"cron {cfg.schedule.cron!r} ({cfg.schedule.timezone})")
    typer.echo(f"serving nightly rounds of run {cfg.schedule.run_id} {when} on {url}; Ctrl-C stops")
    serve_nightly(nightly_round, data_root, cfg, interval_seconds=interval)


@schedule_app.command()
def deploy(config: ConfigOpt = None, cron: CronOpt = None, timezone: TzOpt = None,
           run_id: RunIdOpt = None, data_root: DataRootOpt = Path("flywheel-data"),
           work_pool: Annotated[str, typer.Option("--work-pool", help="process work pool "
                                                  "(created if missing)")] = "flywheel") -> None:
    """Register the deployment for a worker: `prefect worker start --pool NAME` runs it."""
    cfg = _load(config, cron, timezone, run_id)
    _check_data_root(data_root)
    url = _require_server()
    from flows.nightly import nightly_round
    from schedules.deployments import deploy_nightly, deployment_name

    deployment_id = deploy_nightly(nightly_round, data_root, cfg, work_pool)
    typer.echo(f"deployment flywheel-nightly/{deployment_name(cfg)} ({deployment_id}) on {url}; "
               f"start a worker with: prefect worker start --pool {work_pool}")
