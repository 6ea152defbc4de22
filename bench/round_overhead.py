"""Where does a round's time go? Model compute (sampling, training) vs everything else.

Runs the warm-up and one self-improvement round of a config (default: tests/flows/small.toml)
in-process, times every call into the rollout backend and the trainer, and splits round 1's
wall time (first stage start to last stage end, from the catalog) into model compute and the
rest (Prefect orchestration, Parquet and catalog I/O, verification, curation, gates).

    python bench/round_overhead.py [--config F] [--out bench/results/round_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "tests" / "flows" / "small.toml")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "round_overhead.json")
    args = parser.parse_args()
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                       "TRANSFORMERS_VERBOSITY": "error", "PREFECT_LOGGING_LEVEL": "WARNING",
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)

    from configs import load_config
    from flows.run import RunSpec, flywheel_flow
    from models import backends, trainer
    from storage.catalog import Catalog

    spans: list[tuple[str, float, float]] = []

    def timed(kind, fn):
        def wrapper(*a, **kw):
            start = time.time()
            try:
                return fn(*a, **kw)
            finally:
                spans.append((kind, start, time.time()))
        return wrapper

    backends.TransformersBackend.generate = timed("sampling", backends.TransformersBackend.generate)
    trainer.train_sft = timed("training", trainer.train_sft)
    import tasks.train as train_task  # noqa: F401  (imports train_sft lazily, at call time)

    config = load_config(args.config, {"rounds": 1})
    data_root = Path(tempfile.mkdtemp(prefix="flywheel-bench-"))
    flywheel_flow(RunSpec(data_root=str(data_root), run_id="bench", config=config))

    stages = Catalog(data_root).query(
        "SELECT stage, started_at, finished_at FROM stages WHERE run_id = 'bench' AND round = 1"
    )
    start = min(s["started_at"] for s in stages)
    end = max(s["finished_at"] for s in stages)
    inside = [(k, max(a, start), min(b, end)) for k, a, b in spans if b > start and a < end]
    compute = {k: sum(b - a for kk, a, b in inside if kk == k) for k in ("sampling", "training")}
    model = sum(compute.values())
    wall = end - start
    result = {
        "config": str(args.config), "round_wall_s": round(wall, 2),
        "sampling_s": round(compute["sampling"], 2), "training_s": round(compute["training"], 2),
        "model_compute_s": round(model, 2), "everything_else_s": round(wall - model, 2),
        "overhead_ratio": round((wall - model) / model, 3),
        "stage_seconds": {s["stage"]: round(s["finished_at"] - s["started_at"], 2) for s in stages},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"round 1 wall {wall:.1f} s = model compute {model:.1f} s "
          f"(sampling {compute['sampling']:.1f} s, training {compute['training']:.1f} s) "
          f"+ everything else {wall - model:.1f} s;"
          f" overhead / compute = {result['overhead_ratio']:.3f}")
    print(json.dumps(result["stage_seconds"]))


if __name__ == "__main__":
    main()
