"""One timestamp per log line, put there by the handler: the console's (plain or Rich) and the
run's log file both stamp each record once, in ISO 8601 local time with its UTC offset; the
messages themselves (stage lines, gate lines, progress lines) carry none, and the Prefect UI
shows each forwarded record with its own time.

    INFO     2026-12-02T14:03:49+00:00 round 0 curate: gate passed on curriculum (28 ...)
    INFO     2026-12-02T14:03:49+00:00 round 0 curate: completed in 0.8 s; rows curriculum=3922

The plain console starts each line with the level, so `grep -v '^INFO '` keeps what is not a
progress or stage line; the log file starts with the time; Rich shows its time column first.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

CONSOLE_FORMAT = "%(levelname)-8s %(asctime)s %(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def timestamp(epoch: float) -> str:
    """`epoch` as an ISO 8601 timestamp in local time with its UTC offset."""
    return datetime.fromtimestamp(epoch, UTC).astimezone().isoformat(timespec="seconds")


class StampedFormatter(logging.Formatter):
    """A formatter whose `%(asctime)s` is `timestamp(record.created)`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return timestamp(record.created)


def console_handler(stream: Any, *, terminal: bool) -> logging.Handler:
    """The console's handler: Rich's on a terminal (its time column in the same format), else
    one plain line per record, never wrapped, so each line of a redirected log is one record."""
    if terminal:
        from rich.console import Console
        from rich.logging import RichHandler
        from rich.text import Text

        return RichHandler(console=Console(file=stream), show_path=False, show_time=True,
                           omit_repeated_times=False,
                           log_time_format=lambda moment: Text(timestamp(moment.timestamp())))
    handler = logging.StreamHandler(stream)
    handler.setFormatter(StampedFormatter(CONSOLE_FORMAT))
    return handler


def file_handler(path: Any) -> logging.Handler:
    """The run's log file's handler (flows/execution.py `attach_log_file`)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(StampedFormatter(FILE_FORMAT))
    return handler
