"""The nightly deployment on a Prefect server: one more round of one run id per cron tick.

The flow itself is `flows.nightly.nightly_round`; the functions here take it as an argument, so
this package imports nothing of `flows`. Every deployment runs one night at a time: a
concurrency limit of 1 cancels a new run while one is running (Prefect's CANCEL_NEW).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from configs import RunConfig
from schedules.times import next_runs

ENTRYPOINT = "flows/nightly.py:nightly_round"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def deployment_parameters(data_root: Path, cfg: RunConfig, interval_seconds: float | None = None
                          ) -> dict[str, Any]:
    return {"data_root": str(Path(data_root).resolve()), "run_id": cfg.schedule.run_id,
            "config": cfg.model_dump(mode="json"),
            "cron": None if interval_seconds else cfg.schedule.cron,
            "timezone": cfg.schedule.timezone, "interval_seconds": interval_seconds}


def _schedule(cfg: RunConfig, interval_seconds: float | None) -> Any:
    from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule

    # first tick 15 s from now (after the deployment is registered), then every interval
    if interval_seconds:
        return IntervalSchedule(interval=timedelta(seconds=interval_seconds),
                                anchor_date=datetime.now(UTC) + timedelta(seconds=15),
                                timezone=cfg.schedule.timezone)
    return CronSchedule(cron=cfg.schedule.cron, timezone=cfg.schedule.timezone)


def _one_at_a_time() -> Any:
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    return ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)


def deployment_name(cfg: RunConfig) -> str:
    return f"nightly-{cfg.schedule.run_id}"


def serve_nightly(nightly_round: Any, data_root: Path, cfg: RunConfig,
                  interval_seconds: float | None = None) -> None:
    """Create the deployment of the flow `nightly_round` (flows/nightly.py) on the server in
    PREFECT_API_URL and run its schedule in-process until interrupted (one run at a time; the
    schedule is paused on shutdown)."""
    nightly_round.serve(
        name=deployment_name(cfg), schedules=[_schedule(cfg, interval_seconds)],
        parameters=deployment_parameters(data_root, cfg, interval_seconds),
        global_limit=_one_at_a_time(), limit=1,
        description=f"one more self-improvement round of run {cfg.schedule.run_id} per tick",
        tags=["flywheel", "nightly"],
    )


def deploy_nightly(nightly_round: Any, data_root: Path, cfg: RunConfig, work_pool: str) -> str:
    """Register the deployment of the flow `nightly_round` for a worker of `work_pool` (a
    process pool, created if missing); returns the deployment id. The worker runs the flow from
    this checkout (ENTRYPOINT)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=work_pool, type="process"))
        except ObjectAlreadyExists:
            pass
    source = nightly_round.from_source(source=str(PROJECT_ROOT), entrypoint=ENTRYPOINT)
    deployment_id = source.deploy(
        name=deployment_name(cfg), work_pool_name=work_pool, schedules=[_schedule(cfg, None)],
        parameters=deployment_parameters(data_root, cfg), concurrency_limit=_one_at_a_time(),
        description=f"one more self-improvement round of run {cfg.schedule.run_id} per tick",
        tags=["flywheel", "nightly"], build=False, push=False, print_next_steps=False,
    )
    return str(deployment_id)


def upcoming(cfg: RunConfig, count: int = 5, after: datetime | None = None) -> list[datetime]:
    return next_runs(cfg.schedule.cron, cfg.schedule.timezone, after or datetime.now(UTC), count)
