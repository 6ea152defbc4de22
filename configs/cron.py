"""Cron strings and time zones, checked without importing Prefect (cronsim, a small
pure-Python cron iterator): the `[schedule]` config and `flywheel schedule --cron/--timezone`.

Prefect's scheduler reads five-field cron strings (minute hour day-of-month month day-of-week)
in an IANA time zone, and croniter's nicknames (`@daily` = `0 0 * * *`, `NICKNAMES`); these
checks accept exactly what it reads, and `five_fields` spells a nickname out for cronsim.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_REFERENCE = datetime(2024, 1, 1)
# the nicknames Prefect's CronSchedule (croniter) accepts; `@reboot` it refuses
NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@hourly": "0 * * * *"}


def five_fields(cron: str) -> str:
    """`cron` with a nickname (`@daily`, any case) spelled out as its five fields."""
    return NICKNAMES.get(cron.lower(), cron)


def check_cron(cron: str) -> str:
    """`cron` itself when it is a valid five-field cron string or a nickname (`NICKNAMES`),
    else ValueError saying why."""
    fields = five_fields(cron).split()
    if cron.startswith("@") and len(fields) != 5:
        msg = (f"cron string {cron!r} is not a nickname Prefect reads: use one of "
               f"{', '.join(NICKNAMES)} or five fields, e.g. '0 2 * * *'")
        raise ValueError(msg)
    if len(fields) != 5:
        msg = (f"cron string {cron!r} has {len(fields)} fields, expected 5 "
               "(minute hour day-of-month month day-of-week), e.g. '0 2 * * *'")
        raise ValueError(msg)
    try:
        CronSim(" ".join(fields), _REFERENCE)
    except CronSimError as exc:
        msg = f"cron string {cron!r} is invalid: {exc} (e.g. '0 2 * * *' = 02:00 every day)"
        raise ValueError(msg) from None
    return cron


def check_timezone(name: str) -> str:
    """`name` itself when it is an IANA time zone, else ValueError naming it."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        msg = f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        raise ValueError(msg) from None
    return name
