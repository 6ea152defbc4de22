"""Which reasoning-gym tasks can Flywheel verify from stored rows? Every task with a curriculum.

For each task in `reasoning_gym.factory.CURRICULA`, `--items` items of each of two dataset seeds
at each of levels 1..`--levels` are generated as the domain generates them (curriculum global
level L - 1; the held-out seed 0 and the generator's seed 2**31, items 0, 1, ... of a size-1
dataset; every dataset build and item under `--item-seconds`, as
`[domain.reasoning_gym] item_seconds`), their metadata encoded (domains/reasoning_gym_payload.py)
and written to one Parquet file as problem rows (text, reference, level, task, payload). A FRESH
Python process then reads only that file and judges each item's own reference against its row
(`score_rows`: through `domains.get_domain("reasoning_gym", ...).judge([reference], [row])` with
`verify.extract = ["whole"]` and `compare = "task"`, i.e. the task's `score_answer` on the
entry rebuilt from the row, by a level-1 dataset of the task). An item passes at score 1.0.

Status per task (the first that applies):

    slow_generator             a dataset build or item took more than --item-seconds
    error                      a level's configuration or generator raised, or judging failed
    unstorable_metadata        metadata holds a value the payload cannot store
    reference_not_full_score   some item's own reference scored below 1.0 from its stored row
    usable                     every item of every level scored 1.0 in the fresh process

Printed: a row per task (levels generated, items, full-score share, status, detail), the counts
by status and the seconds. A full sweep (no --tasks) rewrites domains/reasoning_gym_unusable.py,
the tasks the domain refuses at config time.

    .venv/bin/python bench/reasoning_gym_sweep.py [--items 5] [--item-seconds 5] [--levels 3]
        [--tasks countdown,graph_color] [--json out.json] [--no-module]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

UNUSABLE_MODULE = ROOT / "domains" / "reasoning_gym_unusable.py"
# The held-out seed (items 0, 1, ... are the ones heldout() builds first) and the generator's
# (warm-up and generator rounds draw item indices of dataset seed 2**31).
SEEDS = (0, 2**31)
STATUSES = ("usable", "slow_generator", "error", "unstorable_metadata",
            "reference_not_full_score")
COMMAND = ".venv/bin/python bench/reasoning_gym_sweep.py"


# ---- generation (this process) ----------------------------------------------------------------


def _payload_row(task: str, level: int, entry: dict) -> dict[str, Any]:
    """The problem row Flywheel stores for `entry` (UnstorableMetadata when it cannot)."""
    from domains import base
    from domains.reasoning_gym_payload import encode_metadata

    text = f"{task} L{level}: {entry['question']}".strip()
    reference = str(entry["answer"])
    payload = {"question": entry["question"],
               "metadata": encode_metadata(entry.get("metadata", {}), task)}
    if hasattr(base, "problem_row"):
        return base.problem_row(base.Problem(text=text, reference=reference, level=level,
                                             task=task, payload=payload))
    return {"text": text, "reference": reference, "level": level, "task": task,
            "payload": json.dumps(payload, sort_keys=True, separators=(",", ":"))}


def _generate_level(task: str, level: int, seed: int, items: int, seconds: float,
                    record: dict, rows: list[dict]) -> None:
    """Items 0..items-1 of dataset `seed` at `level`, as the domain builds them (a size-1
    dataset indexed directly), each a row or a problem of `record`."""
    from reasoning_gym.factory import DATASETS, create_curriculum

    from domains.reasoning_gym import time_limit
    from domains.reasoning_gym_payload import UnstorableMetadata, decode_metadata

    curriculum = create_curriculum(task)
    curriculum.set_global_level(level - 1)
    settings = curriculum.generate_configuration({"seed": seed, "size": 1})
    with time_limit(seconds, f"{task} level {level} dataset seed {seed}"):
        dataset = DATASETS[task][0](config=settings)
    for index in range(items):
        where = f"L{level} seed {seed} item {index}"
        with time_limit(seconds, f"{task} {where}"):
            entry = dataset[index]
        record["generated"] += 1
        try:
            row = _payload_row(task, level, entry)
        except UnstorableMetadata as exc:
            record["problems"].append(("unstorable_metadata", f"{where}: {exc}"))
            continue
        if decode_metadata(json.loads(row["payload"])["metadata"]) != entry["metadata"]:
            record["problems"].append(("unstorable_metadata",
                                       f"{where}: the payload changes the metadata"))
            continue
        with time_limit(seconds, f"{task} {where} scoring"):
            own = dataset.score_answer(str(entry["answer"]), entry)
        rows.append({**row, "seed": seed, "index": index, "own_score": float(own)})


def generate_task(task: str, items: int, levels: int, seconds: float,
                  seeds: tuple[int, ...] = SEEDS) -> tuple[dict, list[dict]]:
    """The task's record (levels generated, problems) and its problem rows."""
    from domains.reasoning_gym import GeneratorTooSlow

    record: dict[str, Any] = {"task": task, "levels": [], "generated": 0, "problems": []}
    rows: list[dict] = []
    for level in range(1, levels + 1):
        try:
            for seed in seeds:
                _generate_level(task, level, seed, items, seconds, record, rows)
            record["levels"].append(level)
        except GeneratorTooSlow as exc:
            record["problems"].append(("slow_generator", str(exc)))
            break  # the next levels are harder: as slow or slower
        except Exception as exc:  # a curriculum level the generator refuses, a generator bug
            record["problems"].append(("error", f"L{level}: {type(exc).__name__}: {exc}"))
    return record, rows


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = ("text", "reference", "level", "task", "payload", "seed", "index", "own_score")
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in columns}), path)


