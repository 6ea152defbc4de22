"""The one small interface every problem domain implements.

A domain owns the text formats of both roles, the parser that admits or rejects proposer
output, the executor that computes references, the verifier, and a fixed held-out set that
the proposer never writes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    text: str
    reference: str | None
    level: int


@dataclass(frozen=True)
class Rejected:
    reason: str


class Domain(Protocol):
    name: str
    levels: tuple[int, ...]

    def proposer_prompt(self, level: int) -> str:
        """Prompt asking the proposer role for one problem of the given difficulty level."""

    def parse(self, proposal: str) -> Problem | Rejected:
        """Admit a proposer completion as a problem (with its executed reference) or reject it."""

    def generate(self, rng: random.Random, level: int) -> Problem:
        """The domain's own generator: seeds round 0 and builds the held-out set."""

    def solver_prompt(self, problem_text: str) -> str:
        """Prompt asking the solver role to answer a problem."""

    def extract(self, completion: str) -> str | None:
        """The final answer in a solver completion, or None when there is none."""

    def score(self, completions: list[str], references: list[str | None]) -> list[float | None]:
        """Reward per completion in [0, 1]; None means "cannot judge" (no reference)."""

    def shape(self, problem_text: str) -> str:
        """The problem's form with its constants masked (`curate.diversity_on = "shape"`: the
        repetition penalty compares forms, so many problems of one form count as repeats)."""

    def heldout(self, per_level: int) -> list[Problem]:
        """A fixed held-out set spanning every level; identical on every call."""
