"""How fast and how small is a round of millions of rollouts? verify, curate and the gates over
a synthetic round, columnar next to the list-of-dicts code (bench/baseline_rows.py).

The round: `problems` arithmetic problems x `samples` rollouts, each completion the answer
(right with probability 0.5) padded to `completion_bytes`; written in chunks with pyarrow, so
making it holds one chunk. Each measured step runs in its own process, which reports its
seconds and peak RSS:

    verify     tasks.verify.stream_verdicts (exact-match arithmetic domain)
    curate     curriculum_frame + training_frame over the files (SFT, default [curate]); the
               seconds are the computation's (each of the two printed apart), the curriculum
               and train_rows files are written after it (for the gates)
    baseline   the same curate through bench/baseline_rows.py on read_rows lists
    baseline-verify  the same verify through bench/baseline_rows.py on read_rows lists
    gate:KIND  validators.gate.run_gate on the round's file of that kind (default [gates],
               round 1): Great Expectations on the first 100 000 rows, the rest on every row

    python bench/scale.py [--scale 0.05] [--skip-baseline] [--out bench/results/scale.json]

--scale 1 is 250 000 problems x 40 samples (10 M rollouts, 1 KB completions).
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHUNK_PROBLEMS = 4096


def write_round(folder: Path, problems: int, samples: int, completion_bytes: int,
                seed: int = 0) -> None:
    """problems.parquet and rollouts.parquet of a synthetic round, written chunk by chunk."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from storage.datasets import SCHEMAS, DatasetWriter

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    filler = " " + "x" * max(completion_bytes - 8, 0)
    with DatasetWriter("problems", folder / "problems.parquet") as p_out, \
            DatasetWriter("rollouts", folder / "rollouts.parquet") as r_out:
        for first in range(0, problems, CHUNK_PROBLEMS):
            n = min(CHUNK_PROBLEMS, problems - first)
            index = np.arange(first, first + n)
            a, b = index, rng.integers(0, 10, n)  # every problem text distinct
            ids = pc.utf8_lpad(pa.array(index.astype(str)), 16, "0")
            texts = pc.binary_join_element_wise(pa.array(a.astype(str)), pa.array(b.astype(str)),
                                                "+")
            p_out.write(pa.table({
                "problem_id": ids, "run_id": pa.array(["bench"] * n), "round": np.ones(n, int),
                "text": texts, "reference": pa.array((a + b).astype(str)),
                "level": rng.integers(1, 6, n), "source": pa.array(["proposer"] * n),
                "proposal_id": ids, "task": pa.nulls(n, pa.string()),
                "payload": pa.nulls(n, pa.string())}, schema=SCHEMAS["problems"]))
            owner = np.repeat(np.arange(n), samples)
            right = rng.random(n * samples) < rng.random(n)[owner]
            answer = np.where(right, (a + b)[owner], (a + b)[owner] + 1).astype(str)
            pid = pc.take(ids, pa.array(owner))
            sample = np.tile(np.arange(samples), n)
            r_out.write(pa.table({
                "rollout_id": pc.binary_join_element_wise(pid, pa.array(sample.astype(str)), "-"),
                "run_id": pa.array(["bench"] * (n * samples)), "round": np.ones(n * samples, int),
                "problem_id": pid, "sample_index": sample,
                "prompt": pc.take(pc.binary_join_element_wise("<solve>", texts, "=", ""),
                                  pa.array(owner)),
                "completion": pc.binary_join_element_wise(pa.array(answer), filler, ""),
                "completion_tokens": np.full(n * samples, completion_bytes),
                "checkpoint": pa.array(["ck"] * (n * samples))}, schema=SCHEMAS["rollouts"]))


def step_verify(folder: Path) -> int:
    from configs import ScaleConfig
    from domains.arithmetic import ArithmeticDomain
    from tasks.verify import stream_verdicts, verdict_metrics

    written = stream_verdicts(ArithmeticDomain(), ScaleConfig(), folder / "rollouts.parquet",
                              folder / "problems.parquet", "reference",
                              folder / "verdicts.parquet")["verdicts"]
    verdict_metrics(written.path, folder / "problems.parquet")
    return written.rows


def step_curate(folder: Path) -> dict:
    from configs import CurateConfig
    from domains.arithmetic import ArithmeticDomain
    from storage.datasets import write_atomic
    from tasks.curate import curriculum_frame, training_frame

    started = time.perf_counter()
    curation = CurateConfig()
    files = {k: folder / f"{k}.parquet" for k in ("problems", "rollouts", "verdicts")}
    curriculum = curriculum_frame(files["problems"], files["verdicts"], curation, warmup=False)
    curriculum_seconds = time.perf_counter() - started
    rows = training_frame(ArithmeticDomain(), files["problems"], files["rollouts"],
                          files["verdicts"], curriculum, curation, warmup=False)
    seconds = time.perf_counter() - started
    write_atomic("curriculum", curriculum, folder / "curriculum.parquet")
    write_atomic("train_rows", rows, folder / "train_rows.parquet")
    return {"output_rows": len(rows), "seconds": seconds,
            "curriculum_seconds": curriculum_seconds,
            "train_rows_seconds": seconds - curriculum_seconds}