# ---- judging (a fresh process that reads only the Parquet file) -------------------------------


def _score_by_domain(rows: list[dict], seconds: float) -> list[tuple[float | None, str | None]]:
    """Each row's reference judged by the reasoning_gym domain, one domain per task."""
    from configs import RunConfig
    from domains import get_domain
    from domains.reasoning_gym import time_limit
    from domains.reasoning_gym_unusable import UNUSABLE_TASKS

    UNUSABLE_TASKS.clear()  # the sweep measures every task, those it refused last time too
    domains: dict[str, Any] = {}
    out: list[tuple[float | None, str | None]] = []
    for row in rows:
        task = row["task"]
        try:
            if task not in domains:
                config = RunConfig(domain={"name": "reasoning_gym", "min_level": 1,
                                           "max_level": 5,
                                           "reasoning_gym": {"tasks": {task: 1.0},
                                                             "item_seconds": seconds}},
                                   verify={"extract": ["whole"], "compare": "task"})
                domains[task] = get_domain("reasoning_gym", config)
            with time_limit(seconds, f"{task} judging"):
                verdict = domains[task].judge([row["reference"]], [row])[0]
            out.append((verdict.reward, verdict.reason))
        except Exception as exc:
            out.append((None, f"{type(exc).__name__}: {exc}"))
    return out


def _score_direct(rows: list[dict], seconds: float,
                  level_of=lambda row: 1) -> list[tuple[float | None, str | None]]:
    """Each row's raw reference scored by the task's `score_answer` on the entry rebuilt from
    the row's payload, by the dataset of level `level_of(row)` (1: as the domain scores)."""
    from reasoning_gym.factory import DATASETS, create_curriculum

    from domains.reasoning_gym import GENERATOR_SEED, time_limit
    from domains.reasoning_gym_payload import decode_metadata

    scorers: dict[tuple[str, int], Any] = {}
    out: list[tuple[float | None, str | None]] = []
    for row in rows:
        key = (row["task"], level_of(row))
        try:
            if key not in scorers:
                curriculum = create_curriculum(key[0])
                curriculum.set_global_level(key[1] - 1)
                settings = curriculum.generate_configuration({"seed": GENERATOR_SEED, "size": 1})
                with time_limit(seconds, f"{key[0]} level {key[1]} dataset"):
                    scorers[key] = DATASETS[key[0]][0](config=settings).score_answer
            payload = json.loads(row["payload"])
            entry = {"question": payload["question"], "answer": row["reference"],
                     "metadata": decode_metadata(payload["metadata"])}
            with time_limit(seconds, f"{key[0]} judging"):
                out.append((float(scorers[key](row["reference"], entry)), None))
        except Exception as exc:
            out.append((None, f"{type(exc).__name__}: {exc}"))
    return out


