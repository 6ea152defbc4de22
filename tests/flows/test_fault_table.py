"""The fault table: each fault a data root can meet gives its exit status and at most three lines
without a traceback (besides the progress lines of the stages that ran before it), and once the
cause is removed `flywheel resume` finishes with files byte-identical to an uninterrupted run.

Every case starts from a copy of the same interrupted run (killed with SIGKILL after its curate
stage), so each resume has real work left: train, evaluate and promote.

    fault                    shown by           exit   after the cause is removed
    missing datasets row     validate           5      resume recomputes the stage
    damaged first file       validate           5      resume recomputes it and its dependents
    truncated catalog        resume             2      the catalog restored from a backup
    locked catalog           resume             3      the holding process ended
    read-only data root      resume             2      the file system writable again
    full disk                resume (mid-run)   4      space freed (the writer unpatched)
    missing model folder     resume             2      the folder back in place
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from tests.flows.runs import child_env, snapshot, start, wait_paused

RUN_ID = "faulty"
CONFIG = """
rounds = 0
[model]
path = {model!r}
[domain]
seed_problems = 200
min_level = 1
max_level = 2
heldout_per_level = 5
[rollout]
samples_per_problem = 2
[train]
batch_size = 16
save_steps = 10
[train.warmup]
max_steps = 30
[gates]
enabled = false  # Great Expectations costs seconds per process; `validate` still runs the suites
"""
# writes half of an `evals` file, then fails as a full disk does
FULL_DISK = """
import errno, sys
import storage.datasets as datasets
real = datasets.pq.write_table
def write_table(table, where, **kwargs):
    if "evals-" in str(where):
        with open(where, "wb") as out:
            out.write(b"PAR1" + bytes(1000))
        raise OSError(errno.ENOSPC, "No space left on device", str(where))
    return real(table, where, **kwargs)
datasets.pq.write_table = write_table
from flows.cli import main
sys.argv[0] = "flywheel"
main()
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prefect_server):
    """(the reference snapshot, the interrupted data root, the config, the model folder, tmp)."""
    tmp = tmp_path_factory.mktemp("faults")
    model = tmp / "model"
    from models.tiny import build_tiny_model

    build_tiny_model(model, hidden_size=64, num_layers=2, head_dim=16, intermediate_size=128,
                     init_seed=0)
    config = tmp / "run.toml"
    config.write_text(CONFIG.format(model=str(model)))
    reference_root, interrupted_root = tmp / "reference", tmp / "interrupted"
    reference = start(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                       str(reference_root)], child_env(tmp, prefect_server), tmp / "reference.log")
    point = "curate:0:done"
    crash = start(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                   str(interrupted_root)],
                  child_env(tmp, prefect_server, FLYWHEEL_TEST_PAUSE_AT=point),
                  tmp / "interrupted.log")
    wait_paused(crash, tmp / "paused", point, tmp / "interrupted.log")
    os.killpg(crash.pid, signal.SIGKILL)
    crash.wait()
    assert reference.wait(timeout=600) == 0, (tmp / "reference.log").read_text()
    return {"reference": snapshot(reference_root, RUN_ID), "interrupted": interrupted_root,
            "config": config, "model": model, "tmp": tmp, "prefect": prefect_server}


def _flywheel(args: list[str], runs: dict, python: tuple[str, ...] = ("-m", "flows.cli")
              ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python, *args], capture_output=True, text=True,
                          env=child_env(runs["tmp"], runs["prefect"]), timeout=600, check=False)


# ---- the faults: each a context manager around the faulted command; leaving it removes the cause


@contextlib.contextmanager
def missing_datasets_row(root: Path, runs: dict) -> Iterator[list[str]]:
    with duckdb.connect(str(root / "catalog.duckdb")) as con:
        con.execute("DELETE FROM datasets WHERE kind = 'verdicts'")
    yield ["validate", RUN_ID]


@contextlib.contextmanager
def damaged_first_file(root: Path, runs: dict) -> Iterator[list[str]]:
    (problems,) = (root / "runs" / RUN_ID / "round-000").glob("problems-*.parquet")
    problems.write_bytes(problems.read_bytes()[:200])
    yield ["validate", RUN_ID]


@contextlib.contextmanager
def truncated_catalog(root: Path, runs: dict) -> Iterator[list[str]]:
    catalog = root / "catalog.duckdb"
    backup = catalog.read_bytes()
    catalog.write_bytes(backup[:4096])
    yield ["resume", RUN_ID]
    catalog.write_bytes(backup)


