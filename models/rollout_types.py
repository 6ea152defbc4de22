"""The types every rollout backend shares (models/backends.py builds the backends; the vllm
backend, models/vllm_backend.py, imports only these, so neither imports the other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: `n` completions per prompt, seeded by the prompt's position."""

    n: int
    temperature: float
    max_new_tokens: int
    seed: int
    greedy: bool = False
    first_prompt: int = 0  # index of prompts[0] in the stage's whole prompt list (seeds follow it)


@dataclass(frozen=True)
class Completion:
    """One sampled completion; `tokens` counts its end-of-text token."""

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
    """The configured backend cannot run here; the message names the extra to install."""
