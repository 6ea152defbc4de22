"""Rollout backends: one interface, prompts in, n sampled completions with token counts out.

    backend = make_backend("transformers", checkpoint_dir)
    outputs = backend.generate(["<solve>2+3="], SamplingParams(n=4, temperature=1.0,
                               max_new_tokens=8, seed=7))
    outputs[0][0]  # Completion(text="5", tokens=2)   (tokens counts the end-of-text token)
    backend.close()

A backend is built from one checkpoint folder for one round and released after. Sampling is
seeded per batch, so the same prompts, params and checkpoint give the same completions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    n: int
    temperature: float
    max_new_tokens: int
    seed: int
    greedy: bool = False


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


def make_backend(name: str, checkpoint: Path, *, batch_size: int = 512) -> RolloutBackend:
    if name == "transformers":
        return TransformersBackend(checkpoint, batch_size=batch_size)
    if name == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError:
            msg = "rollout.backend = 'vllm' needs vLLM: pip install -e '.[vllm]' (GPU machines)"
            raise BackendUnavailable(msg) from None
        msg = "the vllm backend is not built yet; use rollout.backend = 'transformers'"
        raise BackendUnavailable(msg)
    msg = f"unknown rollout backend {name!r}; choose 'transformers' or 'vllm'"
    raise BackendUnavailable(msg)


class TransformersBackend:
    """Batched sampling with `model.generate` on CPU (float32), left-padded prompts."""

    def __init__(self, checkpoint: Path, *, batch_size: int = 512):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
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
            torch.manual_seed(params.seed * 1_000_003 + start)
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
