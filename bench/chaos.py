"""Chaos: stop a real `flywheel run` at N random moments (kill -9 or Ctrl-C), resume, compare.

    python bench/chaos.py --kills 20 [--config F] [--seed S] [--out bench/results/chaos.json]

First one uninterrupted run of the config (the reference). Then N times, each in a fresh data
root: start `flywheel run`, pick a target and a signal, stop the whole process group, then
`flywheel resume` it to the end. Targets come in a random order of all stages plus `start`
(so N >= 10 stops hit every one): a stage is hit at a random delay (uniform between 0 and 1.2x
its duration in the reference run) after it starts; `start` at a random delay between the
process start and the first stage, so many of those stops come before the catalog exists. The
signal is SIGKILL or SIGINT (as Ctrl-C in a terminal sends it), alternating. A SIGINT must end
the run by itself within 30 s (the bench records how long it took and the exit status).

A resume is *identical* when the run's completed stages have the reference's fingerprints and
row counts, every recorded file has the reference's checksum (checkpoint weights included),
and the run folder holds exactly the reference's file names (nothing half written, duplicated
or stale is left). A run stopped before it recorded its config (runs/<id>/config.json) is
resumed with `--config`, as `flywheel resume` then asks; every other with plain `resume`.

Every run here starts its own temporary Prefect server (no PREFECT_API_URL; see
flows/prefect_server.py). After each resume the bench looks for any server process started by
the bench that is still alive (by pid, from /proc: a `flows.prefect_server` command line whose
PREFECT_HOME lies in the bench's folder); there must be none.

Prints `N/N resumed identical`, the servers left behind, and the mean resume cost: the wall
time of `flywheel resume` (process start to exit) as a fraction of the reference run's wall
time per round. The default config has one round (the warm-up, `rounds = 0`) so that the
stops spread over every stage kind. A stage start is detected with the test hook of
storage/recovery.py (FLYWHEEL_TEST_PAUSE_AT=<stage>:<round>:start with
FLYWHEEL_TEST_PAUSE_SECONDS=0: announce, do not pause).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN_ID = "chaos"
DEFAULT_CONFIG = """
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
max_steps = 60
"""
START = (-1, "start")  # the target before the first stage
SIGINT_WAIT_SECONDS = 30


def child_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FLYWHEEL_TEST_"))}
    env.update(PREFECT_HOME=str(home), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               **extra)
    return env


def flywheel(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "flows.cli", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def live_servers(work: Path) -> list[int]:
    """Pids of live `flows.prefect_server` processes whose PREFECT_HOME is under `work`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"flows.prefect_server" not in cmdline:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        homes = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"PREFECT_HOME=")]
        if state != "Z" and homes and Path(homes[0]).is_relative_to(work):
            found.append(int(proc.name))
    return found


def snapshot(data_root: Path) -> dict:
    from storage.run_state import completed_state

    return completed_state(data_root, RUN_ID)


def stage_seconds(data_root: Path) -> dict[tuple[int, str], float]:
    from storage.catalog import Catalog

    rows = Catalog(data_root).query(
        "SELECT round, stage, seconds FROM stages WHERE run_id = ? AND status = 'completed'",
        [RUN_ID])
    return {(r["round"], r["stage"]): r["seconds"] for r in rows}


def first_stage_after(work: Path, config: Path) -> float:
    """Seconds from a run's process start to its first stage (`base`), measured once."""
    marker = work / "marker-first"
    env = child_env(work / "home-first", FLYWHEEL_TEST_PAUSE_AT="base:0:start",
                    FLYWHEEL_TEST_PAUSE_FILE=str(marker), FLYWHEEL_TEST_PAUSE_SECONDS="0")
    started = time.monotonic()
    proc = flywheel(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                     str(work / "first")], env, work / "first.log")
    while not marker.exists() and proc.poll() is None:
        time.sleep(0.01)
    seconds = time.monotonic() - started
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seconds


def stop(proc: subprocess.Popen, sig: int) -> tuple[int, float]:
    """Signal the process group; (exit status, seconds until it was gone)."""
    started = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        code = proc.wait(timeout=SIGINT_WAIT_SECONDS if sig != signal.SIGKILL else 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    return code, time.monotonic() - started


def one_stop(index: int, work: Path, config: Path, target: tuple[int, str], sig: int,
             delay: float) -> dict:
    data_root = work / f"kill-{index:02d}"
    marker = work / f"marker-{index:02d}"
    home = work / f"home-{index:02d}"
    round_index, stage = target
    extra = {} if target == START else {
        "FLYWHEEL_TEST_PAUSE_AT": f"{stage}:{round_index}:start",
        "FLYWHEEL_TEST_PAUSE_FILE": str(marker), "FLYWHEEL_TEST_PAUSE_SECONDS": "0"}
    started = time.monotonic()
    proc = flywheel(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                     str(data_root)], child_env(home, **extra), work / f"run-{index:02d}.log")
    while extra and not marker.exists() and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(delay)
    stopped = proc.poll() is None
    catalog_existed = (data_root / "catalog.duckdb").exists()
    code, stop_seconds = stop(proc, sig) if stopped else (proc.returncode, 0.0)
    stopped_after = time.monotonic() - started
    args = ["resume", RUN_ID, "--data-root", str(data_root)]
    config_recorded = (data_root / "runs" / RUN_ID / "config.json").exists()
    if not config_recorded:
        args += ["--config", str(config)]
    resume_started = time.monotonic()
    resume = flywheel(args, child_env(home), work / f"resume-{index:02d}.log")
    resume_code = resume.wait()
    resume_seconds = time.monotonic() - resume_started
    log = (work / f"resume-{index:02d}.log").read_text()
    return {"target": "start" if target == START else f"{stage}:{round_index}",
            "signal": signal.Signals(sig).name, "delay_s": round(delay, 2), "stopped": stopped,
            "catalog_existed": catalog_existed, "config_recorded": config_recorded,
            "exit": code, "stop_s": round(stop_seconds, 2),
            "stopped_after_s": round(stopped_after, 2), "resume_exit": resume_code,
            "resume_s": round(resume_seconds, 2),
            "notices": [line for line in log.splitlines() if line.startswith("flywheel: ")],
            "servers_left": live_servers(work),
            "snapshot": snapshot(data_root) if resume_code == 0 else None}


