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

Prompts rendered by the model's chat template are tokenized without the tokenizer's special
tokens (domains/chat.py `special_tokens_for`: the template wrote the BOS it wants); raw prompts,
such as the built-in tiny model's, with them, as the tokenizer's default.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from domains.chat import special_tokens_for
from models.rollout_types import (
    BackendUnavailable,
    Completion,
    ProgressCallback,
    RolloutBackend,
    SamplingParams,
)

if TYPE_CHECKING:
    from configs import RolloutConfig
    from configs.settings import BackendSettings
    from models.vllm_backend import EngineOptions

__all__ = ["BackendUnavailable", "Completion", "ProgressCallback", "RolloutBackend",
           "SamplingParams", "TransformersBackend", "backend_for", "check_backend", "make_backend"]


def make_backend(name: str, checkpoint: Path, *, batch_size: int = 512, dtype: str = "float32",
                 engine: EngineOptions | None = None) -> RolloutBackend:
    """A rollout backend by name, loaded from one checkpoint folder.

    Parameters
    ----------
    name
        "transformers" or "vllm".
    checkpoint
        A Hugging Face model folder.
    batch_size
        Prompts x samples per `generate` batch (transformers) or the engine's max_num_seqs.
    dtype
        Weights dtype: "float32" (the CPU default), "bfloat16" or "float16".
    engine
        vLLM engine options; None = `EngineOptions(dtype=dtype, max_num_seqs=batch_size)`.

    Returns
    -------
    The backend; call `close()` when the stage is done.

    Raises
    ------
    BackendUnavailable
        For an unknown name, or "vllm" where vLLM is not installed (the message names the
        extra to install).
    """
    if name == "transformers":
        return TransformersBackend(checkpoint, batch_size=batch_size, dtype=dtype)
    if name == "vllm":
        from models.vllm_backend import EngineOptions, VLLMBackend, require_vllm

        require_vllm()
        return VLLMBackend(checkpoint,
                           options=engine or EngineOptions(dtype=dtype, max_num_seqs=batch_size))
    msg = f"unknown rollout backend {name!r}; choose 'transformers' or 'vllm'"
    raise BackendUnavailable(msg)


def backend_for(rollout: RolloutConfig | BackendSettings, checkpoint: Path) -> RolloutBackend:
    """The backend a run's `[rollout]` config asks for (the rollout and evaluate stages use it).

    Parameters
    ----------
    rollout
        The run's `[rollout]` section, or a stage's `BackendSettings` (configs/settings.py):
        backend, batch size, dtype and the vLLM engine settings.
    checkpoint
        The model folder to sample from.

    Returns
    -------
    The backend, as `make_backend` builds it.
    """
    engine = None
    if rollout.backend == "vllm":
        from models.vllm_backend import EngineOptions

        engine = EngineOptions.from_config(rollout)
    return make_backend(rollout.backend, checkpoint, batch_size=rollout.batch_size,
                        dtype=rollout.dtype, engine=engine)


def check_backend(name: str) -> None:
    """Check before a run starts that backend `name` can run here.

    Parameters
    ----------
    name
        A rollout backend name.

    Raises
    ------
    BackendUnavailable
        One line naming the extra to install.
    """
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
        """Sample `params.n` completions per prompt.

        Parameters
        ----------
        prompts
            Prompt texts (a shard of a stage's prompts starts at `params.first_prompt`).
        params
            Sampling settings; the seed of each batch follows its position in the stage.
        progress
            Called with the number of completions of each finished batch.

        Returns
        -------
        For each prompt, its `params.n` completions (prompt-major order).
        """
        torch = self._torch
        expanded = [prompt for prompt in prompts for _ in range(params.n)]
        flat: list[Completion] = []
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        special = special_tokens_for(self.tokenizer, prompts)
        for start in range(0, len(expanded), self.batch_size):
            batch = expanded[start : start + self.batch_size]
            encoded = self.tokenizer(batch, return_tensors="pt", padding=True,
                                     add_special_tokens=special)
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
