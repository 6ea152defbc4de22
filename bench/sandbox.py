"""How many model-written programs can be checked per second? Sandbox pool vs fresh interpreter.

A verified execution runs one trivial program (`def f(x): return x*K+1`, K distinct per program)
on one input and checks its output against the expected value. Two ways, side by side:

    pool    domains.sandbox.SandboxPool with --workers fork servers: one forked, confined child
            per program (namespaces, chroot, uid drop, rlimits, seccomp)
    fresh   `python -S -c <program>` per program, --workers at once, with no isolation at all
            (so the comparison favours it)

Printed: executions per second of each (the pool's: the median of --repeats runs, with the
slowest and fastest), the ratio, CPU milliseconds per execution (this process
and its children: on a shared machine the wall-clock rate moves with the load, CPU per execution
much less), the load average before and after, the rate that CPU per execution allows on free
cores (workers x 1000 / CPU ms: an estimate, not a measurement) and the goal (>= 1,000 per second
for the pool on 2 cores). Also the admission rate of the python_io domain (each proposal runs
twice, on two workers). Writes JSON to --out.

Two more modes, for the seccomp filter (domains/sandbox/seccomp.py):

    --baseline-commit C  the pool with today's filter and the pool with the filter of commit C
                         (its domains/sandbox/seccomp.py), side by side: both pools started, the
                         same programs run on each in turn for --rounds rounds (ABBA order, so a
                         drift of the machine's load falls on both), rates and CPU compared
    --syscalls           what the children call, by strace -f: the ordinary workloads
                         (tests/sandbox/corpus.py ORDINARY and the python_io generator's
                         programs) under a filter that allows everything, and the hostile corpus
                         under the allow list; a table of each system call, how often each kind
                         made it, and what the allow list does with it (docs/sandbox.md)

    python bench/sandbox.py [--programs 4000] [--repeats 5] [--fresh-programs 200] [--workers 2]
                            [--baseline-commit 9b2c046 --rounds 6] [--syscalls]
                            [--out bench/results/sandbox.json]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
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


def bench_pool(count: int, workers: int, repeats: int) -> dict[str, float]:
    """The pool's rate over `repeats` runs of `count` programs in one pool: the median run's
    figures, and the slowest and fastest run's rates (a shared machine's load moves them)."""
    from domains.sandbox import Job, Limits, SandboxPool

    jobs = [Job(_program(k), (f"({k},)",)) for k in range(count)]
    with SandboxPool(Limits(), workers=workers) as pool:
        pool.run(jobs[:workers * 8])  # warm: the workers are started and have served

        def run() -> int:
            results = pool.run(jobs)
            return sum(r.outputs == (str(k * k + 1),) for k, r in enumerate(results))

        runs = sorted((_timed(run, count) for _ in range(repeats)),
                      key=lambda row: row["per_second"])
    return {**runs[len(runs) // 2], "repeats": repeats, "slowest_per_second":
            runs[0]["per_second"], "fastest_per_second": runs[-1]["per_second"]}


def _filter_of_commit(commit: str) -> bytes:
    """The seccomp program that domains/sandbox/seccomp.py of `commit` builds (the deny list's
    `seccomp_program` before the allow list, `allow_list_program` after)."""
    source = subprocess.run(["git", "show", f"{commit}:domains/sandbox/seccomp.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py") as handle:
        handle.write(source)
        handle.flush()
        spec = importlib.util.spec_from_file_location(f"seccomp_{commit}", handle.name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    build = getattr(module, "allow_list_program", None) or module.seccomp_program
    return build()


def bench_filters(count: int, workers: int, baseline_commit: str,
                  rounds: int) -> dict[str, dict[str, float]]:
    """Today's filter and `baseline_commit`'s, side by side: two pools, each round runs the same
    `count` programs on both, in ABBA order; rates and CPU per execution over all rounds."""
    from domains.sandbox import Job, Limits, SandboxPool

    jobs = [Job(_program(k), (f"({k},)",)) for k in range(count)]
    pools = {"allow_list": SandboxPool(Limits(), workers=workers),
             baseline_commit: SandboxPool(Limits(), workers=workers,
                                          seccomp_program=_filter_of_commit(baseline_commit))}
    totals = {name: {"executions": 0, "seconds": 0.0, "cpu": 0.0, "rounds": [], "cpu_rounds": []}
              for name in pools}
    try:
        for pool in pools.values():
            pool.run(jobs[:workers * 8])  # warm: the workers are started and have served
        for index in range(rounds):
            order = list(pools) if index % 2 == 0 else list(pools)[::-1]
            for name in order:
                def run(pool=pools[name]) -> int:
                    results = pool.run(jobs)
                    return sum(r.outputs == (str(k * k + 1),) for k, r in enumerate(results))

                row = _timed(run, count)
                totals[name]["executions"] += count
                totals[name]["seconds"] += row["seconds"]
                totals[name]["cpu"] += row["cpu_ms_per_execution"] * count / 1000
                totals[name]["rounds"].append(row["per_second"])
                totals[name]["cpu_rounds"].append(row["cpu_ms_per_execution"])
    finally:
        for pool in pools.values():
            pool.close()
    return {name: {"executions": t["executions"], "seconds": t["seconds"],
                   "per_second": t["executions"] / t["seconds"],
                   "cpu_ms_per_execution": 1000 * t["cpu"] / t["executions"],
                   "per_second_by_round": t["rounds"],
                   "cpu_ms_per_execution_by_round": t["cpu_rounds"]}
            for name, t in totals.items()}


_TRACE_LINE = re.compile(r"^(\d+)\s+(\w+)\(")


def _calls_after_the_filter(trace: str) -> tuple[collections.Counter, collections.Counter]:
    """System call -> how many calls, and in how many children, of the processes in an
    `strace -f` trace after each installed its seccomp filter (prctl PR_SET_SECCOMP)."""
    filtered, calls, children = set(), collections.Counter(), collections.defaultdict(set)
    for line in trace.splitlines():
        match = _TRACE_LINE.match(line)
        if not match:
            continue
        pid, name = match.groups()
        if name == "prctl" and "PR_SET_SECCOMP" in line:
            filtered.add(pid)
        elif pid in filtered:
            calls[name] += 1
            children[name].add(pid)
    return calls, collections.Counter({name: len(pids) for name, pids in children.items()})


def syscall_workload(kind: str) -> None:
    """Run one kind of workload in a pool (the process that `measure_syscalls` traces):
    "ordinary" under a filter that allows every call, "hostile" under the allow list."""
    import pyseccomp

    from domains.programs import draw_input, draw_program
    from domains.sandbox import Job, Limits, SandboxPool, canonical
    from tests.sandbox.corpus import HOSTILE, ORDINARY

    program = None
    if kind == "ordinary":
        everything = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        with tempfile.TemporaryFile() as handle:
            everything.export_bpf(handle)
            handle.seek(0)
            program = handle.read()
        rng = random.Random(0)
        jobs = [Job(source, (args,)) for _, source, args, _, _ in ORDINARY]
        for level in range(1, 6):
            for _ in range(20):
                source, input_kind = draw_program(rng, level)
                jobs.append(Job(source, tuple(f"({canonical(draw_input(rng, input_kind))},)"
                                              for _ in range(3))))
    else:
        with tempfile.TemporaryDirectory() as folder:
            jobs = [Job(source.format(data_root=folder, outside=folder), ("(1,)",))
                    for _, source, _, _ in HOSTILE]
    # Traced children are slower: generous limits, so that no program stops for time.
    with SandboxPool(Limits(cpu_seconds=5.0, wall_seconds=20.0), workers=1,
                     seccomp_program=program) as pool:
        pool.run(jobs)


def measure_syscalls() -> dict[str, dict[str, int | str]]:
    """System call -> calls and children of each workload kind, and the allow list's action."""
    from domains.sandbox.seccomp import ALLOWED, FILE_LOOKUPS

    if shutil.which("strace") is None:
        raise SystemExit("--syscalls needs strace (apt-get install strace)")
    table: dict[str, dict[str, int | str]] = collections.defaultdict(dict)
    for kind in ("ordinary", "hostile"):
        with tempfile.NamedTemporaryFile("r", suffix=".trace") as trace:
            subprocess.run(["strace", "-f", "-qq", "-o", trace.name, sys.executable, __file__,
                            "--syscall-workload", kind], check=True)
            calls, children = _calls_after_the_filter(trace.read())
        for name, count in calls.items():
            table[name].update({f"{kind}_calls": count, f"{kind}_children": children[name]})
    for name, row in table.items():
        row["action"] = ("allow" if name in ALLOWED else "EPERM" if name in FILE_LOOKUPS
                         else "kill")
    return dict(sorted(table.items(), key=lambda item: (-item[1].get("ordinary_calls", 0),
                                                        -item[1].get("hostile_calls", 0))))


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
    parser.add_argument("--repeats", type=int, default=5,
                        help="pool runs of --programs; the median run is reported")
    parser.add_argument("--fresh-programs", type=int, default=200, help="fresh interpreters")
    parser.add_argument("--workers", type=int, default=2, help="pool workers / parallel fresh")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sandbox.json")
    parser.add_argument("--baseline-commit", help="compare the pool's filter with this commit's,"
                        " side by side (only that is measured)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of --baseline-commit")
    parser.add_argument("--syscalls", action="store_true",
                        help="measure what the children call, by strace (only that)")
    parser.add_argument("--syscall-workload", choices=("ordinary", "hostile"),
                        help=argparse.SUPPRESS)  # the process --syscalls traces
    args = parser.parse_args()
    if args.syscall_workload:
        syscall_workload(args.syscall_workload)
    elif args.syscalls:
        _report_syscalls(args.out)
    elif args.baseline_commit:
        _report_filters(args)
    else:
        _report_rates(args)


