"""`flywheel audit --sql` is bounded: a query stops at `--timeout` (exit 124) or at Ctrl-C (exit
130, within a second), prints at most `--limit` rows and says how many it cut (CSV is written a
batch at a time, never held whole), uses at most the snapshot's memory, spills only inside the
data root, and no SQL can lift any of these limits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import duckdb
import pytest

from flows import exit_codes
from storage.audit.custom_queries import BATCH_ROWS, sql, write_sql_csv
from storage.audit.snapshot import AuditError, open_run
from tests.security.test_audit_readonly import RUN, _audit, tiny_run

ROOT = Path(__file__).resolve().parents[2]
# Runs for hours: every one of 10^16 pairs is checked, none matches
LONG = "SELECT count(*) FROM range(100000000) a, range(100000000) b WHERE a.range + b.range = -1"


@pytest.fixture
def data_root(tmp_path):
    return tiny_run(tmp_path / "data")


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_a_query_past_the_timeout_is_stopped_in_one_line(data_root):
    started = time.monotonic()
    result = _audit(data_root, "--sql", LONG, "--timeout", "1")
    elapsed = time.monotonic() - started
    assert result.exit_code == exit_codes.TIMED_OUT == 124, result.output
    assert "ran past --timeout 1 s and was stopped" in _one_error_line(result)
    assert elapsed < 5, f"took {elapsed:.1f} s to stop"


PROBE = """
import sys
import storage.audit.answer as answer
from flows.cli import app

bounded = answer.run_bounded

def announce(*args, **kwargs):  # the query starts now: the test may send SIGINT
    print("query started", file=sys.stderr, flush=True)
    return bounded(*args, **kwargs)

