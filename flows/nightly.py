"""The `flywheel-nightly` flow: one more round of one run id per tick (its deployment, the cron
schedule and the one-at-a-time limit live in schedules/deployments.py).

A scheduled run (a "night") does, holding the run's lock (storage/lock.py):

    decided = catalog.last_decided_round(run_id)   (0 when none)
    run_flywheel(RunSpec(..., config.rounds = decided + 1))

Every stage already done is skipped by its fingerprint, so rounds 0..decided cost seconds and
only round decided + 1 is computed, from the current incumbent. A round that failed the night
before has no `rounds` row yet, so the next night finishes it (its failed stage is marked in
the catalog; done stages are skipped) and the night after starts a new round.

One round at a time per run id, twice over: the deployment has a concurrency limit of 1 that
cancels a new run while one is running (Prefect's CANCEL_NEW), and the run lock refuses any
second process on the run id (a `flywheel run`/`resume` of it too). A refused night ends
Cancelled with the holder's pid in its message. A night whose next tick has already come when
it starts (the server or runner was down) is skipped with a warning, so missed nights are not
stacked: after three nights down, one round runs, not three. A night that starts late within
its own slot runs, and says how late.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Cancelled

from configs import validate_config
from flows.environment import set_defaults
from flows.run import RunSpec, run_flywheel
from schedules.times import superseded_by
from storage.catalog import Catalog

FLOW_NAME = "flywheel-nightly"


def missed_night(scheduled: datetime | None, now: datetime, cron: str | None, timezone: str,
                 interval_seconds: float | None) -> datetime | None:
    """The later tick that has already come, when this run's own slot is over; else None."""
    if scheduled is None:
        return None
    if interval_seconds:
        following = scheduled + timedelta(seconds=interval_seconds)
        return following if following <= now else None
    if cron:
        return superseded_by(cron, timezone, scheduled, now)
    return None


@flow(name=FLOW_NAME, validate_parameters=False, log_prints=True,
      flow_run_name="nightly-{run_id}")
def nightly_round(data_root: str, run_id: str, config: dict[str, Any], cron: str | None = None,
                  timezone: str = "UTC", interval_seconds: float | None = None) -> Any:
    """Continue `run_id` by one round from its incumbent (see the module docstring)."""
    from prefect.context import get_run_context

    from storage.lock import RunLocked
    from storage.recovery import guarded_run

    set_defaults()  # before the stages import torch
    logger = get_run_logger()
    cfg = validate_config(config, f"the parameters of deployment {FLOW_NAME} (run {run_id})")
    flow_run = get_run_context().flow_run  # type: ignore[union-attr]
    expected = flow_run.expected_start_time if flow_run is not None else None
    # Prefect hands a Pendulum datetime; the schedule arithmetic takes the standard library's
    scheduled = datetime.fromtimestamp(expected.timestamp(), UTC) if expected else None
    now = datetime.now(UTC)
    later = missed_night(scheduled, now, cron, timezone, interval_seconds)
    if later is not None:
        message = (f"night of {scheduled:%Y-%m-%d %H:%M %Z} skipped: it started at "
                   f"{now:%Y-%m-%d %H:%M:%S %Z}, after the next tick ({later:%Y-%m-%d %H:%M %Z}); "
                   "missed nights are not stacked")
        logger.warning(message)
        return Cancelled(message=message)
    if scheduled is not None and (late := (now - scheduled).total_seconds()) > 60:
        logger.warning("night of %s started %.0f min late", f"{scheduled:%Y-%m-%d %H:%M %Z}",
                       late / 60)
    root = Path(data_root)
    catalog = Catalog(root)
    try:
        with guarded_run(root, run_id):
            decided = catalog.last_decided_round(run_id)
            target = decided + 1
            if catalog.run_status(run_id) == "failed":
                logger.warning("run %s failed last time; finishing it first (done stages are "
                               "skipped)", run_id)
            logger.info("run %s: %d round(s) decided; this night runs round %d", run_id, decided,
                        target)
            spec = RunSpec(data_root=str(root), run_id=run_id,
                           config=cfg.model_copy(update={"rounds": target}))
            try:
                run_flywheel(spec)
            except BaseException as exc:
                logger.error(
                    "round %d of run %s failed: %s. Its stage is marked failed in the catalog; "
                    "the next scheduled night resumes it, or resume it now with: "
                    "flywheel resume %s --data-root %s", target, run_id,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__, run_id, root)
                raise
    except RunLocked as exc:
        message = f"night skipped: {exc}"
        logger.warning(message)
        return Cancelled(message=message)
    logger.info("run %s: round %d decided", run_id, target)
    return {"run_id": run_id, "round": target}