def _line(index: int, total: int, r: dict, per_round: float) -> str:
    how = (f"{r['signal']} -> exit {r['exit']} in {r['stop_s']:.1f} s" if r["stopped"]
           else "FINISHED FIRST")
    where = "" if r["catalog_existed"] else " (before the catalog)"
    return (f"stop {index + 1:>2}/{total}: {r['target']:<13} +{r['delay_s']:>5.1f} s {how}{where};"
            f" resume {r['resume_s']:.1f} s ({r['resume_s'] / per_round:.2f} round); "
            f"{'identical' if r['identical'] else 'DIFFERENT'}; {len(r['notices'])} notices; "
            f"{len(r['servers_left'])} servers left")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="random stops (each = run + resume)")
    parser.add_argument("--config", type=Path, default=None, help="run config (default: built in)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the stop moments")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flywheel-chaos-"))
    config = args.config or work / "chaos.toml"
    if args.config is None:
        config.write_text(DEFAULT_CONFIG)
    from configs import load_config

    rounds = load_config(config).rounds
    started = time.monotonic()
    reference_root = work / "reference"
    proc = flywheel(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                     str(reference_root)], child_env(work / "home-reference"),
                    work / "reference.log")
    if proc.wait() != 0:
        sys.exit(f"reference run failed; see {work / 'reference.log'}")
    reference_seconds = time.monotonic() - started
    per_round = reference_seconds / (rounds + 1)
    reference = snapshot(reference_root)
    durations = {**stage_seconds(reference_root), START: first_stage_after(work, config)}
    rng = random.Random(args.seed)
    targets: list[tuple[int, str]] = []  # every target once per len(durations) stops
    while len(targets) < args.kills:
        targets += rng.sample(sorted(durations), len(durations))
    results = []
    for index in range(args.kills):
        sig = signal.SIGKILL if index % 2 == 0 else signal.SIGINT
        stretch = 1.0 if targets[index] == START else 1.2
        delay = rng.uniform(0, stretch * durations[targets[index]])
        result = one_stop(index, work, config, targets[index], sig, delay)
        result["identical"] = result.pop("snapshot") == reference
        results.append(result)
        print(_line(index, args.kills, result, per_round), flush=True)

    identical = sum(r["identical"] for r in results)
    stopped = sum(r["stopped"] for r in results)
    before_catalog = sum(r["stopped"] and not r["catalog_existed"] for r in results)
    sigints = [r for r in results if r["stopped"] and r["signal"] == "SIGINT"]
    servers_left = sorted({pid for r in results for pid in r["servers_left"]})
    mean_fraction = statistics.mean(r["resume_s"] for r in results) / per_round
    summary = {
        "kills": args.kills, "stopped_before_finishing": stopped,
        "stopped_before_the_catalog": before_catalog, "resumed_identical": identical,
        "sigint_exit_codes": sorted({r["exit"] for r in sigints}, key=str),
        "sigint_max_stop_s": max((r["stop_s"] for r in sigints), default=None),
        "servers_left": servers_left,
        "reference_run_s": round(reference_seconds, 2), "reference_round_s": round(per_round, 2),
        "mean_resume_s": round(statistics.mean(r["resume_s"] for r in results), 2),
        "mean_resume_fraction_of_round": round(mean_fraction, 3),
        "config": str(args.config or "built-in"), "seed": args.seed, "work_dir": str(work),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(f"{identical}/{args.kills} resumed identical ({stopped} stopped mid-run, "
          f"{before_catalog} before the catalog existed); SIGINT: exit "
          f"{summary['sigint_exit_codes']} within {summary['sigint_max_stop_s']} s; "
          f"{len(servers_left)} Prefect servers left behind; mean resume cost "
          f"{mean_fraction:.2f} of an uninterrupted round ({summary['mean_resume_s']:.1f} s of "
          f"{per_round:.1f} s)")
    if identical != args.kills or servers_left:
        sys.exit(1)


if __name__ == "__main__":
    main()
