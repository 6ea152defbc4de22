"""Stop a real `flywheel run` at five points (kill -9, SIGTERM, Ctrl-C's SIGINT), `flywheel
resume` after each, and compare the result with an uninterrupted run of the same config: same
fingerprints, same row counts, and byte-identical files (problems, rollouts, verdicts,
curriculum, train rows, evals, and the checkpoint's weights, since training resumes exactly from
its last saved step). A checkpoint folder without its catalog row and temporary files are
covered in tests/storage/test_recovery.py and by bench/chaos.py's random kills; each extra kill
here costs a process start (~5 s of CPU).

The stop points come from the test hook `pause_point` (storage/recovery.py): the child writes
the point's name to a marker file and sleeps there until it is stopped. The signal goes to the
whole process group, as a dying machine (SIGKILL), `kill` (SIGTERM) or Ctrl-C in a terminal
(SIGINT) would. The first process runs with its own temporary Prefect server (no
PREFECT_API_URL; flows/prefect_server.py) whose database lives in its PREFECT_HOME: the server
must die with the killed run, and that folder is deleted after the kill; every later process
talks to the session's server, which has never seen the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.catalog import Catalog
from tests.flows.runs import child_env, snapshot, start, wait_paused

RUN_ID = "crashy"
CONFIG = """
rounds = 0
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
enabled = false  # Great Expectations costs seconds per process; gates have their own tests
"""
# (point to stop at, what the next resume must report in one line, the signal that stops it)
KILLS = [
    ("synthesize:0:wrote-proposals", "proposals-", signal.SIGKILL),  # a file, no row
    ("rollout:0:wrote-rollouts", "rollouts-", signal.SIGKILL),       # the same
    ("verify:0:done", None, signal.SIGTERM),                         # between verify and curate
    ("train:0:step-15", "resuming from the trainer's checkpoint at step 10", signal.SIGKILL),
    ("evaluate:0:start", None, signal.SIGINT),                       # Ctrl-C inside evaluate
]
STOP_SECONDS = 15  # SIGINT/SIGTERM: the process is gone within this, with one line


def _stop(proc: subprocess.Popen, sig: int) -> tuple[int, float]:
    """Send `sig` to the whole process group (as a dying machine, `kill` or Ctrl-C in a
    terminal would); (exit status, seconds until the process was gone)."""
    started = time.monotonic()
    os.killpg(proc.pid, sig)
    code = proc.wait(timeout=60)
    return code, time.monotonic() - started


def _server_pids(prefect_home: Path) -> list[int]:
    """The temporary Prefect servers recorded under a PREFECT_HOME (flows/prefect_server.py)."""
    return [int(p.stem) for p in (prefect_home / "flywheel-servers").glob("*.json")]


def _gone_within(pid: int, seconds: float) -> bool:
    from flows.prefect_server import is_alive

    deadline = time.monotonic() + seconds
    while is_alive(pid, None):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def crashed_and_reference(tmp_path_factory, prefect_server):
    tmp = tmp_path_factory.mktemp("resume")
    config = tmp / "run.toml"
    config.write_text(CONFIG)
    marker = tmp / "paused"
    reference_root, crash_root = tmp / "reference", tmp / "crash"
    reference_log = tmp / "reference.log"
    reference = start(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                        str(reference_root)], child_env(tmp, prefect_server), reference_log)
    logs, refused, prefect_db_existed, stops, server_gone = [], None, False, [], None
    for index, (point, _, sig) in enumerate(KILLS):
        log = tmp / f"step-{index}.log"
        if index == 0:  # Prefect's own temporary server, its database in PREFECT_HOME
            args = ["run", "--config", str(config), "--run-id", RUN_ID]
            env = child_env(tmp, None, FLYWHEEL_TEST_PAUSE_AT=point)
        else:
            args = ["resume", RUN_ID]
            env = child_env(tmp, prefect_server, FLYWHEEL_TEST_PAUSE_AT=point)
        marker.unlink(missing_ok=True)
        proc = start([*args, "--data-root", str(crash_root)], env, log)
        wait_paused(proc, marker, point, log)
        if index == 0:  # while it runs, a second process on the same run id is refused
            refused = subprocess.run(
                [sys.executable, "-m", "flows.cli", "resume", RUN_ID, "--data-root",
                 str(crash_root)], env=child_env(tmp, prefect_server), capture_output=True,
                text=True, timeout=120, check=False)
            refused = (refused.returncode, refused.stderr, proc.pid)
        servers = _server_pids(tmp / "prefect-home-own") if index == 0 else []
        stops.append((sig, *_stop(proc, sig)))
        logs.append(log.read_text())
        if index == 0:  # the run's own server dies with it (parent-death signal)
            server_gone = len(servers) == 1 and _gone_within(servers[0], 10)
            prefect_db_existed = any((tmp / "prefect-home-own").glob("*.db"))
            shutil.rmtree(tmp / "prefect-home-own")
    status = subprocess.run([sys.executable, "-m", "flows.cli", "status", RUN_ID,
                             "--data-root", str(crash_root)], capture_output=True, text=True,
                            timeout=120, check=False).stdout
    final_log = tmp / "final.log"
    final = start(["resume", RUN_ID, "--data-root", str(crash_root)],
                  child_env(tmp, prefect_server), final_log)
    assert final.wait(timeout=600) == 0, final_log.read_text()
    logs.append(final_log.read_text())
    assert reference.wait(timeout=600) == 0, reference_log.read_text()
    return {
        "reference": snapshot(reference_root, RUN_ID), "crashed": snapshot(crash_root, RUN_ID),
        "logs": logs, "refused": refused, "prefect_db_existed": prefect_db_existed,
        "stops": stops, "server_gone": server_gone,
        "status_after_kill": status,
        "crash_root": crash_root, "config": config, "tmp": tmp, "prefect": prefect_server,
    }


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(crashed_and_reference):
    reference, crashed = crashed_and_reference["reference"], crashed_and_reference["crashed"]
    assert len(reference["stages"]) == 9  # base, baseline and the 7 stages of round 0
    assert crashed["stages"] == reference["stages"]  # fingerprints and row counts
    assert crashed["files"] == reference["files"]  # byte-identical files and weights
    assert crashed["names"] == reference["names"]  # and no other file in the run's folder


@pytest.mark.slow
def test_each_interruption_is_reported_in_one_line(crashed_and_reference):
    logs = crashed_and_reference["logs"]
    for index, (point, expected, sig) in enumerate(KILLS):
        resumed = logs[index + 1]  # what the next process said on resuming
        lines = resumed.splitlines()
        killed = sig == signal.SIGKILL  # a signal the run catches releases its lock itself
        assert any("lock taken over" in line for line in lines) == killed, (point, resumed)
        if expected is not None:
            hits = [line for line in lines if expected in line]
            assert hits, (point, resumed)
            assert all(str(crashed_and_reference["crash_root"]) in h for h in hits), hits
    assert "Traceback" not in "".join(logs)


@pytest.mark.slow
def test_sigint_and_sigterm_stop_the_run_in_seconds_with_one_line(crashed_and_reference):
    stopped = [(sig, code, seconds, log) for (sig, code, seconds), log
               in zip(crashed_and_reference["stops"], crashed_and_reference["logs"][:len(KILLS)],
                      strict=True)
               if sig != signal.SIGKILL]
    assert {sig for sig, *_ in stopped} == {signal.SIGINT, signal.SIGTERM}
    for sig, code, seconds, log in stopped:
        assert code == 128 + sig and seconds < STOP_SECONDS, (sig, code, seconds, log)
        last = log.strip().splitlines()[-1]
        assert last.startswith(f"interrupted by {signal.Signals(sig).name} ") and (
            f"`flywheel resume {RUN_ID}` continues" in last), log
    evaluate_stop = crashed_and_reference["logs"][KILLS.index(
        ("evaluate:0:start", None, signal.SIGINT))]
    assert "during evaluate (round 0)" in evaluate_stop.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_killed_runs_own_prefect_server_dies_with_it(crashed_and_reference):
    assert crashed_and_reference["server_gone"]


@pytest.mark.slow
def test_second_run_on_a_running_run_id_is_refused(crashed_and_reference):
    returncode, stderr, holder = crashed_and_reference["refused"]
    assert returncode == 3
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert f"pid {holder}" in stderr and "started" in stderr and "already running" in stderr


@pytest.mark.slow
def test_status_says_interrupted_after_a_kill(crashed_and_reference):
    first_line = crashed_and_reference["status_after_kill"].splitlines()[0]
    assert first_line.startswith(f"run {RUN_ID}: interrupted") and "flywheel resume" in first_line


@pytest.mark.slow
def test_deleting_prefect_home_between_crash_and_resume_loses_nothing(crashed_and_reference):
    assert crashed_and_reference["prefect_db_existed"]  # the killed run's Prefect DB was there
    assert not (crashed_and_reference["tmp"] / "prefect-home-own").exists()
    assert crashed_and_reference["crashed"] == crashed_and_reference["reference"]


@pytest.mark.slow
def test_config_change_mid_run_reruns_downstream_only(crashed_and_reference):
    """Runs last: it changes the crashed run. train.warmup.learning_rate changed -> train,
    evaluate and promote rerun with new fingerprints; base, baseline, synthesize .. curate are
    skipped."""
    crash_root, tmp = crashed_and_reference["crash_root"], crashed_and_reference["tmp"]
    changed = tmp / "changed.toml"
    changed.write_text(crashed_and_reference["config"].read_text().replace(
        "[train.warmup]\n", "[train.warmup]\nlearning_rate = 0.002\n"))
    before = {(s[0], s[1]): s[2] for s in crashed_and_reference["crashed"]["stages"]}
    log = tmp / "changed.log"
    proc = start(["run", "--config", str(changed), "--run-id", RUN_ID, "--data-root",
                   str(crash_root)], child_env(tmp, crashed_and_reference["prefect"]), log)
    assert proc.wait(timeout=600) == 0, log.read_text()
    rows = Catalog(crash_root).query(
        "SELECT round, stage, fingerprint FROM stages WHERE run_id = ? AND status = 'completed'"
        " ORDER BY finished_at", [RUN_ID])
    latest = {(r["round"], r["stage"]): r["fingerprint"] for r in rows}
    rerun = {key for key in latest if latest[key] != before[key]}
    assert rerun == {(0, "train"), (0, "evaluate"), (0, "promote")}
    assert len(rows) == len(before) + 3  # nothing upstream was computed again
