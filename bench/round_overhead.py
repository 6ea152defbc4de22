"""Where does a round's time go? Model compute against everything else, each part named.

Runs a config (default: tests/flows/small.toml, the warm-up and one round) the way `flywheel run`
does (flows/execution.py `execute`: the run's own temporary Prefect server, the log file, the
stage lines forwarded to the Prefect API), in this process, and records round 1 with the spans
of tasks/spans.py: the stage runner's parts (done check, integrity check, own work, Parquet
writes, checkpoint hashing, gates, catalog rows) and, wrapped here, the model (sampling,
training), Prefect's task and flow runs, log forwarding, the round's artifact and the tracker.
What no span covers is the round flow's own steps between its task calls.

With `--resume`, the same run is then resumed by `flywheel resume` in a fresh process, and
that process is recorded whole, three times: the completed run (nothing to recompute: the
command finds every stage done without a flow run, flows/run.py `resume_without_work`); then
the run marked stopped after its last stage, so that its flows run and every task run reuses its
stage, on its own temporary server as a plain `flywheel resume` starts, and once more with
PREFECT_API_URL naming a running server (the one this process's run used, warm from it; the flow
runs then send heartbeats, as to any server a user names).

    python bench/round_overhead.py [--config F] [--resume] [--out F]
    python bench/round_overhead.py --against ../before --repeats 3   # A B A B ... side by side

`--against DIR` runs DIR's copy of this bench and this one in turn, each in a fresh process, and
prints each run's round wall and non-model share: a before/after measured on the same machine
in the same minutes (DIR: a checkout of the other commit with its own .venv, or this one's).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUIET = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
         "TRANSFORMERS_VERBOSITY": "error", "PREFECT_LOGGING_LEVEL": "WARNING",
         "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
MODEL = ("sampling", "training")
# A run in this process points PREFECT_API_URL at its own temporary server; a resumed run in a
# fresh process must start its own, as `flywheel resume` does, unless the user named a server.
USER_API_URL = os.environ.get("PREFECT_API_URL")
BETWEEN = ("prefect task run",)  # named for a stage, but outside its runner


def wrap(owner: Any, name: str, part: str, *, per_task: bool = False) -> None:
    """Make `owner.name` a span called `part` (tasks/spans.py); `per_task`: of the stage the
    Prefect task is named for (its time outside the stage runner counts there)."""
    from tasks.spans import spent, stage

    original = getattr(owner, name)

    def spanned(*args: Any, **kwargs: Any) -> Any:
        if per_task:
            with stage(args[0].name), spent(part):
                return original(*args, **kwargs)
        with spent(part):
            return original(*args, **kwargs)

    setattr(owner, name, spanned)


def full_collections() -> list[tuple[float, str]]:
    """Every full (generation 2) collection of Python's cyclic collector from now on, appended
    as each ends: its seconds and the span it paused ("stage/part", "-" outside every span).
    They hide inside the other parts (and inside the model's), so they are reported beside
    them, not added."""
    from tasks.spans import current

    seen: list[tuple[float, str]] = []
    began: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            where = current()
            seen.append((time.perf_counter() - began.pop(), "/".join(where) if where else "-"))

    gc.callbacks.append(timed)
    return seen


def instrument(record_round: int, recordings: dict[int, Any]) -> None:
    """Wrap the model, Prefect's task/flow runs and log handlers, and record round
    `record_round` into `recordings[record_round]` (the recording, its wall seconds and the
    seconds of the full collections in it)."""
    from prefect import Flow, Task
    from prefect.logging.handlers import APILogHandler

    import flows.run as run_module
    from models import backends, trainer
    from tasks import spans, tracking

    wrap(backends.TransformersBackend, "generate", "sampling")
    wrap(trainer, "train_sft", "training")  # tasks/train.py imports it at call time
    wrap(Task, "__call__", "prefect task run", per_task=True)
    wrap(Flow, "__call__", "prefect flow runs")
    wrap(APILogHandler, "emit", "log forwarding")
    wrap(run_module, "publish_round_artifact", "round artifact")
    wrap(run_module, "trainable_rows", "flow steps")
    wrap(tracking, "track_round", "tracker")

    observed = run_module.observed_round
    collections = full_collections()

    @contextmanager
    def recorded_round(data_root: Any, run_id: str, round_index: int,
                       report_to: str) -> Iterator[None]:
        if round_index != record_round:
            with observed(data_root, run_id, round_index, report_to):
                yield
            return
        with spans.recording() as recording:
            start, before = time.perf_counter(), len(collections)
            with observed(data_root, run_id, round_index, report_to):
                yield
            recordings[round_index] = (recording, time.perf_counter() - start,
                                       collections[before:])

    run_module.observed_round = recorded_round


def split(recording: Any, wall: float,
          collections: list[tuple[float, str]] | None = None) -> dict[str, Any]:
    """The recorded seconds as model / between stages / inside stages, and their shares; with
    `collections` (None: not counted, as in a resumed process), the full collections' count and
    seconds beside them."""
    seconds = recording.seconds()
    calls = recording.calls()
    model = sum(s for (stage, part), s in seconds.items() if part in MODEL)
    parts = []
    for (stage, part), s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        where = ("model" if part in MODEL else "between" if stage == "-" or part in BETWEEN
                 else "inside")
        parts.append({"where": where, "stage": stage, "part": part, "seconds": round(s, 3),
                      "calls": calls[(stage, part)], "share": round(s / wall, 4)})
    covered = sum(seconds.values())
    parts.append({"where": "between", "stage": "-", "part": "round flow's own steps",
                  "seconds": round(wall - covered, 3), "calls": 1,
                  "share": round((wall - covered) / wall, 4)})
    other = wall - model
    counted = {} if collections is None else {
        "full_collections": len(collections),
        "full_collections_s": round(sum(seconds for seconds, _ in collections), 2),
        "full_collections_in": [f"{where} {seconds:.2f} s" for seconds, where in collections]}
    return {"wall_s": round(wall, 2), "model_compute_s": round(model, 2),
            "sampling_s": round(sum(s for (_, p), s in seconds.items() if p == "sampling"), 2),
            "training_s": round(sum(s for (_, p), s in seconds.items() if p == "training"), 2),
            "everything_else_s": round(other, 2), "everything_else_share": round(other / wall, 4),
            **counted, "parts": parts}


def table(title: str, result: dict[str, Any]) -> str:
    lines = [f"{title}: wall {result['wall_s']:.2f} s = model {result['model_compute_s']:.2f} s "
             f"(sampling {result['sampling_s']:.2f} s, training {result['training_s']:.2f} s)"
             f" + everything else {result['everything_else_s']:.2f} s "
             f"({100 * result['everything_else_share']:.1f} %)",
             f"  {'where':8} {'stage':11} {'part':24} {'seconds':>8} {'share':>7} {'calls':>6}"]
    for where in ("between", "inside", "model"):
        for p in (p for p in result["parts"] if p["where"] == where):
            lines.append(f"  {where:8} {p['stage']:11} {p['part']:24} {p['seconds']:8.3f} "
                         f"{100 * p['share']:6.2f}% {p['calls']:6d}")
    if "full_collections" in result:
        lines.append(f"  inside the parts above: {result['full_collections']} full collections of "
                     f"Python's cyclic collector, {result['full_collections_s']:.2f} s: "
                     + ", ".join(result["full_collections_in"]))
    return "\n".join(lines)


def run_once(config_path: Path, data_root: Path, run_id: str) -> float:
    """`flywheel run` in this process; returns its wall seconds."""
    from configs import load_config
    from flows.execution import execute

    config = load_config(config_path)
    start = time.perf_counter()
    status = execute(data_root, run_id, config, command="bench", echo=print)
    if status != 0:
        raise SystemExit(f"the run stopped with exit status {status}")
    return time.perf_counter() - start


def measure(config_path: Path, resume: bool) -> dict[str, Any]:
    """Round 1's split; with `resume`, the resumed run's too."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    recordings: dict[int, Any] = {}
    instrument(1, recordings)
    data_root = Path(tempfile.mkdtemp(prefix="flywheel-bench-"))
    run_wall = run_once(config_path, data_root, "bench")
    recording, wall, collections = recordings[1]
    result: dict[str, Any] = {"config": str(config_path), "run_wall_s": round(run_wall, 2),
                              "round_1": split(recording, wall, collections)}
    if resume:
        from storage.catalog import Catalog

        result["resume"] = resumed_elsewhere(data_root, USER_API_URL)
        # a run stopped after its last stage: the flows run, every task run reusing its stage
        Catalog(data_root).set_run_status("bench", "interrupted")
        result["resume_flows"] = resumed_elsewhere(data_root, USER_API_URL)
        Catalog(data_root).set_run_status("bench", "interrupted")
        # the server this process's run used, warm from it
        result["resume_flows_running_server"] = resumed_elsewhere(
            data_root, os.environ["PREFECT_API_URL"])
    return result


def resumed_elsewhere(data_root: Path, api_url: str | None) -> dict[str, Any]:
    """`flywheel resume bench` in a fresh process, as a user runs it, split by that process
    (`--resumed`); what it spends before the command (interpreter, imports) is measured here.
    `api_url`: the running server it uses (PREFECT_API_URL); None: it starts its own."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    if api_url is not None:
        env["PREFECT_API_URL"] = api_url
    start = time.perf_counter()
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--resumed", str(data_root),
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    result = json.loads(out.read_text())
    before = wall - result["wall_s"]
    result["parts"].append({"where": "between", "stage": "-", "part": "process start, imports",
                            "seconds": round(before, 3), "calls": 1,
                            "share": round(before / wall, 4)})
    for part in result["parts"]:
        part["share"] = round(part["seconds"] / wall, 4)
    result.update(wall_s=round(wall, 2), everything_else_s=round(wall, 2),
                  everything_else_share=1.0)
    return result


def resume_here(data_root: Path) -> dict[str, Any]:
    """The body of `--resumed`: the CLI's `resume` in this process, recorded whole."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    from flows import cli, execution, prefect_server
    from tasks import spans

    start_server = execution.start_server
    instrumented = []

    def started_then_instrumented(data_root: Any) -> Any:
        # the wrappers import Prefect and flows.run, which the command imports while the server
        # starts: installed at its first call, they cost the command nothing it would not pay
        server = start_server(data_root)
        if not instrumented:
            with spans.spent("imports (the server starting)"):
                instrument(-1, {})  # no round recorded on its own: the whole command is
                wrap(prefect_server.TemporaryServer, "wait_ready", "waiting for the server")
            instrumented.append(True)
        return server

    execution.start_server = started_then_instrumented
    wrap(cli, "_check_before_start", "checks before start")
    with spans.recording() as whole:
        start = time.perf_counter()
        try:
            cli.app(["resume", "bench", "--data-root", str(data_root)])
        except SystemExit as exc:
            if exc.code:
                raise
        wall = time.perf_counter() - start
    result = split(whole, wall)
    for part in result["parts"]:
        if part["part"] == "round flow's own steps":
            part["part"] = "in no span (cli, flows)"
    return result


def by_part(result: dict[str, Any]) -> dict[str, float]:
    """Seconds outside the model per part, summed over stages but a stage's own work, e.g.
    {"gates": 0.71, "own work: rollout": 0.35, ...}."""
    seconds: dict[str, float] = {}
    for part in result["parts"]:
        if part["where"] != "model":
            name = (f"{part['part']}: {part['stage']}" if part["part"] == "own work"
                    else part["part"])
            seconds[name] = seconds.get(name, 0.0) + part["seconds"]
    return seconds


def alternate(against: Path, repeats: int, config: Path) -> dict[str, Any]:
    """This bench and `against`'s in turn, each in a fresh process; one line per run, then the
    median seconds of each part outside the model, before against after."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for i in range(repeats):
        for label, root in (("before", against), ("after", ROOT)):
            python = root / ".venv" / "bin" / "python"
            out = Path(tempfile.mkstemp(suffix=".json")[1])
            subprocess.run([str(python if python.exists() else sys.executable),
                            str(root / "bench" / "round_overhead.py"), "--config", str(config),
                            "--out", str(out)], check=True, cwd=root,
                           stdout=subprocess.DEVNULL)
            data = json.loads(out.read_text())
            data = data.get("round_1", data)  # an older copy writes its figures at the top
            runs[label].append(data)
            wall, other = data["wall_s"], data["everything_else_s"]
            print(f"{label:6} run {i}: round wall {wall:7.2f} s, everything else "
                  f"{other:6.2f} s ({100 * other / wall:4.1f} %)"
                  + (f", {data['full_collections']} full collections "
                     f"{data['full_collections_s']:.2f} s" if "full_collections" in data else ""),
                  flush=True)
    for label, mine in runs.items():
        share = sum(r["everything_else_s"] for r in mine) / sum(r["wall_s"] for r in mine)
        print(f"{label}: everything else {100 * share:.1f} % of the round over {len(mine)} runs")
    medians = {label: {part: statistics.median(by_part(r).get(part, 0.0) for r in mine)
                       for part in {p for r in mine for p in by_part(r)}}
               for label, mine in runs.items()}
    print(f"  {'part (median s)':32} {'before':>8} {'after':>8}")
    for part in sorted(set(medians["before"]) | set(medians["after"]),
                       key=lambda p: -medians["before"].get(p, 0.0)):
        print(f"  {part:32} {medians['before'].get(part, 0.0):8.3f} "
              f"{medians['after'].get(part, 0.0):8.3f}")
    return {"config": str(config), "against": str(against), "runs": runs, "medians": medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "tests" / "flows" / "small.toml",
                        help="the run's config (default: tests/flows/small.toml)")
    parser.add_argument("--resume", action="store_true",
                        help="then resume the finished run (every stage reused) and split that")
    parser.add_argument("--against", type=Path,
                        help="a checkout whose copy of this bench runs in turn with this one")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each under --against")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "round_overhead.json",
                        help="where the figures go as JSON")
    parser.add_argument("--resumed", type=Path, help=argparse.SUPPRESS)  # resumed_elsewhere
    args = parser.parse_args()
    if args.resumed is not None:
        args.out.write_text(json.dumps(resume_here(args.resumed)))
        return
    if args.against is not None:
        compared = alternate(args.against.resolve(), args.repeats, args.config.resolve())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(compared, indent=2))
        return
    result = measure(args.config, args.resume)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(table("round 1", result["round_1"]))
    if "resume" in result:
        print(table("resume of the completed run (nothing to recompute: no flow runs)",
                    result["resume"]))
        print(table("resume of the run stopped after its last stage (flows run, every stage "
                    "reused), its own temporary server", result["resume_flows"]))
        print(table("the same, a running server", result["resume_flows_running_server"]))


if __name__ == "__main__":
    main()
