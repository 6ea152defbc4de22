"""Rollout throughput: the rollout stage against the raw engine, for both backends.

For two models built with `build_tiny_model` (tiny: hidden 128 x 3 layers, the default run;
larger: hidden 512 x 8 layers) and each backend, generated tokens per second of

    raw     the engine called directly on the same prompts and sampling settings, model loaded:
            `model.generate` per batch of `rollout.batch_size` sequences / one `LLM.generate`
    stage   the rollout stage, `rollout.fn` (read problems, open the backend, generate, build
            rows, write Parquet, gate, catalog row), timed from call to return

and stage / raw, which should be >= 0.90, in wall time and in this process's CPU time (the
load-proof figure on a shared machine). `generate` is the backend's own `generate` inside the
stage, so the stage's cost splits into the backend's and the storage contract's. Stages are
timed as in a run, after an untimed raw call and stage have paid the one-time costs. vLLM's
engine is warm (an earlier stage built it on another checkpoint), so the stage includes the
weight swap; the engine's cold start is reported on its own.

The vllm part needs vLLM's CPU build: this script re-runs itself with --child under
--vllm-python (default .venv-vllm/bin/python, built by `make test-vllm`).

    python bench/rollout.py [--backends transformers,vllm] [--problems 256] [--samples K]
                            [--max-new-tokens T] [--repeats 3] [--out bench/results/rollout.json]
                            [--ignore-eos]

K and T default to the rollout config's defaults (`samples_per_problem`, `max_new_tokens`).

Long generations (`--max-new-tokens 8192 --ignore-eos`, vLLM only): an untrained tiny model
ends its answers after a few dozen tokens, so a workload of long answers has the engine ignore
the end-of-sequence token, in the raw call and inside the stage alike (vLLM's `ignore_eos`,
set on every request of this process); every answer is then `T` tokens. The models are built
to take a prompt and `T` tokens (`max_position_embeddings`).

    python bench/rollout.py --backends vllm --models tiny --problems 2 --samples 2 \
        --max-new-tokens 8192 --ignore-eos
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "tiny": {"hidden_size": 128, "num_layers": 3, "head_dim": 32, "intermediate_size": 384},
    "larger": {"hidden_size": 512, "num_layers": 8, "head_dim": 32, "intermediate_size": 1536},
}
# One compute thread: on a shared 2-core machine, threads that wait for each other spin and
# inflate CPU time; single-threaded, CPU time is the work done. (--threads to change it.)
ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
               "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "VLLM_LOGGING_LEVEL": "WARNING", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "TOKENIZERS_PARALLELISM": "false", "DO_NOT_TRACK": "1"}


PROMPT_ROOM = 64  # positions for the prompt beside the answer's max_new_tokens


def build_models(folder: Path, names: list[str], max_new_tokens: int) -> dict[str, Path]:
    """Per model: `incumbent/` (the weights rolled out) and `previous/` (another init, same
    shape), each taking a prompt and `max_new_tokens` tokens."""
    from models.tiny import build_tiny_model

    out = {}
    length = max(256, max_new_tokens + PROMPT_ROOM)
    for name in names:
        shape = MODELS[name]
        for role, seed in [("incumbent", 0), ("previous", 1)]:
            build_tiny_model(folder / name / role, init_seed=seed,
                             max_position_embeddings=length, **shape)
        out[name] = folder / name
    return out


# ---------------------------------------------------------------- child: one backend, one model


class Clock:
    """Wall seconds and this process's CPU seconds (all threads; the engine runs in-process).

    CPU time is the figure to trust on a machine shared with other work: contention stretches
    wall time, not the work done."""

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        self.wall = self.cpu = 0.0

    def stop(self) -> Clock:
        self.wall, self.cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu
        return self


def _problems(count: int) -> list[dict]:
    from domains import get_domain
    from storage.fingerprint import row_id

    domain, rng = get_domain("arithmetic"), random.Random(0)
    rows = []
    for index in range(count):
        problem = domain.generate(rng, 1 + index % 5)
        rows.append({"problem_id": row_id("problem", problem.text, index), "run_id": "bench",
                     "round": 1, "text": problem.text,
                     "reference": problem.reference, "level": problem.level,
                     "source": "generator", "proposal_id": None})
    return rows


def _raw_transformers(checkpoint: Path, prompts: list[str], params, batch_size: int):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expanded = [p for p in prompts for _ in range(params.n)]
    batches = [tokenizer(expanded[i:i + batch_size], return_tensors="pt", padding=True)
               for i in range(0, len(expanded), batch_size)]
    eos = tokenizer.eos_token_id

    def run() -> tuple[int, Clock]:
        tokens, clock = 0, Clock()
        for index, batch in enumerate(batches):
            torch.manual_seed(params.seed + index)
            with torch.inference_mode():
                out = model.generate(**batch, do_sample=True, temperature=params.temperature,
                                     top_k=None, top_p=None, max_new_tokens=params.max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
            for ids in out[:, batch["input_ids"].shape[1]:].tolist():
                tokens += ids.index(eos) + 1 if eos in ids else len(ids)
        return tokens, clock.stop()

    return run


def ignore_eos_everywhere() -> None:
    """Every `vllm.SamplingParams` made from now on in this process ignores the end-of-sequence
    token: the raw call's and the stage's backend's, which both look the class up when they
    generate."""
    import vllm
    import vllm.entrypoints.llm  # noqa: F401 - vLLM's own modules bind the real class first

    class IgnoringEos(vllm.SamplingParams):
        def __post_init__(self) -> None:
            self.ignore_eos = True
            super().__post_init__()

    vllm.SamplingParams = IgnoringEos


def _raw_vllm(checkpoint: Path, prompts: list[str], params, options):
    from vllm import SamplingParams as VLLMSamplingParams

    from models.vllm_backend import VLLMBackend

    def run() -> tuple[int, Clock]:
        backend = VLLMBackend(checkpoint, options=options)  # the warm engine, these weights
        try:
            clock = Clock()
            outputs = backend.llm.generate(
                prompts, VLLMSamplingParams(n=params.n, temperature=params.temperature,
                                            max_tokens=params.max_new_tokens, seed=params.seed),
                use_tqdm=False)
            clock.stop()
        finally:
            backend.close()
        return sum(len(s.token_ids) for o in outputs for s in o.outputs), clock

    return run


def child(args: argparse.Namespace) -> dict:
    from configs import load_config
    from models import backends
    from models.backends import SamplingParams
    from storage.datasets import dataset_path, read_rows, write_atomic
    from tasks.context import Checkpoint, RunContext
    from tasks.rollout import rollout
    from tasks.stage import StageOutput

    model_dir = Path(args.model_dir)
    incumbent, previous = model_dir / "incumbent", model_dir / "previous"
    config = load_config(None, {"rollout.backend": args.backend,
                                "rollout.samples_per_problem": args.samples,
                                "rollout.max_new_tokens": args.max_new_tokens})
    data_root = Path(tempfile.mkdtemp(prefix="flywheel-bench-rollout-"))
    rows = _problems(args.problems)
    problems_path = dataset_path(data_root, "bench", 1, "problems", "0" * 32)
    write_atomic("problems", rows, problems_path)
    problems = StageOutput("synthesize", 1, "0" * 32, {"problems": problems_path}, skipped=False)
    prompts = [f"<solve>{r['text']}=" for r in rows]
    params = SamplingParams(n=args.samples, temperature=config.rollout.temperature,
                            max_new_tokens=args.max_new_tokens, seed=1234)

    generate_clocks: list[Clock] = []
    if args.ignore_eos:
        ignore_eos_everywhere()
    if args.backend == "vllm":
        from models.vllm_backend import ENGINES, EngineOptions, VLLMBackend

        options = EngineOptions.from_config(config.rollout)
        start = time.perf_counter()
        VLLMBackend(previous, options=options).close()
        engine_start = time.perf_counter() - start
        raw = _raw_vllm(incumbent, prompts, params, options)
        backend_class = VLLMBackend

        def before_stage() -> None:  # as in a run: the warm engine holds another checkpoint
            VLLMBackend(previous, options=options).close()
    else:
        engine_start = None
        raw = _raw_transformers(incumbent, prompts, params, config.rollout.batch_size)
        backend_class = backends.TransformersBackend

        def before_stage() -> None:
            pass

    original = backend_class.generate

    def timed_generate(self, *a, **kw):
        clock = Clock()
        try:
            return original(self, *a, **kw)
        finally:
            generate_clocks.append(clock.stop())

    backend_class.generate = timed_generate
    # One untimed raw call and stage first: in a run, earlier stages have already paid the
    # one-time imports (Great Expectations for the gate: ~17 s) and the first-call warm-ups.
    raw()
    before_stage()
    rollout.fn(RunContext(data_root=data_root, run_id="bench-warmup", config=config), 1,
               Checkpoint(path=incumbent, fingerprint="incumbent"), problems)
    repeats = []
    for repeat in range(args.repeats):
        raw_tokens, raw_clock = raw()
        before_stage()
        ctx = RunContext(data_root=data_root, run_id=f"bench-{repeat}", config=config)
        stage_clock = Clock()
        out = rollout.fn(ctx, 1, Checkpoint(path=incumbent, fingerprint="incumbent"), problems)
        stage_clock.stop()
        stage_tokens = sum(r["completion_tokens"] for r in read_rows(out.path("rollouts")))
        entry = {"raw_tokens": raw_tokens, "stage_tokens": stage_tokens}
        for name, tokens, clock in [("raw", raw_tokens, raw_clock),
                                    ("stage", stage_tokens, stage_clock),
                                    ("generate", stage_tokens, generate_clocks[-1])]:
            entry[f"{name}_seconds"], entry[f"{name}_cpu_seconds"] = clock.wall, clock.cpu
            entry[f"{name}_tokens_per_s"] = tokens / clock.wall
            entry[f"{name}_tokens_per_cpu_s"] = tokens / clock.cpu
        repeats.append(entry)
    result = {"backend": args.backend, "repeats": repeats, "engine_start_seconds": engine_start}
    for unit in ("s", "cpu_s"):
        for name in ("raw", "stage", "generate"):
            result[f"{name}_tokens_per_{unit}"] = statistics.median(r[f"{name}_tokens_per_{unit}"]
                                                                    for r in repeats)
        suffix = "" if unit == "s" else "_cpu"
        for name in ("stage", "generate"):
            result[f"{name}_over_raw{suffix}"] = (result[f"{name}_tokens_per_{unit}"]
                                                  / result[f"raw_tokens_per_{unit}"])
    if args.backend == "vllm":
        result["weight_swaps"] = ENGINES.swaps
    return result


# ---------------------------------------------------------------- parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="transformers,vllm")
    parser.add_argument("--models", default=",".join(MODELS), help="of: " + ", ".join(MODELS))
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--problems", type=int, default=256, help="problems rolled out")
    parser.add_argument("--samples", type=int, default=None,
                        help="default: rollout.samples_per_problem")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="default: rollout.max_new_tokens")
    parser.add_argument("--repeats", type=int, default=3, help="raw/stage pairs; medians reported")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the engines")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="vllm only: answers of max_new_tokens each (long generations)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rollout.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from configs import RolloutConfig

    args.samples = args.samples or RolloutConfig().samples_per_problem
    args.max_new_tokens = args.max_new_tokens or RolloutConfig().max_new_tokens
    if args.child:
        print(json.dumps(child(args)))
        return

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.ignore_eos and backends != ["vllm"]:
        sys.exit("error: --ignore-eos measures the vllm backend only (--backends vllm)")
    interpreters = {"transformers": sys.executable, "vllm": args.vllm_python}
    if "vllm" in backends and not Path(args.vllm_python).exists():
        sys.exit(f"error: --vllm-python {args.vllm_python} not found"
                 " (run `make test-vllm` to build it)")
    results = {"workload": {"problems": args.problems, "samples_per_problem": args.samples,
                            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                            "ignore_eos": args.ignore_eos,
                            "threads": args.threads, "load_average": os.getloadavg()},
               "models": {}}
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-models-") as folder:
        models = build_models(Path(folder),
                              [m.strip() for m in args.models.split(",") if m.strip()],
                              args.max_new_tokens)
        for model, model_dir in models.items():
            results["models"][model] = {"shape": MODELS[model]}
            for backend in backends:
                command = [interpreters[backend], __file__, "--child", "--backend", backend,
                           "--model-dir", str(model_dir), "--problems", str(args.problems),
                           "--samples", str(args.samples),
                           "--max-new-tokens", str(args.max_new_tokens),
                           "--repeats", str(args.repeats), "--threads", str(args.threads),
                           *(["--ignore-eos"] if args.ignore_eos else [])]
                done = subprocess.run(command, check=False, capture_output=True, text=True,
                                      cwd=ROOT)
                if done.returncode != 0:
                    sys.exit(f"error: {backend} on {model} failed:\n{done.stderr[-3000:]}")
                results["models"][model][backend] = json.loads(done.stdout.strip().splitlines()[-1])

    print(f"{'model':8} {'backend':13} {'raw tok/s':>10} {'stage tok/s':>12} {'stage/raw':>10} "
          f"{'cpu: stage/raw':>15} {'generate/raw':>13} {'engine start':>13}")
    for model, entry in results["models"].items():
        for backend in backends:
            r = entry[backend]
            start = ("-" if r["engine_start_seconds"] is None
                     else f"{r['engine_start_seconds']:.1f} s")
            print(f"{model:8} {backend:13} {r['raw_tokens_per_s']:10.0f}"
                  f" {r['stage_tokens_per_s']:12.0f} "
                  f"{r['stage_over_raw']:10.2f} {r['stage_over_raw_cpu']:15.2f} "
                  f"{r['generate_over_raw']:13.2f} {start:>13}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
