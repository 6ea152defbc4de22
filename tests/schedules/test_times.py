"""Cron arithmetic, missed nights, and `flywheel schedule show` errors (no server needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from flows.cli import app
from schedules.times import next_runs, superseded_by

NOW = datetime(2025, 3, 29, 12, 0, tzinfo=UTC)


def test_next_runs_follow_the_time_zone_across_dst():
    ticks = next_runs("0 2 * * *", "Europe/Berlin", NOW, 3)
    # Berlin moves to summer time on 2025-03-30 at 02:00, so 02:00 local does not exist that day.
    assert ticks[0].astimezone(UTC).strftime("%m-%d %H:%M") == "03-30 01:00"
    assert len(ticks) == 3 and all(t > NOW for t in ticks)


@pytest.mark.parametrize(("scheduled", "expected"), [
    (NOW - timedelta(hours=3), None),                   # late within its own night: runs
    (NOW - timedelta(days=2, hours=10), datetime(2025, 3, 28, 2, 0, tzinfo=UTC)),  # missed night
])
def test_superseded_by(scheduled, expected):
    assert superseded_by("0 2 * * *", "UTC", scheduled, NOW) == expected


@pytest.mark.parametrize(("args", "needle"), [
    (["--cron", "0 25 * * *"], "--cron: cron string '0 25 * * *' is invalid"),
    (["--cron", "* * *"], "--cron: cron string '* * *' has 3 fields, expected 5"),
    (["--timezone", "Mars/Olympus"], "--timezone: unknown time zone 'Mars/Olympus'"),
])
def test_show_rejects_bad_values_in_one_line(args, needle):
    result = CliRunner().invoke(app, ["schedule", "show", *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert result.output.strip().count("\n") == 0


def test_show_prints_five_ticks(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[schedule]\ncron = "30 4 * * 1"\ntimezone = "America/New_York"\n')
    result = CliRunner().invoke(app, ["schedule", "show", "--config", str(config)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("  ")]
    assert len(lines) == 5 and all(" 04:30 E" in line for line in lines)


def test_bad_cron_in_config_file_names_key_and_file(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[schedule]\ncron = "every night"\n')
    result = CliRunner().invoke(app, ["schedule", "show", "--config", str(config)])
    assert result.exit_code == 2
    assert "`schedule.cron` = 'every night'" in result.output and str(config) in result.output
