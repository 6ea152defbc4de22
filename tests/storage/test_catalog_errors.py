"""Every command's catalog access fails in one line (storage/catalog/connection.py translates
DuckDB's errors about the file, flows/cli.py `_Group` prints them): a damaged catalog is exit 2
naming the file and how to recover, with nothing written (`run` creates no run folder); a
catalog another process holds is exit 3 naming that process, after a short bounded wait.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.environment import CLI_DEFAULTS
from storage.catalog import Catalog
from storage.catalog.connection import LOCK_WAIT_SECONDS, READ_LOCK_WAIT_SECONDS, catalog_errors
from storage.catalog.errors import CatalogDamaged, CatalogLocked
from storage.datasets import dataset_path, write_atomic

RUN = "r"
COMMANDS = [
    ["status", RUN], ["status", RUN, "--json"], ["runs"], ["runs", "--json"],
    ["checkpoint", RUN], ["audit", RUN, "funnel"], ["report", RUN], ["validate", RUN],
    ["validate", RUN, "--format", "json"], ["config", "show", RUN], ["reverify", RUN],
    ["catalog", "snapshot"], ["resume", RUN], ["run", "--run-id", "new"], ["schedule", "serve"],
    ["schedule", "deploy"],
]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): "dir" if p.is_dir() else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


@pytest.fixture(autouse=True)
def _cli_leaves_no_trace(monkeypatch):
    """`run` and `resume` set environment defaults and signal handlers in this process: undone
    after each test."""
    for key, value in CLI_DEFAULTS.items():
        monkeypatch.setenv(key, os.environ.get(key, value))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.fixture
def data_root(tmp_path):
    """A data root whose catalog records one completed run with one problems file."""
    root = tmp_path / "data"
    catalog = Catalog(root)
    catalog.ensure_run(RUN, "{}")
    written = write_atomic("problems", [
        {"problem_id": "p", "run_id": RUN, "round": 0, "text": "1+1", "reference": "2",
         "level": 1, "source": "seed", "proposal_id": "q", "task": None, "payload": None}],
        dataset_path(root, RUN, 0, "problems", "f" * 32))
    catalog.record_completed(run_id=RUN, round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[written], inputs={}, metrics={})
    catalog.set_run_status(RUN, "completed")
    return root


def _one_line_error(args: list[str], root: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--data-root", str(root)])
    assert "Traceback" not in result.output, (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, repr(result.exception))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
    return result.exit_code, lines[0]


@pytest.mark.parametrize("args", COMMANDS, ids="-".join)
def test_a_truncated_catalog_is_one_line_exit_2_and_nothing_is_written(data_root, args):
    catalog = (data_root / "catalog.duckdb").resolve()
    catalog.write_bytes(catalog.read_bytes()[:4096])
    before = _tree(data_root.parent)
    code, line = _one_line_error(args, data_root)
    assert code == 2, (args, line)
    assert f"catalog {catalog} cannot be read (" in line, line
    assert "restore it from a backup, or move it aside" in line, line
    assert _tree(data_root.parent) == before, args  # no run folder, log or lock either


def test_corruption_found_by_a_later_read_is_the_catalogs_damage(tmp_path):
    path = tmp_path / "catalog.duckdb"
    corrupt = duckdb.Error("Corrupt database file: computed checksum 1 does not match stored "
                           "checksum 2 in block at location 4096")
    short = duckdb.IOException(f'IO Error: Could not read enough bytes from file "{path}": '
                               "attempted to read 4096 bytes from location 8192")
    for damage in (corrupt, short):
        with pytest.raises(CatalogDamaged, match=rf"catalog {path} cannot be read"):
            with catalog_errors(path):
                raise damage
    not_the_catalog = [  # a view's missing Parquet file, a full disk, a SQL error: unchanged
        duckdb.IOException('IO Error: Could not read enough bytes from file "/d/x.parquet"'),
        duckdb.IOException(f'IO Error: Could not write file "{path}.wal": No space left on '
                           "device"),
        duckdb.CatalogException("Catalog Error: Table with name nope does not exist!"),
    ]
    for other in not_the_catalog:
        with pytest.raises(type(other)) as raised, catalog_errors(path):
            raise other
        assert raised.value is other


@pytest.fixture(scope="module")
def held_catalog(tmp_path_factory):
    """A catalog that another process holds open for writing until the module's tests end."""
    root = tmp_path_factory.mktemp("held") / "data"
    catalog = Catalog(root)
    catalog.ensure_run(RUN, "{}")
    catalog.set_run_status(RUN, "completed")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
         "print('open', flush=True); time.sleep(120)", str(catalog.path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "open"
    yield root, holder.pid
    holder.kill()
    holder.wait()
    holder.stdout.close()


@pytest.mark.parametrize("args", [["status", RUN], ["runs"], ["validate", RUN],
                                  ["audit", RUN, "funnel"], ["config", "show", RUN],
                                  ["resume", RUN], ["run", "--run-id", "new"]], ids="-".join)
def test_a_held_catalog_is_exit_3_naming_the_holder_after_a_bounded_wait(
        held_catalog, monkeypatch, args):
    root, pid = held_catalog
    monkeypatch.setattr("storage.catalog.connection.READ_LOCK_WAIT_SECONDS", 0.5)
    before = _tree(root)
    started = time.monotonic()
    code, line = _one_line_error(args, root)
    assert code == 3, (args, line)
    catalog = (root / "catalog.duckdb").resolve()
    assert (f"catalog {catalog} is locked by process {pid} (for more than 0.5 s); wait for it "
            "to finish, or stop it") in line, line
    assert 0.5 <= time.monotonic() - started < 4, args
    assert _tree(root) == before, args


def test_a_writer_is_refused_too_and_every_wait_is_bounded(held_catalog):
    root, pid = held_catalog
    started = time.monotonic()
    with pytest.raises(CatalogLocked, match=f"locked by process {pid}"), \
            Catalog(root).connect(wait=0.3):
        pass
    assert time.monotonic() - started < 3
    # a command someone waits for gives up within seconds; a run's write is more patient
    assert READ_LOCK_WAIT_SECONDS <= 5 < LOCK_WAIT_SECONDS <= 60
