"""The one small interface every problem domain implements.

A domain owns the text formats of both roles, the parser that admits or rejects proposer
output, the executor that computes references, the verifier, and a fixed held-out set that
the proposer never writes.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Protocol

# The role tags that open a prompt: one model plays both roles, told apart by the tag. The tiny
# model's tokenizer (models/tiny.py) has each as one special token.
PROPOSE_TAG = "<propose>"
SOLVE_TAG = "<solve>"



def level_prompt(level: int) -> str:
    """The proposer prompt every domain uses: the role tag and the level, `<propose>L3:`."""
    return f"{PROPOSE_TAG}L{level}:"


def digit_shape(text: str) -> str:
    """Every digit as 0: `512-87` and `734-21` share the shape `000-00` (near-duplicates)."""
    return re.sub(r"\d", "0", text)


@dataclass(frozen=True)
class Problem:
    """A problem text, its reference answer (None when no executor computed one) and level."""

    text: str
    reference: str | None
    level: int


# Why a domain's executor refused a parsed program (domains/sandbox): synthesize records these
# as the proposal's `drop_reason` (any other rejection is recorded as `invalid`).
EXECUTION_REASONS = ("timeout", "memory", "forbidden", "crash", "nondeterministic",
                     "output_limit")


@dataclass(frozen=True)
class Rejected:
    """A proposal the parser refused, with its reason: one of `EXECUTION_REASONS` when running
    it failed (recorded as such), else the parser's own word (recorded as `invalid`)."""

    reason: str


class Domain(Protocol):
    """What the stages ask of a domain; a new domain is one module implementing it."""

    name: str
    levels: tuple[int, ...]

    def proposer_prompt(self, level: int) -> str:
        """Prompt asking the proposer role for one problem of the given difficulty level.

        Parameters
        ----------
        level
            One of `levels`.

        Returns
        -------
        The prompt text, opening with PROPOSE_TAG.
        """

    def parse(self, proposal: str) -> Problem | Rejected:
        """Admit a proposer completion as a problem (with its executed reference) or reject it.

        Parameters
        ----------
        proposal
            The proposer's completion, as sampled.

        Returns
        -------
        The problem, its reference computed by the domain's executor where it has one; or
        `Rejected` with the reason recorded as the proposal's `drop_reason`.
        """

    def generate(self, rng: random.Random, level: int) -> Problem:
        """The domain's own generator: seeds round 0 and builds the held-out set.

        Parameters
        ----------
        rng
            The only source of randomness, so a seed fixes the problem.
        level
            One of `levels`.

        Returns
        -------
        A problem with its reference.
        """

    def solver_prompt(self, problem_text: str) -> str:
        """Prompt asking the solver role to answer a problem."""

    def extract(self, completion: str) -> str | None:
        """The final answer in a solver completion, or None when there is none."""

    def score(self, completions: list[str], references: list[str | None]) -> list[float | None]:
        """Reward per completion (pure; the GRPO reward function too).

        Parameters
        ----------
        completions
            Solver completions.
        references
            The label each completion is judged against, position by position; None where
            there is none.

        Returns
        -------
        A reward in [0, 1] per completion; None means "cannot judge" and is recorded as such,
        never read as 0.
        """

    def shape(self, problem_text: str) -> str:
        """The problem's form with its constants masked (`curate.diversity.on = "shape"`: the
        repetition penalty compares forms, so many problems of one form count as repeats)."""

    def heldout(self, per_level: int) -> list[Problem]:
        """A fixed held-out set spanning every level; identical on every call.

        Parameters
        ----------
        per_level
            Problems per level.

        Returns
        -------
        `per_level` problems of each level, none of which the proposer's rounds train on.
        """
