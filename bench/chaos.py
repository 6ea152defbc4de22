"""Chaos: kill -9 a real `flywheel run` at N random moments, resume each, compare.

    python bench/chaos.py --kills 10 [--config F] [--seed S] [--out bench/results/chaos.json]

First one uninterrupted run of the config (the reference). Then N times, each in a fresh data
root: start `flywheel run`, pick a stage (a random order of all stages, so N >= 9 kills hit
every stage) and a random delay (uniform between 0 and 1.2x that stage's duration in the
reference run), SIGKILL the whole process group that long after
the stage starts, then `flywheel resume` it to the end. A resume is *identical* when the run's
completed stages have the reference's fingerprints and row counts, every recorded file has the
reference's checksum (checkpoint weights included), and the run folder holds exactly the
reference's file names (nothing half written, duplicated or stale is left).

Prints `N/N resumed identical` and the mean resume cost: the wall time of `flywheel resume`
(process start to exit) as a fraction of the reference run's wall time per round. The default
config has one round (the warm-up, `rounds = 0`) so that the kills spread over every stage kind.
The stage start is detected with the test hook of storage/recovery.py
(FLYWHEEL_TEST_PAUSE_AT=<stage>:<round>:start with FLYWHEEL_TEST_PAUSE_SECONDS=0: announce, do
not pause). Uses $PREFECT_API_URL if set, else one temporary Prefect server for the whole bench.
"""

from __future__ import annotations

import argparse
import contextlib
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
STAGES = ["base", "baseline", "synthesize", "rollout", "verify", "curate", "train", "evaluate",
          "promote"]


