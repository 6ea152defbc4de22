"""How many model-written programs can be checked per second? Sandbox pool vs fresh interpreter.

A verified execution runs one trivial program (`def f(x): return x*K+1`, K distinct per program)
on one input and checks its output against the expected value. Two ways, side by side:

    pool    domains.sandbox.SandboxPool with --workers fork servers: one forked, confined child
            per program (namespaces, chroot, uid drop, rlimits, seccomp)
    fresh   `python -S -c <program>` per program, --workers at once, with no isolation at all
            (so the comparison favours it)

Printed: executions per second of each, the ratio, CPU milliseconds per execution (this process
and its children: on a shared machine the wall-clock rate moves with the load, CPU per execution
much less), the load average before and after, the rate that CPU per execution allows on free
cores (workers x 1000 / CPU ms: an estimate, not a measurement) and the goal (>= 1,000 per second
for the pool on 2 cores). Also the admission rate of the python_io domain (each proposal runs
twice, on two workers). Writes JSON to --out.

    python bench/sandbox.py [--programs 4000] [--fresh-programs 200] [--workers 2]
                            [--out bench/results/sandbox.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOAL_PER_SECOND = 1000.0


def _tree_ticks(pid: int) -> int:
    """CPU clock ticks of a live process, of its reaped children and of its live descendants."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return sum(int(v) for v in fields[11:15]) + sum(_tree_ticks(int(c)) for c in children)


def _cpu_seconds() -> float:
    """This process, its reaped children and its live descendants (the pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    live = [int(c) for c in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
            .read_text().split()]
    ticks = sum(_tree_ticks(pid) for pid in live) / os.sysconf("SC_CLK_TCK")
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + ticks


def _program(k: int) -> str:
    return f"def f(x): return x*{k}+1"


def _timed(run, count: int) -> dict[str, float]:
    cpu, wall = _cpu_seconds(), time.perf_counter()
    verified = run()
    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    if verified != count:
        msg = f"only {verified} of {count} executions gave the expected output"
        raise RuntimeError(msg)
    return {"executions": count, "seconds": wall, "per_second": count / wall,
            "cpu_ms_per_execution": 1000 * cpu / count}


def bench_pool(count: int, workers: int) -> dict[str, float]:
    from domains.sandbox import Job, Limits, SandboxPool

    jobs = [Job(_program(k), (f"({k},)",)) for k in range(count)]
    with SandboxPool(Limits(), workers=workers) as pool:
        pool.run(jobs[:workers * 8])  # warm: the workers are started and have served

        def run() -> int:
            results = pool.run(jobs)
            return sum(r.outputs == (str(k * k + 1),) for k, r in enumerate(results))

        return _timed(run, count)


def bench_fresh(count: int, workers: int) -> dict[str, float]:
    def one(k: int) -> bool:
        code = f"{_program(k)}\nprint(repr(f({k})))"
        done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                              timeout=30, env={}, check=False)
        return done.stdout.strip() == str(k * k + 1)

    def run() -> int:
        with ThreadPoolExecutor(workers) as executor:
            return sum(executor.map(one, range(count)))

    return _timed(run, count)


def bench_admission(count: int, workers: int) -> dict[str, float]:
    from configs import load_config
    from domains.python_io import PythonIODomain

    domain = PythonIODomain(load_config(None, {"domain.name": "python_io",
                                               "sandbox.workers": workers}))
    texts = [f"deduction: {_program(k)} >>> f({k})" for k in range(count)]
    try:
        domain.prepare(texts[:16])

        def run() -> int:
            domain.prepare(texts[16:])
            return 16 + sum(domain.parse(t).reference == str(k * k + 1)
                            for k, t in enumerate(texts) if k >= 16)

        return _timed(run, count)
    finally:
        domain.pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=4000, help="pool executions")
    parser.add_argument("--fresh-programs", type=int, default=200, help="fresh interpreters")
    parser.add_argument("--workers", type=int, default=2, help="pool workers / parallel fresh")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sandbox.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    pool = bench_pool(args.programs, args.workers)
    fresh = bench_fresh(args.fresh_programs, args.workers)
    admission = bench_admission(args.programs // 2, args.workers)
    load_after = os.getloadavg()[0]
    ratio = pool["per_second"] / fresh["per_second"]
    cores = min(args.workers, os.cpu_count() or 1)
    free_cores_rate = 1000 * cores / pool["cpu_ms_per_execution"]
    print(f"{'':10} {'executions':>10} {'per second':>11} {'CPU ms each':>12}")
    for name, row in (("pool", pool), ("fresh", fresh), ("admission", admission)):
        print(f"{name:10} {row['executions']:>10} {row['per_second']:>11.0f} "
              f"{row['cpu_ms_per_execution']:>12.2f}")
    print(f"pool / fresh: {ratio:.1f}x per second, "
          f"{fresh['cpu_ms_per_execution'] / pool['cpu_ms_per_execution']:.1f}x less CPU; "
          f"goal >= {GOAL_PER_SECOND:.0f}/s for the pool: "
          f"{'met' if pool['per_second'] >= GOAL_PER_SECOND else 'NOT met'} "
          f"(load average {load_before:.2f} before, {load_after:.2f} after, on "
          f"{os.cpu_count()} CPUs); on {cores} free cores the pool's CPU per execution allows "
          f"{free_cores_rate:.0f}/s")
    report = {"pool": pool, "fresh": fresh, "admission_twice": admission, "ratio": ratio,
              "goal_per_second": GOAL_PER_SECOND, "workers": args.workers,
              "cpus": os.cpu_count(), "load_average_before": load_before,
              "load_average_after": load_after, "free_cores_per_second": free_cores_rate,
              "python": platform.python_version(), "machine": platform.machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