@contextlib.contextmanager
def locked_catalog(root: Path, runs: dict) -> Iterator[list[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
         "print('open', flush=True); time.sleep(600)", str(root / "catalog.duckdb")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        yield ["resume", RUN_ID]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@contextlib.contextmanager
def read_only_data_root(root: Path, runs: dict) -> Iterator[list[str]]:
    """A read-only mount when this user can mount (root ignores file modes), else mode 0555."""
    if os.geteuid() != 0:
        root.chmod(0o555)
        yield ["resume", RUN_ID]
        root.chmod(0o755)
        return
    copy = root.with_name(root.name + "-copy")
    root.rename(copy)
    root.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=512m", "tmpfs", str(root)):
        pytest.skip("root without the right to mount: a read-only data root cannot be made")
    shutil.copytree(copy, root, symlinks=True, dirs_exist_ok=True)
    assert _mount("-o", "remount,ro", str(root))
    yield ["resume", RUN_ID]
    assert _mount("-o", "remount,rw", str(root))


@contextlib.contextmanager
def full_disk(root: Path, runs: dict) -> Iterator[list[str]]:
    yield ["resume", RUN_ID]  # run through FULL_DISK (see `_faulted`)


@contextlib.contextmanager
def missing_model_folder(root: Path, runs: dict) -> Iterator[list[str]]:
    model = runs["model"]
    moved = model.with_name("model-moved")
    model.rename(moved)
    try:
        yield ["resume", RUN_ID]
    finally:
        moved.rename(model)


# (fault, exit status, what the first line says)
CASES: list[tuple[Callable, int, str]] = [
    (missing_datasets_row, 5, "failed"),
    (damaged_first_file, 5, "failed"),
    (truncated_catalog, 2, "cannot be read"),
    (locked_catalog, 3, "is locked by process"),
    (read_only_data_root, 2, "read-only file system" if os.geteuid() == 0 else "not writable"),
    (full_disk, 4, "stage evaluate (round 0) failed: the disk is full"),
    (missing_model_folder, 2, "no such folder"),
]


def _lines(result: subprocess.CompletedProcess) -> list[str]:
    """What the command said, less the progress lines of the stages it got through (`INFO`)."""
    return [line for line in (result.stdout + result.stderr).splitlines()
            if line.strip() and not line.startswith("INFO ")]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "code", "says"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_fault_is_short_and_resume_then_matches_an_uninterrupted_run(runs, tmp_path, fault,
                                                                       code, says):
    root = tmp_path / "data"
    shutil.copytree(runs["interrupted"], root, symlinks=True)
    try:
        with fault(root, runs) as command:
            python = ("-c", FULL_DISK) if fault is full_disk else ("-m", "flows.cli")
            faulted = _flywheel([*command, "--data-root", str(root)], runs, python)
        lines = _lines(faulted)
        assert faulted.returncode == code, faulted.stdout + faulted.stderr
        assert "Traceback" not in faulted.stdout + faulted.stderr
        if command[0] == "resume":  # validate prints one line per checked file and a summary
            assert len(lines) <= 3, lines
            assert says in lines[-1] and lines[-1].startswith("error: "), lines
        else:
            assert any(says in line for line in lines), lines
        if fault is full_disk:
            assert "traceback in" in lines[-1]
            log = root / "logs" / f"{RUN_ID}.log"
            assert "OSError: [Errno 28] No space left on device" in log.read_text()
        resumed = _flywheel(["resume", RUN_ID, "--data-root", str(root)], runs)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert snapshot(root, RUN_ID) == runs["reference"]
    finally:
        if fault is read_only_data_root and os.geteuid() == 0:
            subprocess.run(["umount", str(root)], capture_output=True, check=False)


@pytest.mark.slow
def test_a_run_killed_before_its_catalog_existed_resumes_identical(runs, tmp_path):
    root = tmp_path / "data"
    point = "run:recorded"
    log = tmp_path / "killed.log"
    proc = start(["run", "--config", str(runs["config"]), "--run-id", RUN_ID, "--data-root",
                  str(root)], child_env(tmp_path, runs["prefect"], FLYWHEEL_TEST_PAUSE_AT=point),
                 log)
    wait_paused(proc, tmp_path / "paused", point, log)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (root / "catalog.duckdb").exists()
    resumed = _flywheel(["resume", RUN_ID, "--data-root", str(root)], runs)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert snapshot(root, RUN_ID) == runs["reference"]


def test_a_run_that_recorded_nothing_asks_for_its_config(tmp_path):
    root = tmp_path / "data"
    (root / "runs" / RUN_ID).mkdir(parents=True)  # killed before it wrote its config
    result = subprocess.run([sys.executable, "-m", "flows.cli", "resume", RUN_ID, "--data-root",
                             str(root)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: run {RUN_ID!r} stopped before it recorded its config; give it again: "
        f"`flywheel resume {RUN_ID} --config FILE`"]
