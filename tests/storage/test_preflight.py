"""The data-root checks made before a run writes anything: one line naming the path and fix."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from storage.catalog import Catalog
from storage.preflight import DataRootUnusable, check_catalog, check_data_root


def test_a_new_or_existing_folder_passes(tmp_path):
    check_data_root(tmp_path)
    check_data_root(tmp_path / "not" / "yet")
    Catalog(tmp_path).ensure_run("r", "{}")
    check_catalog(tmp_path)
    check_catalog(tmp_path / "no-catalog-yet")


def test_a_data_root_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    for root in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(DataRootUnusable, match="is a file, not a folder"):
            check_data_root(root)


def test_a_read_only_data_root(tmp_path, monkeypatch):
    monkeypatch.setattr("storage.preflight.os.access", lambda path, mode: False)
    with pytest.raises(DataRootUnusable, match="not writable"):
        check_data_root(tmp_path)


def test_a_full_disk(tmp_path):
    with pytest.raises(DataRootUnusable, match=r"MiB free on its disk, a run needs at least"):
        check_data_root(tmp_path, min_free_bytes=1 << 60)


@pytest.mark.parametrize("damage", [b"not a database at all" * 100, None])
def test_a_damaged_catalog(tmp_path, damage):
    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    data = catalog.path.read_bytes()
    catalog.path.write_bytes(damage if damage is not None else data[: len(data) // 3])
    with pytest.raises(DataRootUnusable, match=r"cannot be read .*restore it from a backup"):
        check_catalog(tmp_path)


def test_a_catalog_held_by_another_process_names_its_pid(tmp_path):
    Catalog(tmp_path).ensure_run("r", "{}")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
         "print('open', flush=True); time.sleep(60)", str(tmp_path / "catalog.duckdb")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        started = time.monotonic()
        with pytest.raises(DataRootUnusable, match=rf"locked by process {holder.pid}"):
            check_catalog(tmp_path, wait=0.5)
        assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
