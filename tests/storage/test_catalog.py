import time

import duckdb
import pytest

from storage.catalog import Catalog, stages
from storage.datasets import dataset_path, write_atomic
from storage.recovery import check_recorded


def _write(tmp_path, fingerprint="f" * 32):
    rows = [{"problem_id": "p", "run_id": "r", "round": 0, "text": "1+1", "reference": "2",
             "level": 1, "source": "seed", "proposal_id": "q"}]
    return write_atomic("problems", rows, dataset_path(tmp_path, "r", 0, "problems", fingerprint))


def test_completed_stage_is_found_with_its_datasets(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    assert catalog.completed_datasets("r", "f" * 32) is None
    written = _write(tmp_path)
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[written], inputs={},
                             metrics={"valid": 1})
    recorded = catalog.completed_datasets("r", "f" * 32)
    assert recorded["problems"]["rows"] == 1
    assert check_recorded(recorded) is None
    assert catalog.query("SELECT count(*) AS n FROM problems")[0]["n"] == 1
    assert catalog.query("SELECT value FROM metrics WHERE name = 'valid'")[0]["value"] == 1.0


def test_failed_stage_is_not_done(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record_failed(run_id="r", round_index=0, stage="train", fingerprint="a" * 32,
                          started_at=time.time(), error="RuntimeError: boom")
    assert catalog.completed_datasets("r", "a" * 32) is None
    assert catalog.stage_rows("r")[0]["status"] == "failed"


def test_check_recorded_detects_changed_and_missing_files(tmp_path):
    written = _write(tmp_path)
    info = {"problems": {"path": str(written.path), "rows": 1, "checksum": written.checksum}}
    assert check_recorded(info) is None
    written.path.write_bytes(written.path.read_bytes()[:-10])
    assert "truncated" in check_recorded(info)[1]
    written.path.unlink()
    assert "missing" in check_recorded(info)[1]


def test_run_status_and_last_decided_round(tmp_path):
    catalog = Catalog(tmp_path)
    assert catalog.run_status("r") is None and catalog.last_decided_round("r") == 0
    catalog.ensure_run("r", "{}")
    assert catalog.run_status("r") == "running" and catalog.last_decided_round("r") == 0
    for index in (1, 2):
        catalog.record_round(run_id="r", round_index=index, incumbent="a", candidate="b",
                             incumbent_accuracy=0.1, candidate_accuracy=0.2, promoted=True,
                             reason="better")
    catalog.set_run_status("r", "failed")
    assert catalog.run_status("r") == "failed" and catalog.last_decided_round("r") == 2
    assert catalog.run_status("other") is None and catalog.last_decided_round("other") == 0


def test_catalog_is_closed_between_operations(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    other = duckdb.connect(str(catalog.path), read_only=True)
    assert other.execute("SELECT run_id FROM runs").fetchall() == [("r",)]
    other.close()


def test_a_damaged_file_is_left_out_of_its_view_not_fatal(tmp_path, caplog):
    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    first = _write(tmp_path, fingerprint="a" * 32)
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="a" * 32,
                             started_at=time.time(), outputs=[first], inputs={})
    first.path.write_bytes(first.path.read_bytes()[:-10])  # the first file of its kind
    second = write_atomic("problems", [{"problem_id": "p2", "run_id": "r", "round": 1,
                                        "text": "2+2", "reference": "4", "level": 1,
                                        "source": "seed", "proposal_id": "q2"}],
                          dataset_path(tmp_path, "r", 1, "problems", "b" * 32))
    with caplog.at_level("WARNING", logger="flywheel.catalog"):
        catalog.record_completed(run_id="r", round_index=1, stage="synthesize",
                                 fingerprint="b" * 32, started_at=time.time(), outputs=[second],
                                 inputs={})
    assert catalog.query("SELECT problem_id FROM problems") == [{"problem_id": "p2"}]
    assert any(first.path.name in r.getMessage() for r in caplog.records)


def test_paths_are_recorded_relative_to_the_data_root_and_old_ones_migrate(tmp_path):
    catalog = Catalog(tmp_path / "root")
    catalog.ensure_run("r", "{}")
    written = _write(tmp_path / "root")
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[written], inputs={})
    with duckdb.connect(str(catalog.path)) as con:
        stored = con.execute("SELECT path FROM datasets").fetchone()[0]
        assert stored == "runs/r/round-000/problems-ffffffffffff.parquet"
        con.execute("UPDATE datasets SET path = '/elsewhere/old-root/' || path")  # an old catalog
    # read as this data root's file before and after the next process's first writable
    # connection migrates it (a process ensures the tables and migrations once per catalog)
    assert catalog.completed_datasets("r", "f" * 32)["problems"]["path"] == str(written.path)
    catalog = Catalog(tmp_path / "root")
    catalog.ensure_run("r", "{}")
    with duckdb.connect(str(catalog.path), read_only=True) as con:
        assert con.execute("SELECT path FROM datasets").fetchone()[0] == stored, "migrated"
    assert catalog.completed_datasets("r", "f" * 32)["problems"]["path"] == str(written.path)


