"""Cron strings and time zones, checked without importing Prefect (cronsim, a small
pure-Python cron iterator): the `[schedule]` config and `flywheel schedule --cron/--timezone`.

Prefect's scheduler reads five-field cron strings (minute hour day-of-month month day-of-week)
in an IANA time zone; these checks accept exactly what it reads.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_REFERENCE = datetime(2024, 1, 1)


def check_cron(cron: str) -> str:
    """`cron` itself when it is a valid five-field cron string, else ValueError saying why."""
    fields = cron.split()
    if len(fields) != 5:
        msg = (f"cron string {cron!r} has {len(fields)} fields, expected 5 "
               "(minute hour day-of-month month day-of-week), e.g. '0 2 * * *'")
        raise ValueError(msg)
    try:
        CronSim(cron, _REFERENCE)
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
