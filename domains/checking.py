"""Answer checking for free-form domains: extract the final answer, compare it, say why not.

`AnswerChecker` joins extraction (domains/answers.py, `verify.extract`) and comparison
(`verify.compare`): `exact` and `math` (domains/equivalence.py), or a task's own scorer (the
reasoning-gym domain passes `score_answer`, whose partial credit passes through unchanged).
A verdict it cannot give is a `Judgement` with reward None and its reason:

    none              no label to compare against (no reference, no majority answer)
    no_answer         no extractor found an answer in the completion
    thinking_unfinished  the completion opened its reasoning tag (`verify.think_tags`) and
                      never closed it: it was cut off before it answered
    verifier_timeout  math-verify ran past `verify.math_timeout_seconds`
    verifier_error    the comparison raised (odd input); never read as a wrong answer
    judge_unparseable an LLM judge's reply held no score on its scale (domains/judge.py)
    reward_none       the user's reward function returned None (domains/reward_function.py)

    >>> checker = AnswerChecker(extract=("boxed", "last_number"), compare="math")
    >>> checker.judge("so \\\\boxed{1/2}", "0.5")
    Judgement(reward=1.0, reason=None, outcome=None, score=None)
    >>> checker.judge("I do not know", "0.5")
    Judgement(reward=None, reason='no_answer', outcome=None, score=None)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from configs.domain import MODEL_VERIFIERS
from domains.answers import extract_answer
from domains.equivalence import exact_equal, math_equal

if TYPE_CHECKING:
    from configs import VerifyConfig

# The reasons a verdict carries no reward (the verdicts' `method` column records them).
UNJUDGED_REASONS = ("none", "no_answer", "thinking_unfinished", "verifier_timeout",
                    "verifier_error", "judge_unparseable", "reward_none")
# Of those, the verifier's own failures (not the answer's): gated by
# `gates.max_verifier_failure_share`.
VERIFIER_FAILURES = ("verifier_timeout", "verifier_error", "judge_unparseable")

TaskScore = Callable[[str, str], float]  # (answer, reference) -> reward in [0, 1]


@dataclass(frozen=True)
class Judgement:
    """A reward in [0, 1], or None with the reason (one of `UNJUDGED_REASONS`); `outcome` is how
    the sandbox run of the answer ended (ok, timeout, crash, ...) where the domain ran it;
    `score` is a reward model's raw score (its logit, before the sigmoid that made `reward`:
    domains/reward_model.py), None for every other verifier."""

    reward: float | None
    reason: str | None = None
    outcome: str | None = None
    score: float | None = None


class AnswerChecker:
    """Extract with `extract` (in order), compare by `compare` ("exact", "math" or "task")."""

    def __init__(self, *, extract: Sequence[str], compare: str, pattern: str | None = None,
                 timeout: int = 5, think_tags: Sequence[str] = ()) -> None:
        if compare not in ("exact", "math", "task"):
            msg = f"verify.compare = {compare!r}: use 'exact', 'math' or 'task'"
            raise ValueError(msg)
        self.methods = tuple(extract)
        self.compare = compare
        self.pattern = re.compile(pattern) if pattern else None
        self.timeout = timeout
        self.think_tags = tuple(think_tags)

    @classmethod
    def from_config(cls, verify: VerifyConfig, *, default_compare: str) -> AnswerChecker:
        """The checker of `[verify]`; `compare = "auto"` takes the domain's `default_compare`."""
        # "judge" and "reward_model" score whole completions (domains/judge.py,
        # domains/reward_model.py); answers are still extracted for the votes, and compared the
        # domain's way where something asks this checker
        whole = ("auto", *MODEL_VERIFIERS)
        compare = default_compare if verify.compare in whole else verify.compare
        return cls(extract=verify.extract, compare=compare, pattern=verify.answer_regex,
                   timeout=verify.math_timeout_seconds, think_tags=verify.think_tags)

    def describe(self) -> str:
        """`<compare>[<extractors>]`, e.g. `math[boxed+last_number]` (a verifier id's middle),
        with `after</think>` where the reasoning block is skipped."""
        pattern = f"/{self.pattern.pattern}/" if self.pattern else ""
        think = f" after{self.think_tags[1]}" if self.think_tags else ""
        return f"{self.compare}[{'+'.join(self.methods)}{pattern}{think}]"

    def extract(self, completion: str) -> str | None:
        return extract_answer(completion, self.methods, self.pattern, self.think_tags).answer

    def judge(self, completion: str, reference: str | None,
              task_score: TaskScore | None = None) -> Judgement:
        """The verdict of one completion against `reference` (None: no label)."""
        if reference is None:
            return Judgement(None, "none")
        extraction = extract_answer(completion, self.methods, self.pattern, self.think_tags)
        if extraction.answer is None:
            return Judgement(None, extraction.reason)
        answer = extraction.answer
        if self.compare == "task":
            if task_score is None:
                msg = "verify.compare = 'task' needs a domain with its own scorer (reasoning_gym)"
                raise ValueError(msg)
            return Judgement(float(task_score(answer, reference)))
        if self.compare == "exact":
            return Judgement(1.0 if exact_equal(answer, reference) else 0.0)
        equal, reason = math_equal(answer, reference, self.timeout)
        return Judgement(None if equal is None else float(equal), reason)
