"""Rollout backends: one interface, prompts in, n sampled completions with token counts out.

    backend = make_backend("transformers", checkpoint_dir)
    outputs = backend.generate(["<solve>2+3="], SamplingParams(n=4, temperature=1.0,
                               max_new_tokens=8, seed=7))
    outputs[0][0]  # Completion(text="5", tokens=2)   (tokens counts the end-of-text token)
    backend.close()

A backend is built from one checkpoint folder for one stage and released after (the vllm backend,
models/vllm_backend.py, keeps its engine warm between stages and swaps the weights).
Sampling is seeded, so the same prompts, params and checkpoint give the same completions.
Seeds follow a prompt's position in the stage's whole prompt list (`first_prompt` + i), so a
shard of the prompts (tasks/shards.py) samples exactly what the whole call would, as
long as the transformers backend's shards start on one of its batch boundaries (batches are
seeded per batch and padded to their longest prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from configs import RolloutConfig
    from models.vllm_backend import EngineOptions


@dataclass(frozen=True)
class SamplingParams:
    n: int
    temperature: float
    max_new_tokens: int
    seed: int
    greedy: bool = False
    first_prompt: int = 0  # index of prompts[0] in the stage's whole prompt list (see below)


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int


ProgressCallback = Callable[[int], None]


class RolloutBackend(Protocol):
    def generate(
        self, prompts: list[str], params: SamplingParams, progress: ProgressCallback | None = None
    ) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (prompt-major order)."""

    def close(self) -> None: ...


class BackendUnavailable(RuntimeError):
    pass


def make_backend(name: str, checkpoint: Path, *, batch_size: int = 512, dtype: str = "float32",
                 engine: EngineOptions | None = None) -> RolloutBackend:
    """A backend by name; `engine` configures vLLM (None = `EngineOptions` defaults)."""
    if name == "transformers":
        return TransformersBackend(checkpoint, batch_size=batch_size, dtype=dtype)
    if name == "vllm":
        from models.vllm_backend import EngineOptions, VLLMBackend, require_vllm

        require_vllm()
        return VLLMBackend(checkpoint, options=engine or EngineOptions(dtype=dtype, max_num_seqs=batch_size))
    msg = f"unknown rollout backend {name!r}; choose 'transformers' or 'vllm'"
    raise BackendUnavailable(msg)


def backend_for(rollout: RolloutConfig, checkpoint: Path) -> RolloutBackend:
    """The backend a run's `[rollout]` config asks for (the rollout and evaluate stages use it)."""
    engine = None
    if rollout.backend == "vllm":
        from models.vllm_backend import EngineOptions

        engine = EngineOptions.from_config(rollout)
    return make_backend(rollout.backend, checkpoint, batch_size=rollout.batch_size,
                        dtype=rollout.dtype, engine=engine)


def check_backend(name: str) -> None:
    """Raise `BackendUnavailable` (one line, naming the extra to install) if `name` cannot run here."""
    if name == "vllm":
        from models.vllm_backend import require_vllm

        require_vllm()


class TransformersBackend:
    """Batched sampling with `model.generate` (float32 unless `dtype` says), left-padded prompts."""

    def __init__(self, checkpoint: Path, *, batch_size: int = 512, dtype: str = "float32"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
        self.model.eval()
        self.batch_size = batch_size

    def generate(
        self, prompts: list[str], params: SamplingParams, progress: ProgressCallback | None = None
    ) -> list[list[Completion]]:
        torch = self._torch
        expanded = [prompt for prompt in prompts for _ in range(params.n)]
        flat: list[Completion] = []
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for start in range(0, len(expanded), self.batch_size):
            batch = expanded[start : start + self.batch_size]
            encoded = self.tokenizer(batch, return_tensors="pt", padding=True)
            torch.manual_seed(params.seed * 1_000_003 + params.first_prompt * params.n + start)
            with torch.inference_mode():
                output = self.model.generate(
                    **encoded,
                    do_sample=not params.greedy,
                    temperature=None if params.greedy else params.temperature,
                    top_k=None,
                    top_p=None,
                    max_new_tokens=params.max_new_tokens,
                    pad_token_id=pad,
                    eos_token_id=eos,
                )
            new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
            for ids in new_tokens:
                length = ids.index(eos) + 1 if eos in ids else len(ids)
                text = self.tokenizer.decode(ids[:length], skip_special_tokens=True)
                flat.append(Completion(text=text, tokens=length))
            if progress is not None:
                progress(len(batch))
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def close(self) -> None:
        del self.model