GATED = ("problems", "rollouts", "verdicts", "curriculum", "train_rows")


def step_gate(folder: Path, kind: str) -> dict:
    from configs import GatesConfig
    from validators.gate import run_gate

    result = run_gate(folder / f"{kind}.parquet", kind, GatesConfig(), run_id="bench",
                      round_index=1)
    return {"output_rows": result.rows, "gate_passed": result.success,
            "failed": [f.name for f in result.failures]}


def step_baseline(folder: Path) -> int:
    from bench.baseline_rows import curriculum_rows, training_rows
    from configs import CurateConfig
    from domains.arithmetic import ArithmeticDomain
    from storage.datasets import read_rows

    curation = CurateConfig()
    problems = read_rows(folder / "problems.parquet")
    verdicts = read_rows(folder / "verdicts.parquet")
    curriculum = curriculum_rows(problems, verdicts, curation, warmup=False)
    rows = training_rows(ArithmeticDomain(), problems, read_rows(folder / "rollouts.parquet"),
                         verdicts, curriculum, curation, warmup=False)
    return len(rows)


def step_baseline_verify(folder: Path) -> int:
    from bench.baseline_rows import verdict_rows
    from domains.arithmetic import ArithmeticDomain
    from storage.datasets import read_rows

    rows = verdict_rows(ArithmeticDomain(), read_rows(folder / "rollouts.parquet"),
                        read_rows(folder / "problems.parquet"))
    return len(rows)


STEPS = {"verify": step_verify, "curate": step_curate, "baseline": step_baseline,
         "baseline-verify": step_baseline_verify,
         **{f"gate:{kind}": functools.partial(step_gate, kind=kind) for kind in GATED}}


def measured(step: str, folder: Path) -> dict:
    """Run one step in a fresh process: {"seconds" (imports not counted), "peak_rss_mb",
    "output_rows", ...}; a step returning a dict may give its own seconds."""
    code = (f"import sys, json, time; sys.path.insert(0, {str(ROOT)!r}); "
            f"from bench.scale import STEPS; from pathlib import Path; "
            f"import tasks.curate, tasks.verify, bench.baseline_rows, validators.gate; "
            f"t = time.perf_counter(); "
            f"n = STEPS[{step!r}](Path({str(folder)!r})); "
            f"out = n if isinstance(n, dict) else {{'output_rows': n}}; "
            f"out.setdefault('seconds', time.perf_counter() - t); "
            f"hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            f"out['peak_rss_mb'] = int(hwm.split()[1]) / 1024; "  # its own, not the parent's
            f"print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05,
                        help="share of 250 000 problems (x 40 samples, 1 KB completions)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="measure the columnar steps only")
    parser.add_argument("--folder", type=Path, default=ROOT / "bench" / "results" / "scale-data")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    problems, samples = max(1, int(250_000 * args.scale)), 40
    started = time.perf_counter()
    write_round(args.folder, problems, samples, 1024)
    rollouts = problems * samples
    report = {"problems": problems, "rollouts": rollouts,
              "write_seconds": time.perf_counter() - started, "steps": {}}
    steps = ["verify", "curate", *([] if args.skip_baseline else ["baseline", "baseline-verify"]),
             *[f"gate:{kind}" for kind in GATED]]
    for step in steps:
        result = measured(step, args.folder)
        rows = result["output_rows"] if step.startswith("gate:") else rollouts
        result["rows_per_second"] = rows / result["seconds"]
        report["steps"][step] = result
        passed = {True: "  passed", False: "  FAILED"}.get(result.get("gate_passed"), "")
        print(f"{step:16s} {rows:>11,} rows {result['seconds']:8.2f} s "
              f"{result['rows_per_second']:12,.0f} rows/s  peak RSS "
              f"{result['peak_rss_mb']:7.0f} MB{passed}", flush=True)
        if "curriculum_seconds" in result:
            print(f"{'':16s} curriculum {result['curriculum_seconds']:.2f} s, train_rows "
                  f"{result['train_rows_seconds']:.2f} s ({result['output_rows']:,} rows)")
    if "baseline" in report["steps"]:
        report["curate_speedup"] = (report["steps"]["baseline"]["seconds"]
                                    / report["steps"]["curate"]["seconds"])
        print(f"curate: {report['curate_speedup']:.1f}x the list-of-dicts code")
    if "baseline-verify" in report["steps"]:
        report["verify_speedup"] = (report["steps"]["baseline-verify"]["seconds"]
                                    / report["steps"]["verify"]["seconds"])
        print(f"verify: {report['verify_speedup']:.1f}x the list-of-dicts code")
    report["peak_rss_mb"] = max(s["peak_rss_mb"] for name, s in report["steps"].items()
                                if not name.startswith("baseline"))
    print(f"round (verify, curate, gates): peak RSS {report['peak_rss_mb']:.0f} MB")
    report["self_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
