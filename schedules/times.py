"""Cron fire times, iterated without importing Prefect (the checks of a cron string and a time
zone are configs/cron.py, which the config models use).

Prefect's scheduler reads five-field cron strings (minute hour day-of-month month day-of-week)
in an IANA time zone; so do these helpers (cronsim, a small pure-Python cron iterator).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from configs.cron import five_fields


def next_runs(cron: str, timezone: str, after: datetime, count: int = 5) -> list[datetime]:
    """The next `count` fire times of `cron` strictly after `after`, in `timezone`."""
    tz = ZoneInfo(timezone)
    start = after.astimezone(tz).replace(microsecond=0)
    fires: list[datetime] = []
    for fire in CronSim(five_fields(cron), start):  # `@daily` too
        if fire > after:
            fires.append(fire)
        if len(fires) == count:
            break
    return fires


def superseded_by(cron: str, timezone: str, scheduled: datetime, now: datetime) -> datetime | None:
    """The later tick that has already come when a run scheduled at `scheduled` starts at `now`.

    A run whose next tick has passed is a missed night: it is skipped (and logged) so that a
    server or runner that was down for three nights runs one round, not three stacked ones.
    None when the run is still within its own slot (late or not).
    """
    following = next_runs(cron, timezone, scheduled + timedelta(seconds=1), 1)
    if following and following[0] <= now:
        return following[0]
    return None