def test_a_stage_write_refreshes_the_views_of_its_own_kinds_only(tmp_path, monkeypatch):
    import storage.catalog.connection as connection

    refreshed = []
    original = connection.refresh_views
    monkeypatch.setattr(connection, "refresh_views",
                        lambda con, resolve, kinds: (refreshed.append(set(kinds)),
                                                     original(con, resolve, kinds)))
    catalog = Catalog(tmp_path)
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[_write(tmp_path)], inputs={})
    assert refreshed == [{"problems"}]
    assert catalog.query("SELECT count(*) AS n FROM problems")[0]["n"] == 1
    # a discarded stage's kinds are refreshed from what it had recorded: its rows leave the view
    catalog.discard_stage("r", "f" * 32, "damaged")
    assert refreshed[-1] == {"problems"}
    assert catalog.recorded_stage("r", "f" * 32) is None  # discarded: to be computed


def test_recorded_stage_says_completed_or_gate_failed_with_the_datasets(tmp_path):
    catalog = Catalog(tmp_path)
    assert catalog.recorded_stage("r", "f" * 32) is None
    catalog.record_failed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                          started_at=time.time(), error="RuntimeError: boom")
    assert catalog.recorded_stage("r", "f" * 32) is None  # failed: to be computed
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[_write(tmp_path)], inputs={},
                             status="gate_failed", error="a gate failed")
    failed = catalog.recorded_stage("r", "f" * 32)
    assert failed.status == "gate_failed" and set(failed.datasets) == {"problems"}
    assert catalog.completed_datasets("r", "f" * 32) is None
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[_write(tmp_path)], inputs={})
    done = catalog.recorded_stage("r", "f" * 32)
    assert (done.status, set(done.datasets), done.outputs) == ("completed", {"problems"}, 1)
    assert done.datasets == catalog.completed_datasets("r", "f" * 32)
    catalog.record_failed(run_id="r", round_index=0, stage="synthesize", fingerprint="f" * 32,
                          started_at=time.time(), error="a later attempt")
    assert catalog.recorded_stage("r", "f" * 32).status == "completed"  # done stays done


def _connections(monkeypatch):
    """A list that grows by one every time the catalog attaches its file (one operation, or
    operations nested in it)."""
    import storage.catalog.connection as connection

    opened = []
    original = connection._ATTACHMENTS.database

    def database():
        opened.append(1)
        return original()

    monkeypatch.setattr(connection._ATTACHMENTS, "database", database)
    return opened


def test_a_run_s_recorded_stages_are_read_once_until_the_catalog_changes(tmp_path, monkeypatch):
    catalog = Catalog(tmp_path)
    for fingerprint in ("a" * 32, "b" * 32):
        catalog.record_completed(run_id="r", round_index=0, stage="synthesize",
                                 fingerprint=fingerprint, started_at=time.time(),
                                 outputs=[_write(tmp_path, fingerprint)], inputs={})
    opened = _connections(monkeypatch)
    assert catalog.recorded_stage("r", "b" * 32).status == "completed"
    reader = Catalog(tmp_path)  # another instance of this process, e.g. a round's RunContext
    assert reader.recorded_stage("r", "a" * 32).status == "completed"
    assert not opened, "the writer read the run's stages on the connection that wrote them"
    stages._RECORDED.clear()  # nothing read yet, as in a resume's fresh process
    assert reader.recorded_stage("r", "a" * 32).status == "completed"
    assert reader.recorded_stage("r", "b" * 32).status == "completed"
    assert reader.recorded_stage("r", "c" * 32) is None
    assert len(opened) == 1, "one connection for every done check of an unchanged catalog"
    # a write through another Catalog of this process is seen at once
    catalog.discard_stage("r", "a" * 32, "damaged")
    assert reader.recorded_stage("r", "a" * 32) is None
    assert reader.recorded_stage("r", "b" * 32).status == "completed"