def diagnose(rows: list[dict], seconds: float) -> list[str]:
    """Why each row (judged below 1.0) fell short: the generator's own reference is not full
    score, the payload lost something, the level-1 scorer refuses a higher level's item, or
    the answer extraction changed the reference."""
    level_1 = _score_direct(rows, seconds)
    own_level = _score_direct(rows, seconds, level_of=lambda row: row["level"])
    out = []
    for row, (at_1, _), (at_own, _) in zip(rows, level_1, own_level, strict=True):
        if row["own_score"] < 1.0:
            out.append("the generator's own reference is not full score")
        elif at_own is None or at_own < 1.0:
            out.append("the stored payload loses what the scorer reads")
        elif at_1 is None or at_1 < 1.0:
            out.append(f"full score by the level-{row['level']} scorer, not by the level-1 one")
        else:
            out.append("full score on the raw reference: the answer extraction changes it")
    return out


def score_rows(rows: list[dict], seconds: float) -> tuple[str, list]:
    """The judging path: the domain's `judge` once domains.base has problem rows, else direct."""
    from domains import base

    if hasattr(base, "problem_row"):
        return "domain", _score_by_domain(rows, seconds)
    return "direct", _score_direct(rows, seconds)


def score_file(parquet: Path, seconds: float, out: Path) -> None:
    """The fresh process: read only `parquet`, judge every row, write the scores as JSON."""
    import pyarrow.parquet as pq

    rows = pq.read_table(parquet).to_pylist()
    path, scores = score_rows(rows, seconds)
    low = [i for i, (score, _) in enumerate(scores) if score is not None and score < 1.0]
    causes = dict(zip(low, diagnose([rows[i] for i in low], seconds), strict=True))
    out.write_text(json.dumps({"path": path, "scores": scores,
                               "causes": [causes.get(i) for i in range(len(rows))]}))


# ---- the sweep --------------------------------------------------------------------------------


def _status(record: dict, scored: list[tuple[dict, float | None, str | None]]) -> tuple[str, str]:
    kinds = {kind: detail for kind, detail in reversed(record["problems"])}  # first detail wins
    for kind in ("slow_generator", "error"):
        if kind in kinds:
            return kind, kinds[kind]
    failed = [(row, reason) for row, score, reason in scored if score is None]
    if failed:
        row, reason = failed[0]
        return "error", (f"L{row['level']} seed {row['seed']} item {row['index']} not judged: "
                         f"{reason}")
    if "unstorable_metadata" in kinds:
        return "unstorable_metadata", kinds["unstorable_metadata"]
    if not scored:
        return "error", "no items generated"
    low = [(row, score, cause) for row, score, cause in scored if score < 1.0]
    if low:
        causes = Counter(cause for _, _, cause in low)
        row, score, _ = low[0]
        return ("reference_not_full_score",
                f"{len(low)} of {len(scored)} below 1.0 ("
                + "; ".join(f"{n}: {cause}" for cause, n in causes.most_common())
                + f"), e.g. L{row['level']} seed {row['seed']} item {row['index']} reference "
                f"{row['reference'][:24]!r} scores {score:.3g}")
    return "usable", ""