def child_env(prefect_url: str, work: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FLYWHEEL_TEST_"))}
    env.update(PREFECT_API_URL=prefect_url, PREFECT_HOME=str(work / "prefect-home"),
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **extra)
    return env


def flywheel(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "flows.cli", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def snapshot(data_root: Path) -> dict:
    from storage.catalog import Catalog

    catalog = Catalog(data_root)
    stages = catalog.query(
        "SELECT round, stage, fingerprint, rows FROM stages"
        " WHERE run_id = ? AND status = 'completed'", [RUN_ID])
    files = catalog.query(
        "SELECT d.round, d.stage, d.kind, d.rows, d.checksum FROM datasets d JOIN stages s"
        " ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint"
        " WHERE d.run_id = ? AND s.status = 'completed'", [RUN_ID])
    run_dir = data_root / "runs" / RUN_ID
    names = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name != "run.lock")
    return {
        "stages": sorted((s["round"], s["stage"], s["fingerprint"], s["rows"]) for s in stages),
        "files": sorted((f["round"], f["stage"], f["kind"], f["rows"], f["checksum"])
                        for f in files),
        "names": names,
    }


def stage_seconds(data_root: Path) -> dict[tuple[int, str], float]:
    from storage.catalog import Catalog

    rows = Catalog(data_root).query(
        "SELECT round, stage, seconds FROM stages WHERE run_id = ? AND status = 'completed'",
        [RUN_ID])
    return {(r["round"], r["stage"]): r["seconds"] for r in rows}


def one_kill(index: int, work: Path, config: Path, prefect_url: str, rng: random.Random,
             durations: dict[tuple[int, str], float], target: tuple[int, str]) -> dict:
    data_root = work / f"kill-{index:02d}"
    marker = work / f"marker-{index:02d}"
    round_index, stage = target
    delay = rng.uniform(0, 1.2 * durations[(round_index, stage)])
    point = f"{stage}:{round_index}:start"
    env = child_env(prefect_url, work, FLYWHEEL_TEST_PAUSE_AT=point,
                    FLYWHEEL_TEST_PAUSE_FILE=str(marker), FLYWHEEL_TEST_PAUSE_SECONDS="0")
    started = time.monotonic()
    proc = flywheel(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                     str(data_root)], env, work / f"run-{index:02d}.log")
    while not marker.exists() and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = time.monotonic() - started
    resume_started = time.monotonic()
    resume = flywheel(["resume", RUN_ID, "--data-root", str(data_root)],
                      child_env(prefect_url, work), work / f"resume-{index:02d}.log")
    code = resume.wait()
    resume_seconds = time.monotonic() - resume_started
    log = (work / f"resume-{index:02d}.log").read_text()
    notices = [line for line in log.splitlines() if line.startswith("flywheel: ")]
    return {"stage": f"{stage}:{round_index}", "delay_s": round(delay, 2), "killed": killed,
            "killed_after_s": round(killed_after, 2), "resume_exit": code,
            "resume_s": round(resume_seconds, 2), "notices": notices,
            "snapshot": snapshot(data_root) if code == 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="random kills (each = run + resume)")
    parser.add_argument("--config", type=Path, default=None, help="run config (default: built in)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flywheel-chaos-"))
    config = args.config or work / "chaos.toml"
    if args.config is None:
        config.write_text(DEFAULT_CONFIG)
    from configs import load_config

    rounds = load_config(config).rounds

    with contextlib.ExitStack() as stack:
        prefect_url = os.environ.get("PREFECT_API_URL")
        if not prefect_url:
            from prefect.settings import PREFECT_API_URL
            from prefect.testing.utilities import prefect_test_harness

            stack.enter_context(prefect_test_harness(server_startup_timeout=300))
            prefect_url = PREFECT_API_URL.value()
        started = time.monotonic()
        reference_root = work / "reference"
        proc = flywheel(["run", "--config", str(config), "--run-id", RUN_ID, "--data-root",
                         str(reference_root)], child_env(prefect_url, work), work / "reference.log")
        if proc.wait() != 0:
            sys.exit(f"reference run failed; see {work / 'reference.log'}")
        reference_seconds = time.monotonic() - started
        per_round = reference_seconds / (rounds + 1)
        reference = snapshot(reference_root)
        durations = stage_seconds(reference_root)
        rng = random.Random(args.seed)
        targets: list[tuple[int, str]] = []  # every stage once per len(stages) kills, random order
        while len(targets) < args.kills:
            targets += rng.sample(sorted(durations), len(durations))
        results = []
        for index in range(args.kills):
            result = one_kill(index, work, config, prefect_url, rng, durations, targets[index])
            result["identical"] = result["snapshot"] == reference
            result.pop("snapshot")
            results.append(result)
            print(f"kill {index + 1:>2}/{args.kills}: {result['stage']:<14}"
                  f" +{result['delay_s']:>5.1f} s"
                  f" {'killed' if result['killed'] else 'FINISHED FIRST'};"
                  f" resume {result['resume_s']:.1f} s"
                  f" ({result['resume_s'] / per_round:.2f} round); "
                  f"{'identical' if result['identical'] else 'DIFFERENT'};"
                  f" {len(result['notices'])} notices",
                  flush=True)

    identical = sum(r["identical"] for r in results)
    killed = sum(r["killed"] for r in results)
    mean_fraction = statistics.mean(r["resume_s"] for r in results) / per_round
    lost = statistics.mean(r["killed_after_s"] + r["resume_s"] - reference_seconds for r in results)
    summary = {
        "kills": args.kills, "killed_before_finishing": killed, "resumed_identical": identical,
        "reference_run_s": round(reference_seconds, 2), "reference_round_s": round(per_round, 2),
        "mean_resume_s": round(statistics.mean(r["resume_s"] for r in results), 2),
        "mean_resume_fraction_of_round": round(mean_fraction, 3),
        "mean_extra_wall_s": round(lost, 2), "config": str(args.config or "built-in"),
        "seed": args.seed, "work_dir": str(work), "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(f"{identical}/{args.kills} resumed identical ({killed} killed mid-run); mean resume cost "
          f"{mean_fraction:.2f} of an uninterrupted round ({summary['mean_resume_s']:.1f} s of "
          f"{per_round:.1f} s); mean extra wall time per crash {lost:.1f} s")
    if identical != args.kills:
        sys.exit(1)


if __name__ == "__main__":
    main()
