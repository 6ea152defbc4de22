"""How much do the data-quality gates cost? Seconds per gate vs rows, and their share of a round.

1. Seconds per gate: for each kind and each size (default 10k, 100k, 1M rows), a synthetic
   round-1 stage output written with the project's writer (`write_atomic`), gated with
   `run_gate` and the default thresholds (the drift baseline is a previous-round problems file),
   best of --repeats. Printed: seconds, seconds per 100k rows and its ratio to the target
   (0.5 s per 100k rows). The first gate of a process also pays the GX import; it is timed
   separately (`gx_import_and_first_gate_s`) and excluded from the rows.
2. Share of round time: one real run of --config (default tests/flows/small.toml) with --rounds
   self-improvement rounds (default 0: the warm-up round only), in-process; gate seconds (from
   the catalog's `gates` rows) over the seconds of every stage of the run.
   Or --from-run DATA_ROOT RUN_ID [--upto-round N]: the same share from a run's catalog, without
   running one. Either way the stored outputs are also gated again with the current code, so the
   share is reported as recorded and as the gates cost now.
   Wall seconds depend on what else the machine runs; CPU seconds of the process are printed
   next to them (on an idle machine wall ~ CPU).

    python bench/gates.py [--sizes 10000 100000 1000000] [--kinds rollouts verdicts ...]
                          [--repeats 2] [--rounds 0] [--skip-round]
                          [--from-run DIR RUN_ID] [--upto-round N] [--out bench/results/gates.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN_ID = "bench"
TARGET_S_PER_100K = 0.5


def _id(*parts: object) -> str:
    from storage.fingerprint import row_id

    return row_id(*[str(p) for p in parts])


def _problem_text(i: int, rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 999), rng.randint(1, 99)
    return f"{a}{'+-*'[i % 3]}{b}", 1 + i % 5


def synthetic_rows(kind: str, n: int, round_index: int = 1, seed: int = 0) -> list[dict]:
    """n realistic rows of `kind` (8 samples per problem, about half of the rewards 1)."""
    rng = random.Random(seed)
    samples = 8
    rows: list[dict] = []
    base = {"run_id": RUN_ID, "round": round_index}
    if kind in ("proposals", "problems"):
        for i in range(n):
            text, level = _problem_text(i, rng)
            text = f"{text}+{i}"  # distinct
            pid, qid = _id("problem", text), _id("proposal", i)
            if kind == "problems":
                rows.append({**base, "problem_id": pid, "text": text, "reference": str(i),
                             "level": level, "source": "proposer", "proposal_id": qid})
            else:
                rows.append({**base, "proposal_id": qid, "prompt": f"<propose>L{level}:",
                             "text": text, "level": level, "source": "proposer", "problem_id": pid,
                             "drop_reason": None})
    elif kind in ("rollouts", "verdicts"):
        for i in range(n):
            pid, rid = _id("problem", i // samples), _id("rollout", i)
            answer = str(rng.randint(0, 20))
            if kind == "rollouts":
                rows.append({**base, "rollout_id": rid, "problem_id": pid,
                             "sample_index": i % samples,
                             "prompt": f"<solve>{i // samples}+7=", "completion": answer,
                             "completion_tokens": len(answer) + 1, "checkpoint": "c" * 16})
            else:
                reward = float(rng.random() < 0.5)
                rows.append({**base, "rollout_id": rid, "problem_id": pid, "answer": answer,
                             "reward": reward, "method": "reference",
                             "label": answer if reward else str(int(answer) + 1),
                             "agreement": 0.5})
    elif kind == "curriculum":
        for i in range(n):
            judged = samples
            passed = rng.randint(0, judged)
            p = passed / judged
            kept = 0 < p < 1
            rows.append({**base, "problem_id": _id("problem", i), "level": 1 + i % 5,
                         "samples": samples, "judged": judged, "passed": passed, "pass_rate": p,
                         "reward_std": (p * (1 - p)) ** 0.5, "reward_mad": 2 * p * (1 - p),
                         "kept": kept,
                         "drop_reason": None if kept else ("too_easy" if p == 1 else "too_hard")})
    elif kind == "train_rows":
        for i in range(n):
            solver = i % 4 != 0
            rows.append({**base, "train_row_id": _id("train_row", i),
                         "role": "solver" if solver else "proposer",
                         "prompt": f"<solve>{i}+7=" if solver else "<propose>L3:",
                         "completion": str(i + 7) if solver else f"{i}+7",
                         "weight": 1.0 if solver else rng.random(), "problem_id": _id("problem", i),
                         "rollout_id": _id("rollout", i) if solver else None,
                         "proposal_id": _id("proposal", i), "rejected": None})
    elif kind == "evals":
        for i in range(n):
            answer = str(rng.randint(0, 20))
            rows.append({**base, "checkpoint": "c" * 16, "item_id": _id("heldout", i),
                         "level": 1 + i % 5, "prompt": f"<solve>{i}+7=", "completion": answer,
                         "answer": answer, "reference": str(i + 7),
                         "correct": answer == str(i + 7)})
    elif kind == "judgements":
        for i in range(n):
            score = rng.randint(1, 10)
            rows.append({**base, "judgement_id": _id("judgement", i),
                         "rollout_id": _id("rollout", i),
                         "problem_id": _id("problem", i // samples),
                         "judge": "judge[/models/judge:1-10]@1", "question": f"{i}+7",
                         "rubric": None,
                         "prompt": f"Rate the answer {i + 7} to {i}+7 from 1 to 10:",
                         "reply": f" {score}", "prompt_swapped": None, "reply_swapped": None,
                         "position_consistent": None, "reward": (score - 1) / 9, "reason": None})
    else:
        raise KeyError(kind)
    return rows


def bench_sizes(kinds: list[str], sizes: list[int], repeats: int, folder: Path) -> dict:
    from configs import GatesConfig
    from storage.datasets import write_atomic
    from validators.gate import run_gate

    gates = GatesConfig()
    previous = write_atomic("problems", synthetic_rows("problems", 10_000, round_index=0, seed=1),
                            folder / "previous-problems.parquet").path
    started = time.perf_counter()
    warm = write_atomic("evals", synthetic_rows("evals", 100), folder / "warm.parquet").path
    first = run_gate(warm, "evals", gates, run_id=RUN_ID, round_index=1)
    first_gate_s = time.perf_counter() - started
    assert first.success, first.summary()
    rows_out = []
    for kind in kinds:
        for size in sizes:
            path = write_atomic(kind, synthetic_rows(kind, size),
                                folder / f"{kind}-{size}.parquet").path
            times, cpu, result = [], [], None
            for _ in range(repeats):
                cpu_started = time.process_time()
                result = run_gate(path, kind, gates, run_id=RUN_ID, round_index=1,
                                  previous_path=previous if kind == "problems" else None)
                cpu.append(time.process_time() - cpu_started)
                times.append(result.seconds)
            per_100k = min(times) / (size / 100_000)
            row = {"kind": kind, "rows": size, "seconds": round(min(times), 4),
                   "cpu_seconds": round(min(cpu), 4),
                   "seconds_per_100k_rows": round(per_100k, 4),
                   "ratio_to_target": round(per_100k / TARGET_S_PER_100K, 3),
                   "expectations": result.evaluated, "passed": result.success}
            earlier = [r for r in rows_out if r["kind"] == kind]
            if earlier:  # the cost of more rows, without the fixed cost of a gate
                low = earlier[-1]
                row["marginal_seconds_per_100k_rows"] = round(
                    (row["seconds"] - low["seconds"]) / ((size - low["rows"]) / 100_000), 4)
            rows_out.append(row)
            marginal = row.get("marginal_seconds_per_100k_rows")
            print(f"  {kind:<11} {size:>9,} rows  {row['seconds']:>7.3f} s"
                  f" (cpu {row['cpu_seconds']:.3f})  "
                  f"{per_100k:>7.3f} s/100k rows  x{row['ratio_to_target']:.2f} of target"
                  + (f"  marginal {marginal:.3f} s/100k" if marginal is not None else "")
                  + f"  {result.evaluated} expectations"
                  + ("" if result.success else "  FAILED: " + result.summary()))
            path.unlink()
    return {"gx_import_and_first_gate_s": round(first_gate_s, 3), "gates": rows_out}


def share_from_catalog(data_root: Path, run_id: str, upto_round: int | None = None) -> dict:
    """Gate seconds (as recorded in the catalog's `gates` rows, and measured again now with the
    current code on the stored outputs) over the seconds of the run's stages (which include
    their gates), rounds <= upto_round."""
    from configs import GatesConfig
    from storage.catalog import Catalog
    from validators.gate import validate_stored

    catalog = Catalog(data_root)
    last = 10**9 if upto_round is None else upto_round
    gates = catalog.query("SELECT stage, kind, success, result_json FROM gates WHERE run_id = ?"
                          " AND round <= ?", [run_id, last])
    stages = catalog.query("SELECT stage, round, status, seconds, rows FROM stages WHERE run_id = ?"
                           " AND status IN ('completed', 'gate_failed') AND round <= ?",
                           [run_id, last])
    gate_s = sum(json.loads(g["result_json"])["seconds"] for g in gates)
    stage_s = sum(s["seconds"] for s in stages)
    rounds = sorted({s["round"] for s in stages})
    again = [r for n in rounds
             for r in validate_stored(catalog, run_id, GatesConfig(), round_index=n)]
    again_s = sum(r.seconds for r in again)
    return {"run_id": run_id, "rounds": rounds, "gates_run": len(gates),
            "gates_failed": sum(not g["success"] for g in gates),
            "gate_seconds": round(gate_s, 3), "stage_seconds": round(stage_s, 3),
            "gate_share_of_stage_time": round(gate_s / stage_s, 4) if stage_s else None,
            "gate_seconds_current_code": round(again_s, 3),
            "gate_share_of_stage_time_current_code": (
                round(again_s / (stage_s - gate_s + again_s), 4) if stage_s else None),
            "gates_failed_current_code": sum(not r.success for r in again),
            "rows_gated": sum(r.rows or 0 for r in again)}


def bench_round(config_path: Path, rounds: int, folder: Path) -> dict:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
    from configs import load_config
    from flows.run import RunSpec, flywheel_flow

    config = load_config(config_path, {"rounds": rounds})
    started = time.perf_counter()
    flywheel_flow(RunSpec(data_root=str(folder), run_id=RUN_ID, config=config))
    wall = time.perf_counter() - started
    share = share_from_catalog(folder, RUN_ID)
    share.update({"config": str(config_path), "rounds": rounds, "wall_seconds": round(wall, 1),
                  "gate_share_of_wall_time": round(share["gate_seconds"] / wall, 4)})
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--kinds", nargs="+", default=None, help="default: every kind")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--config", type=Path, default=ROOT / "tests" / "flows" / "small.toml")
    parser.add_argument("--rounds", type=int, default=0,
                        help="self-improvement rounds of the timed run")
    parser.add_argument("--skip-round", action="store_true", help="only time gates vs rows")
    parser.add_argument("--from-run", nargs=2, metavar=("DATA_ROOT", "RUN_ID"),
                        help="share of round time from a finished run instead of running one")
    parser.add_argument("--upto-round", type=int, default=None,
                        help="with --from-run: only rounds <= this (e.g. the ones finished)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gates.json")
    args = parser.parse_args()

    from storage.datasets import KINDS

    kinds = args.kinds or list(KINDS)
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cpus,"
                               f" {platform.python_version()}",
                    "target_seconds_per_100k_rows": TARGET_S_PER_100K,
                    "load_average_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-gates-") as tmp:
        print(f"seconds per gate vs rows (best of {args.repeats};"
              f" target {TARGET_S_PER_100K} s per 100k rows):")
        report.update(bench_sizes(kinds, args.sizes, args.repeats, Path(tmp)))
        print("  (GX import + first gate of the process:"
              f" {report['gx_import_and_first_gate_s']:.2f} s)")
        worst = max(r["seconds_per_100k_rows"] for r in report["gates"] if r["rows"] >= 100_000) \
            if any(r["rows"] >= 100_000 for r in report["gates"]) else None
        report["worst_seconds_per_100k_rows_at_100k_or_more"] = worst
        if args.from_run:
            report["round"] = share_from_catalog(Path(args.from_run[0]), args.from_run[1],
                                                 args.upto_round)
        elif not args.skip_round:
            print(f"timing a real run of {args.config} with rounds = {args.rounds} ...")
            report["round"] = bench_round(args.config, args.rounds, Path(tmp) / "run")
    if "round" in report:
        r = report["round"]
        print(f"share of round time in gates (rounds {r['rounds']}): {r['gate_seconds']:.1f} s of "
              f"{r['stage_seconds']:.1f} s stage time = {r['gate_share_of_stage_time']:.1%}"
              " as recorded "
              f"({r['gates_run']} gates, {r['gates_failed']} failed); gates re-run now: "
              f"{r['gate_seconds_current_code']:.1f} s ="
              f" {r['gate_share_of_stage_time_current_code']:.1%} "
              f"({r['rows_gated']:,} rows, {r['gates_failed_current_code']} failed)")
    report["load_average_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