def write_module(unusable: dict[str, str], args: argparse.Namespace, version: str,
                 counts: Counter, total: int) -> None:
    lines = [
        '"""The reasoning-gym tasks the domain refuses at config time: their items cannot be',
        'verified from stored problem rows (generated; see docs/workloads.md)."""',
        "",
        "# GENERATED by bench/reasoning_gym_sweep.py; do not edit. Regenerate with:",
        f"#     {COMMAND} --items {args.items} --item-seconds {args.item_seconds:g} "
        f"--levels {args.levels}",
        f"# reasoning-gym {version}: {counts['usable']} of {total} tasks with a curriculum "
        f"usable ({args.items} items at each of levels 1-{args.levels}).",
        "# Reasons: slow_generator (an item took more than the item seconds), error (a level's",
        "# configuration or generator raised, or judging failed), unstorable_metadata (metadata",
        "# the payload cannot store), reference_not_full_score (the item's own reference scored",
        "# below 1.0 from its stored row).",
        "",
        "UNUSABLE_TASKS: dict[str, str] = {",
        *(f"    {task!r}: {reason!r}," for task, reason in sorted(unusable.items())),
        "}",
        "",
    ]
    UNUSABLE_MODULE.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=5, help="items per task, level and seed")
    parser.add_argument("--item-seconds", type=float, default=5.0,
                        help="time limit of one dataset build, item or judging")
    parser.add_argument("--levels", type=int, default=3, help="levels 1..N")
    parser.add_argument("--tasks", default="", help="comma-separated tasks (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="write the records here")
    parser.add_argument("--no-module", action="store_true",
                        help="do not rewrite domains/reasoning_gym_unusable.py")
    parser.add_argument("--score", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scores-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.score is not None:  # the fresh judging process
        score_file(args.score, args.item_seconds, args.scores_out)
        return

    started = time.monotonic()
    from importlib.metadata import version

    from reasoning_gym.factory import CURRICULA

    tasks = sorted(CURRICULA) if not args.tasks else args.tasks.split(",")
    records, rows = [], []
    for task in tasks:
        record, task_rows = generate_task(task, args.items, args.levels, args.item_seconds)
        records.append(record)
        rows.extend(task_rows)
        print(f"generated {task}: {len(task_rows)} rows", file=sys.stderr, flush=True)
    generated_at = time.monotonic()

    with tempfile.TemporaryDirectory() as tmp:
        parquet, scores_out = Path(tmp) / "problems.parquet", Path(tmp) / "scores.json"
        write_parquet(rows, parquet)
        subprocess.run([sys.executable, __file__, "--score", str(parquet), "--item-seconds",
                        str(args.item_seconds), "--scores-out", str(scores_out)],
                       check=True, cwd=ROOT, timeout=1800)
        judged = json.loads(scores_out.read_text())
    judged_at = time.monotonic()

    by_task: dict[str, list] = {}
    for row, (score, reason), cause in zip(rows, judged["scores"], judged["causes"],
                                           strict=True):
        by_task.setdefault(row["task"], []).append((row, score, reason or cause))
    counts: Counter = Counter()
    print(f"\n{'task':28} {'levels':7} {'items':>5} {'full':>5}  status  detail")
    for record in records:
        scored = by_task.get(record["task"], [])
        status, detail = _status(record, scored)
        full = sum(1 for _, score, _ in scored if score == 1.0)
        record.update(status=status, detail=detail, items=len(scored),
                      full_score_share=full / len(scored) if scored else 0.0,
                      scores=[score for _, score, _ in scored])
        counts[status] += 1
        levels = ",".join(map(str, record["levels"])) or "-"
        share = f"{record['full_score_share']:.2f}" if scored else "-"
        print(f"{record['task']:28} {levels:7} {len(scored):5} {share:>5}  {status}  "
              f"{detail[:200]}")
    seconds = time.monotonic() - started
    print(f"\n{len(records)} tasks with a curriculum: "
          + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
          + f"; judged by the {judged['path']} path in a fresh process; {seconds:.0f} s "
          f"(generation {generated_at - started:.0f} s, judging {judged_at - generated_at:.0f} s)")

    rg_version = version("reasoning_gym")
    if not args.tasks and not args.no_module:
        unusable = {r["task"]: r["status"] for r in records if r["status"] != "usable"}
        write_module(unusable, args, rg_version, counts, len(records))
        print(f"wrote {UNUSABLE_MODULE.relative_to(ROOT)} ({len(unusable)} tasks)")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "reasoning_gym": rg_version, "items": args.items, "levels": args.levels,
            "item_seconds": args.item_seconds, "judging_path": judged["path"],
            "seconds": round(seconds, 1), "counts": dict(counts),
            "tasks": [{k: v for k, v in r.items()} for r in records]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