def _write(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def _report_syscalls(out: Path) -> None:
    table = measure_syscalls()
    print(f"{'system call':20} {'ordinary calls':>15} {'(children)':>10} {'hostile calls':>14} "
          f"{'(children)':>10}  allow list")
    for name, row in table.items():
        print(f"{name:20} {row.get('ordinary_calls', 0):>15} {row.get('ordinary_children', 0):>10}"
              f" {row.get('hostile_calls', 0):>14} {row.get('hostile_children', 0):>10}  "
              f"{row['action']}")
    _write(out.with_name("sandbox-syscalls.json"), table)


def _report_filters(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    rows = bench_filters(args.programs, args.workers, args.baseline_commit, args.rounds)
    load_after = os.getloadavg()[0]
    new, old = rows["allow_list"], rows[args.baseline_commit]
    print(f"{'filter':12} {'executions':>10} {'per second':>11} {'CPU ms each':>12}")
    for name, row in rows.items():
        print(f"{name:12} {row['executions']:>10} {row['per_second']:>11.0f} "
              f"{row['cpu_ms_per_execution']:>12.2f}")
    rate_ratio = new["per_second"] / old["per_second"]
    cpu_ratio = new["cpu_ms_per_execution"] / old["cpu_ms_per_execution"]
    by_round = {key: [a / b for a, b in zip(new[key], old[key], strict=True)]
                for key in ("per_second_by_round", "cpu_ms_per_execution_by_round")}
    for key, label in (("per_second_by_round", "rate"), ("cpu_ms_per_execution_by_round", "CPU")):
        print(f"{label} per round, allow list / baseline: "
              + " ".join(f"{r:.2f}" for r in by_round[key]))
    print(f"allow list / {args.baseline_commit}: {rate_ratio:.3f}x per second, {cpu_ratio:.3f}x "
          f"the CPU per execution, {args.rounds} rounds of {args.programs} alternating (load "
          f"average {load_before:.2f} before, {load_after:.2f} after, on {os.cpu_count()} CPUs)")
    _write(args.out.with_name("sandbox-filters.json"),
           {"filters": rows, "rate_ratio": rate_ratio, "cpu_ratio": cpu_ratio,
            "ratios_by_round": by_round,
            "rounds": args.rounds, "workers": args.workers, "cpus": os.cpu_count(),
            "load_average_before": load_before, "load_average_after": load_after,
            "python": platform.python_version(), "machine": platform.machine()})


def _report_rates(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    pool = bench_pool(args.programs, args.workers, args.repeats)
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
    print(f"pool: median of {pool['repeats']} runs, slowest {pool['slowest_per_second']:.0f}/s,"
          f" fastest {pool['fastest_per_second']:.0f}/s")
    print(f"pool / fresh: {ratio:.1f}x per second, "
          f"{fresh['cpu_ms_per_execution'] / pool['cpu_ms_per_execution']:.1f}x less CPU; "
          f"goal >= {GOAL_PER_SECOND:.0f}/s for the pool's median: "
          f"{'met' if pool['per_second'] >= GOAL_PER_SECOND else 'NOT met'} "
          f"(load average {load_before:.2f} before, {load_after:.2f} after, on "
          f"{os.cpu_count()} CPUs); on {cores} free cores the pool's CPU per execution allows "
          f"{free_cores_rate:.0f}/s")
    report = {"pool": pool, "fresh": fresh, "admission_twice": admission, "ratio": ratio,
              "goal_per_second": GOAL_PER_SECOND, "workers": args.workers,
              "cpus": os.cpu_count(), "load_average_before": load_before,
              "load_average_after": load_after, "free_cores_per_second": free_cores_rate,
              "python": platform.python_version(), "machine": platform.machine()}
    _write(args.out, report)


if __name__ == "__main__":
    main()
