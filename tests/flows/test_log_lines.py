"""One timestamp per log line (flows/log_lines.py): the console, plain or Rich, and the run's
log file stamp each record once; stage, gate and progress lines carry none of their own."""

from __future__ import annotations

import io
import logging
import re
from datetime import datetime

import pytest

from flows.execution import attach_log_file
from flows.log_lines import console_handler

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"
LINES = ("round 0 curate: gate passed on curriculum (28 expectations, 0.28 s)",
         "round 0 curate: completed in 0.8 s; rows curriculum=3922 train_rows=2074")


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("flywheel", logging.INFO, __file__, 1, message, None, None)


def _stamps(line: str) -> list[str]:
    return re.findall(ISO, line)


@pytest.mark.parametrize("terminal", [False, True])
def test_the_console_stamps_each_line_once(terminal):
    stream = io.StringIO()
    handler = console_handler(stream, terminal=terminal)
    for message in LINES:
        handler.handle(_record(message))
    output = stream.getvalue()  # Rich may wrap a record over several lines: one stamp each
    starts = [match.start() for match in re.finditer(ISO, output)]
    assert len(starts) == len(LINES)
    for start, end, message in zip(starts, [*starts[1:], len(output)], LINES, strict=True):
        line = output[output.rfind("\n", 0, start) + 1:end]  # the record, from its line's start
        assert "INFO" in line.split()[:2]  # the level, before or after the stamp
        assert " ".join(message.split()[:3]) in " ".join(line.split())
        if not terminal:
            assert line.startswith("INFO     ")  # `grep -v '^INFO '` still drops them
        moment = datetime.fromisoformat(line.split()[line.split().index("INFO") ^ 1])
        assert moment.tzinfo is not None
        assert abs(moment.timestamp() - datetime.now().timestamp()) < 60


def test_the_log_file_stamps_each_line_once(tmp_path):
    log = tmp_path / "run.log"
    root = logging.getLogger()
    before = list(root.handlers)
    attach_log_file(log)
    try:
        for message in LINES:
            logging.getLogger("flywheel").warning(message)
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()
        logging.getLogger("flywheel.recovery").handlers.clear()
    lines = log.read_text().splitlines()
    assert len(lines) == len(LINES)
    for line, message in zip(lines, LINES, strict=True):
        assert len(_stamps(line)) == 1 and line.endswith(f"flywheel: {message}")
