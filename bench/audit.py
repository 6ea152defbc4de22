"""How fast is auditing? Cold start of the CLI, and audit queries on a catalog of 10 M rollouts.

1. Cold start: wall time of `flywheel status RUN` and `flywheel audit RUN funnel` as fresh
   processes (import + open the catalog + query + print), median of --repeats runs.
2. Query time on a synthetic run written with the project's own writers (`write_atomic` for
   every Parquet file, `Catalog.record_completed` for every stage): --rounds rounds of
   --problems problems with --samples rollouts each (default 20 x 62,500 x 8 = 10 M rollouts,
   10 M verdicts), plus the proposals, curriculum, train rows and checkpoints a real run has.
   Timed in-process: taking the snapshot (`open_run`), then each query on it.

    python bench/audit.py [--data-root DIR] [--rounds 20] [--problems 62500] [--samples 8]
                          [--out bench/results/audit.json]

The synthetic run is kept in --data-root (default: a temporary folder, removed afterwards) and
reused when it is already complete there, so the query part can be rerun quickly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN_ID = "synthetic"


def _id(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def generate(data_root: Path, *, rounds: int, problems: int, samples: int) -> None:
    """A run of `rounds` rounds written through write_atomic + Catalog.record_completed."""
    from storage.catalog import Catalog
    from storage.datasets import dataset_path, write_atomic

    catalog = Catalog(data_root)
    config = {"seed": 0, "rounds": rounds, "train": {"replay_ratio": 1.0}}
    catalog.ensure_run(RUN_ID, json.dumps(config))
    checkpoint = _checkpoint(data_root, 0, "base", catalog)
    curated: list[tuple[int, str, int]] = []  # (round, curate fingerprint, rows)
    for r in range(rounds):
        started = time.time()
        fp = {stage: _id("stage", r, stage) * 2
              for stage in ("synthesize", "rollout", "verify", "curate")}
        proposals, problem_rows = [], []
        for i in range(problems * 5 // 4):
            text = f"{i % 997}+{(i * 7 + r) % 991}*{r}"
            pid, qid = _id("problem", r, i), _id("proposal", r, i)
            reason = None if i < problems else ("invalid" if i % 2 else "duplicate")
            proposals.append({"proposal_id": qid, "run_id": RUN_ID, "round": r,
                              "prompt": "<propose>L3:", "text": text,
                              "level": None if reason == "invalid" else 1 + i % 5,
                              "source": "seed" if r == 0 else "proposer",
                              "problem_id": None if reason else pid, "drop_reason": reason})
            if reason is None:
                problem_rows.append({"problem_id": pid, "run_id": RUN_ID, "round": r, "text": text,
                                     "reference": str(i), "level": 1 + i % 5, "source": "proposer",
                                     "proposal_id": qid})
        _record(catalog, r, "synthesize", fp["synthesize"], {"checkpoint": checkpoint}, [
            write_atomic("proposals", proposals,
                         dataset_path(data_root, RUN_ID, r, "proposals", fp["synthesize"])),
            write_atomic("problems", problem_rows,
                         dataset_path(data_root, RUN_ID, r, "problems", fp["synthesize"]))],
            started)
        del proposals
        rollouts, verdicts, curriculum, train_rows = [], [], [], []
        for i, p in enumerate(problem_rows):
            correct = i % (samples + 1)  # pass rates 0, 1/k, ..., 1 in turn
            for s in range(samples):
                rid = _id("rollout", r, i, s)
                answer = p["reference"] if s < correct else str(s)
                rollouts.append({"rollout_id": rid, "run_id": RUN_ID, "round": r,
                                 "problem_id": p["problem_id"], "sample_index": s,
                                 "prompt": f"<solve>{p['text']}=", "completion": answer,
                                 "completion_tokens": len(answer) + 1, "checkpoint": checkpoint})
                verdicts.append({"rollout_id": rid, "run_id": RUN_ID, "round": r,
                                 "problem_id": p["problem_id"], "answer": answer,
                                 "reward": float(s < correct), "method": "reference"})
            rate = correct / samples
            reason = "too_hard" if correct == 0 else "too_easy" if correct == samples else None
            curriculum.append({"problem_id": p["problem_id"], "run_id": RUN_ID, "round": r,
                               "level": p["level"], "samples": samples,
                               "judged": samples, "passed": correct, "pass_rate": rate,
                               "reward_std": (rate * (1 - rate)) ** 0.5,
                               "reward_mad": 2 * rate * (1 - rate), "kept": reason is None,
                               "drop_reason": reason})
            for s in range(min(correct, 2) if reason is None else 0):
                train_rows.append({"train_row_id": _id("train_row", r, i, s), "run_id": RUN_ID,
                                   "round": r, "role": "solver", "prompt": f"<solve>{p['text']}=",
                                   "completion": p["reference"], "weight": 1.0,
                                   "problem_id": p["problem_id"],
                                   "rollout_id": _id("rollout", r, i, s),
                                   "proposal_id": p["proposal_id"]})
        for p in problem_rows[:256]:
            train_rows.append({"train_row_id": _id("train_row", r, p["problem_id"], "proposer"),
                               "run_id": RUN_ID, "round": r, "role": "proposer",
                               "prompt": "<propose>L3:", "completion": p["text"], "weight": 0.5,
                               "problem_id": p["problem_id"], "rollout_id": None,
                               "proposal_id": p["proposal_id"]})
        _record(catalog, r, "rollout", fp["rollout"], {"problems": fp["synthesize"]}, [write_atomic(
            "rollouts", rollouts, dataset_path(data_root, RUN_ID, r, "rollouts", fp["rollout"]))],
            started)
        del rollouts
        _record(catalog, r, "verify", fp["verify"], {"rollouts": fp["rollout"]}, [write_atomic(
            "verdicts", verdicts, dataset_path(data_root, RUN_ID, r, "verdicts", fp["verify"]))],
            started)
        del verdicts
        _record(catalog, r, "curate", fp["curate"], {"verdicts": fp["verify"]}, [
            write_atomic("curriculum", curriculum,
                         dataset_path(data_root, RUN_ID, r, "curriculum", fp["curate"])),
            write_atomic("train_rows", train_rows,
                         dataset_path(data_root, RUN_ID, r, "train_rows", fp["curate"]))],
            started, {"kept": sum(c["kept"] for c in curriculum), "train_rows": len(train_rows)})
        own = len(train_rows)
        pool = sum(n for _, _, n in curated)
        inputs = {"checkpoint": checkpoint, "train_rows": fp["curate"],
                  **{f"replay_round_{k}": f for k, f, _ in curated}}
        replayed = min(pool, round(1.0 * own))
        checkpoint = _checkpoint(data_root, r, "train", catalog, inputs=inputs,
                                 metrics={"train_rows": own + replayed, "replayed_rows": replayed,
                                          "steps": 1})
        curated.append((r, fp["curate"], own))
        print(f"  round {r}: {len(problem_rows) * samples:,} rollouts written in "
              f"{time.time() - started:.1f} s", flush=True)


def _record(catalog, r, stage, fingerprint, inputs, outputs, started, metrics=None) -> None:
    catalog.record_completed(run_id=RUN_ID, round_index=r, stage=stage, fingerprint=fingerprint,
                             started_at=started, outputs=outputs, inputs=inputs, metrics=metrics)


def _checkpoint(data_root: Path, r: int, stage: str, catalog, *, inputs=None, metrics=None) -> str:
    from storage.datasets import WrittenDataset, round_dir
    from storage.fingerprint import file_checksum, stage_fingerprint

    fingerprint = stage_fingerprint(stage, 1, {"synthetic": True}, r, inputs or {})
    folder = round_dir(data_root, RUN_ID, r) / f"checkpoint-{fingerprint[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(fingerprint.encode())
    written = WrittenDataset("checkpoint", folder, (metrics or {}).get("train_rows", 0),
                             file_checksum(folder / "model.safetensors"))
    _record(catalog, r, stage, fingerprint, inputs or {}, [written], time.time(), metrics)
    return fingerprint


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cold_start(data_root: Path, repeats: int) -> dict[str, float]:
    """Wall and CPU seconds of fresh `flywheel status` / `flywheel audit ... funnel` processes.
    On a shared machine the CPU time is the steadier figure; wall time includes waiting."""
    env = {**os.environ, "FLYWHEEL_DATA_ROOT": str(data_root)}
    exe = str(Path(sys.executable).with_name("flywheel"))
    out = {}
    for name, args in {"status": ["status", RUN_ID],
                       "audit_funnel": ["audit", RUN_ID, "funnel"]}.items():
        walls, cpus = [], []
        for _ in range(repeats):
            start, cpu = time.perf_counter(), _children_cpu()
            subprocess.run([exe, *args], env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu() - cpu)
        out[f"{name}_wall_seconds_median"] = statistics.median(walls)
        out[f"{name}_wall_seconds_min"] = min(walls)
        out[f"{name}_cpu_seconds_median"] = statistics.median(cpus)
    return out


def query_times(data_root: Path, repeats: int) -> dict[str, float]:
    from storage.audit.lineage import lineage
    from storage.audit.queries import drift, drops, funnel, labels
    from storage.audit.snapshot import open_run

    con = open_run(data_root, RUN_ID)
    last = con.execute("SELECT max(round) FROM train_rows").fetchone()[0]
    row = con.execute("SELECT train_row_id FROM train_rows WHERE role = 'solver'"
                      " AND round = ? LIMIT 1", [last]).fetchone()[0]
    middle = con.execute("SELECT train_row_id FROM train_rows WHERE role = 'solver'"
                         " AND round = ? LIMIT 1", [last // 2]).fetchone()[0]
    checkpoint = con.execute("SELECT fingerprint FROM datasets WHERE kind = 'checkpoint'"
                             " AND stage = 'train' ORDER BY round DESC LIMIT 1").fetchone()[0]
    rollouts = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    con.close()
    cases = {
        "open_run": lambda c: None,
        "funnel": lambda c: funnel(c),
        "lineage_train_row_last_round": lambda c: lineage(c, row),
        "lineage_train_row_middle_round": lambda c: lineage(c, middle),
        "lineage_checkpoint_last_round": lambda c: lineage(c, checkpoint),
        "drops": lambda c: drops(c),
        "drift": lambda c: drift(c),
        "labels": lambda c: labels(c),
    }
    out: dict[str, float] = {"rollouts": rollouts}
    for name, query in cases.items():
        walls, cpus = [], []
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            con = open_run(data_root, RUN_ID)
            opened, opened_cpu = time.perf_counter(), time.process_time()
            query(con)
            end, end_cpu = time.perf_counter(), time.process_time()
            con.close()
            walls.append(end - (start if name == "open_run" else opened))
            cpus.append(end_cpu - (cpu if name == "open_run" else opened_cpu))
        out[f"{name}_wall_seconds"] = statistics.median(walls)
        out[f"{name}_cpu_seconds"] = statistics.median(cpus)
        print(f"  {name:<32} {out[f'{name}_wall_seconds']:.3f} s wall  "
              f"{out[f'{name}_cpu_seconds']:.3f} s cpu", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="keep the synthetic run here")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--problems", type=int, default=62_500, help="problems per round")
    parser.add_argument("--samples", type=int, default=8, help="rollouts per problem")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "audit.json")
    args = parser.parse_args()
    data_root = args.data_root or Path(tempfile.mkdtemp(prefix="flywheel-audit-bench-"))
    expected = args.rounds * args.problems * args.samples
    try:
        if _rollouts(data_root, args.rounds) != expected:
            shutil.rmtree(data_root, ignore_errors=True)
            print(f"writing a synthetic run of {expected:,} rollouts to {data_root}", flush=True)
            start = time.perf_counter()
            generate(data_root, rounds=args.rounds, problems=args.problems, samples=args.samples)
            print(f"  written in {time.perf_counter() - start:.0f} s", flush=True)
        print("cold start (fresh process, median of", args.repeats, "runs):", flush=True)
        cold = cold_start(data_root, args.repeats)
        for key, value in cold.items():
            print(f"  {key:<36} {value:.3f} s")
        print("queries (in-process, median; open_run = snapshot of the catalog, the rest = query"
              " on it; cpu counts every DuckDB thread):", flush=True)
        queries = query_times(data_root, args.repeats)
    finally:
        if args.data_root is None:
            shutil.rmtree(data_root, ignore_errors=True)
    size = (sum(f.stat().st_size for f in data_root.rglob("*") if f.is_file())
            if data_root.exists() else None)
    result = {"benchmark": "audit", "rounds": args.rounds, "problems_per_round": args.problems,
              "samples": args.samples, "cpu_count": os.cpu_count(), "data_bytes": size,
              "load_average_1min": os.getloadavg()[0], **cold, **queries}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


def _rollouts(data_root: Path, rounds: int) -> int:
    """Rollouts of a complete synthetic run in `data_root`, or -1."""
    from storage.catalog import Catalog

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        return -1
    rows = catalog.query("SELECT coalesce(sum(d.rows), 0) AS n FROM datasets d"
                         " WHERE d.kind = 'rollouts' AND d.run_id = ?", [RUN_ID])
    done = catalog.query("SELECT count(*) AS n FROM stages WHERE run_id = ? AND stage = 'train'",
                         [RUN_ID])
    return rows[0]["n"] if done[0]["n"] == rounds else -1


if __name__ == "__main__":
    main()