def test_recorded_stages_see_another_process_s_write(tmp_path):
    import subprocess
    import sys

    catalog = Catalog(tmp_path)
    catalog.record_completed(run_id="r", round_index=0, stage="synthesize", fingerprint="a" * 32,
                             started_at=time.time(), outputs=[_write(tmp_path)], inputs={})
    assert catalog.recorded_stage("r", "a" * 32).status == "completed"
    subprocess.run([sys.executable, "-c", "import sys; from storage.catalog import Catalog; "
                    "Catalog(sys.argv[1]).discard_stage('r', 'a' * 32, 'damaged')",
                    str(tmp_path)], check=True)
    assert catalog.recorded_stage("r", "a" * 32) is None


def test_each_operation_attaches_the_catalog_and_releases_it_after(tmp_path):
    """While an operation runs another process cannot open the catalog; after it, it can, and
    what it wrote is checkpointed into the file (no write-ahead log left)."""
    import subprocess
    import sys

    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    probe = ("import duckdb, sys\ntry:\n    duckdb.connect(sys.argv[1]).close()\n"
             "    print('opened')\nexcept duckdb.Error as exc:\n    print(exc)")

    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(catalog.path)], check=True,
                              capture_output=True, text=True).stdout.strip()

    with catalog.connect() as con:
        con.execute("UPDATE runs SET status = 'completed' WHERE run_id = 'r'")
        assert "Could not set lock" in other_process()
    assert other_process() == "opened"
    assert not catalog.path.with_name(catalog.path.name + ".wal").exists()
    assert catalog.run_status("r") == "completed"


def test_an_operation_inside_another_shares_its_attachment(tmp_path):
    import storage.catalog.connection as connection

    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")
    with catalog.connect() as outer:
        assert catalog.run_status("r") is not None  # a read inside a write: the same file
        assert len(connection._ATTACHMENTS.attached) == 1
        outer.execute("SELECT 1")
    assert connection._ATTACHMENTS.attached == {}
    with catalog.connect(read_only=True), pytest.raises(RuntimeError, match="inside a read-only"):
        catalog.ensure_run("s", "{}")
    assert catalog.run_status("s") is None


def test_threads_record_and_read_the_catalog_at_once(tmp_path):
    import threading

    catalog = Catalog(tmp_path)
    errors = []

    def work(index: int) -> None:
        try:
            for round_index in range(5):
                run = f"r{index}"
                Catalog(tmp_path).ensure_run(run, "{}")
                catalog.record_completed(
                    run_id=run, round_index=round_index, stage="synthesize",
                    fingerprint=f"{index}-{round_index}", started_at=time.time(), outputs=[],
                    inputs={}, metrics={"m": float(index)})
                assert catalog.recorded_stage(run, f"{index}-{round_index}") is not None
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert catalog.query("SELECT count(*) AS n FROM stages")[0]["n"] == 30


def test_a_forked_child_uses_a_database_of_its_own(tmp_path):
    """After a fork the child attaches the catalog to a new database; the parent's copy is
    never freed there (DuckDB's destructor crashes in a child without its threads), also in a
    fork that runs Python before exec (`preexec_fn`, as Ray's launches do)."""
    import os
    import subprocess

    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")  # the parent's database exists now
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its own catalog read works
        try:
            os._exit(0 if Catalog(tmp_path).run_status("r") == "running" else 1)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit status
            os._exit(2)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert subprocess.run(["true"], preexec_fn=lambda: None, check=False).returncode == 0
    assert catalog.run_status("r") == "running"