answer.run_bounded = announce
app(sys.argv[1:])
"""


def test_ctrl_c_stops_a_running_query_within_a_second(data_root):
    command = [sys.executable, "-c", PROBE, "audit", RUN, "--sql", LONG,
               "--data-root", str(data_root)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        try:
            assert process.stderr.readline().strip() == "query started"
            time.sleep(0.5)  # inside DuckDB by now
            process.send_signal(signal.SIGINT)
            sent = time.monotonic()
            line = process.stderr.readline()
            stopped = time.monotonic() - sent
            rest = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == exit_codes.INTERRUPTED == 130, (line, rest)
    assert line.startswith("error: interrupted by SIGINT (Ctrl-C)"), line
    assert rest == ("", ""), rest
    assert stopped < 1.0, f"took {stopped:.2f} s to stop"


def test_limit_cuts_the_printed_rows_and_says_how_many(data_root):
    query = "SELECT range AS i FROM range(100000)"
    table = _audit(data_root, "--sql", query, "--limit", "3")
    assert table.exit_code == 0, table.output
    assert [line.strip() for line in table.stdout.splitlines()] == [
        "sql", "3 of 100000 rows (--limit 3)", "i", "0", "1", "2"]
    as_json = _audit(data_root, "--sql", query, "--format", "json")  # --sql's default limit
    assert [row["i"] for row in json.loads(as_json.stdout)] == list(range(1000))
    assert as_json.stderr == ("note: 99000 more rows not printed (--limit 1000; raise it to see "
                              "them)\n")
    whole = _audit(data_root, "--sql", "SELECT range AS i FROM range(5); -- five", "--limit", "5",
                   "--format", "json")
    assert len(json.loads(whole.stdout)) == 5 and whole.stderr == ""


def test_csv_is_written_a_batch_at_a_time_up_to_the_limit(data_root):
    query = "SELECT range AS i, md5(range::VARCHAR) AS h FROM range(10000000)"
    con = open_run(data_root, RUN)
    pieces: list[str] = []
    tracemalloc.start()
    try:
        cut = write_sql_csv(con, query, pieces.append, limit=2500)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        con.close()
    assert cut == 10_000_000 - 2500
    assert [piece.count("\n") for piece in pieces] == [1, BATCH_ROWS, BATCH_ROWS, 500]
    assert pieces[0] == "i,h\n" and pieces[1].startswith("0,cfcd208495d565ef66e7dff9f98764da\n")
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB of Python objects: not streamed"
    csv = _audit(data_root, "--sql", query, "--format", "csv", "--limit", "2")
    assert csv.exit_code == 0 and csv.stdout.splitlines() == [
        "i,h", "0,cfcd208495d565ef66e7dff9f98764da", "1,c4ca4238a0b923820dcc509a6f75849b"]
    assert csv.stderr.startswith("note: 9999998 more rows not printed (--limit 2;")


def test_limit_is_one_option_for_samples_and_sql(data_root):
    sample = _audit(data_root, "samples", "problems", "--limit", "2", "--format", "json")
    assert sample.exit_code == 0 and len(json.loads(sample.stdout)) == 2
    assert sample.stderr.startswith("note: 1 more row not printed (--limit 2;")
    for args, message in [
            (["funnel", "--limit", "3"], "--limit works with `samples VIEW` and --sql"),
            (["--sql", "SELECT 1", "--limit", "0"], "--limit 0: must be at least 1"),
            (["samples", "problems", "--limit", "0"], "--limit 0: must be at least 1"),
            (["--sql", "SELECT 1", "--timeout", "0"], "--timeout 0: give the most seconds")]:
        bad = _audit(data_root, *args)
        assert bad.exit_code == 2 and message in _one_error_line(bad), (args, bad.output)


def test_a_query_over_the_memory_limit_fails_in_one_line(data_root):
    con = open_run(data_root, RUN, memory_limit="32MB")  # the CLI's is MEMORY_LIMIT
    try:
        with pytest.raises(AuditError) as refused:  # a list cannot spill
            sql(con, "SELECT length(list(range)) FROM range(10000000)")
    finally:
        con.close()
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--sql: Out of Memory Error"), message
    assert "limits: 30.5 MiB of memory" in message, message


def test_spilling_stays_inside_the_data_root_and_is_removed(data_root):
    con = open_run(data_root, RUN, memory_limit="32MB")  # so that a small sort spills
    try:
        con.execute("SELECT range, md5(range::VARCHAR) FROM range(800000) ORDER BY 2")
        assert con.fetchmany(1)
        spilled = list(data_root.glob(".audit-spill-*/*"))
    finally:
        con.close()
    assert spilled, "the sort did not spill into the data root"
    assert not list(data_root.glob(".audit-spill-*")), "the spill folder outlived the snapshot"


def test_the_snapshot_is_bounded_and_reads_nothing_outside(data_root):
    con = open_run(data_root, RUN)
    try:
        settings = dict(con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('memory_limit',"
            " 'temp_directory', 'enable_external_access', 'lock_configuration',"
            " 'allowed_paths', 'allowed_directories')").fetchall())
    finally:
        con.close()
    spill = Path(settings.pop("temp_directory"))
    assert spill.parent == data_root.resolve() and spill.name.startswith(".audit-spill-")
    dataset = next((data_root / "runs").rglob("*.parquet")).resolve()
    assert settings == {"memory_limit": "953.6 MiB", "enable_external_access": "false",
                        "lock_configuration": "true", "allowed_paths": f"[{dataset}]",
                        "allowed_directories": f"[{spill}/]"}  # DuckDB adds its spill folder


@pytest.mark.parametrize("statement", [
    "SET memory_limit = '100GB'", "RESET memory_limit", "SET temp_directory = '.tmp'",
    "SET max_temp_directory_size = '1TB'", "SET enable_external_access = true",
    "SET allowed_directories = ['/']", "SET allowed_paths = ['/etc/passwd']",
    "SET lock_configuration = false"])
def test_no_statement_can_lift_a_limit(data_root, statement):
    """Below the SELECT-only check of --sql: even on the connection itself, the settings hold."""
    con = open_run(data_root, RUN)
    try:
        with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
            con.execute(statement)
    finally:
        con.close()
