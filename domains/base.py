"""The base class every problem domain derives from, and the rows its verifier judges.

A domain owns the text formats of both roles, the parser that admits or rejects proposer
output, the executor that computes references, the verifier, and a fixed held-out set that
the proposer never writes. `Domain` declares everything a stage may ask of one, with defaults
where a domain may leave it out; stages never probe a domain with `hasattr`.

One judging entry point: `judge(completions, problems)`, where `problems` are problem rows as
the problems dataset stores them (`problem_row`), one per completion:

    {"text": "countdown L1: Using the numbers [20, 83, 74, 86, 51], ...", "reference":
     "20 - 83 + 74 + 86 + 51", "level": 1, "task": "countdown",
     "payload": '{"metadata":{"numbers":[20,83,74,86,51],"target":148,...},"question":"..."}'}

A row carries everything its verifier needs (the text, the reference or the label compared
against, the level, the task and the JSON `payload`: reasoning-gym's metadata, a program and its
mode), so a domain built by `domains.get_domain(name, config)` in any process judges stored rows
exactly as the process that made them. Verify, the GRPO reward, the proposer's online reward and
evaluate all call it; a completion that cannot be judged is `Judgement(None, reason)`.
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from domains.checking import Judgement

if TYPE_CHECKING:
    from configs import RunConfig

# The role tags that open a prompt: one model plays both roles, told apart by the tag. The tiny
# model's tokenizer (models/tiny.py) has each as one special token.
PROPOSE_TAG = "<propose>"
SOLVE_TAG = "<solve>"

ProblemRow = dict[str, Any]  # text, reference, level, task, payload (JSON text or None)


def level_prompt(level: int, examples: Sequence[str] = ()) -> str:
    """The proposer prompt every domain uses: the role tag and the level, `<propose>L3:`; with
    `examples` (self-instruct: `Domain.style_examples`), the problems to imitate before the
    level, `<propose>Like:\n1. What is 7 * 6?\n2. ...\nL3:`."""
    shown = f"Like:\n{numbered(examples)}\n" if examples else ""
    return f"{PROPOSE_TAG}{shown}L{level}:"


def numbered(examples: Sequence[str]) -> str:
    """`examples` one per line, numbered from 1: how every proposer prompt shows them."""
    return "\n".join(f"{i}. {text}" for i, text in enumerate(examples, 1))


def digit_shape(text: str) -> str:
    """Every digit as 0: `512-87` and `734-21` share the shape `000-00` (near-duplicates)."""
    return re.sub(r"\d", "0", text)


@dataclass(frozen=True)
class Problem:
    """A problem text, its reference answer (None when no executor computed one), level, task
    (reasoning-gym's task, python_io's mode; None in single-task domains) and the verification
    payload its verifier reads (JSON-able; None when the text and reference suffice)."""

    text: str
    reference: str | None
    level: int
    task: str | None = None
    payload: dict[str, Any] | None = None


def payload_text(payload: dict[str, Any] | None) -> str | None:
    """A payload as the problems dataset stores it: compact JSON with sorted keys."""
    return None if payload is None else json.dumps(payload, sort_keys=True,
                                                   separators=(",", ":"))


def read_payload(row: ProblemRow) -> dict[str, Any]:
    """A stored row's payload as a dict ({} when it has none)."""
    text = row.get("payload")
    return {} if text is None else json.loads(text)


def problem_row(problem: Problem) -> ProblemRow:
    """The columns of a problems-dataset row that the verifier reads."""
    return {"text": problem.text, "reference": problem.reference, "level": problem.level,
            "task": problem.task, "payload": payload_text(problem.payload)}


def with_label(row: ProblemRow, label: str | None) -> ProblemRow:
    """`row` judged against `label` (a majority-vote pseudo-label) instead of its reference."""
    return {**row, "reference": label}


# Why a domain's executor refused a parsed program (domains/sandbox): synthesize records these
# as the proposal's `drop_reason` (any other rejection is recorded as `invalid`).
EXECUTION_REASONS = ("timeout", "memory", "forbidden", "crash", "nondeterministic",
                     "output_limit")


@dataclass(frozen=True)
class Rejected:
    """A proposal the parser refused, with its reason: one of `EXECUTION_REASONS` when running
    it failed (recorded as such), else the parser's own word (recorded as `invalid`)."""

    reason: str


class DomainInputError(ValueError):
    """The domain's own input cannot be used (a file of `[domain.dataset]`, a task of
    `[domain.reasoning_gym]`); the message is one line naming the file and line or the key, and
    the fix. A domain raises it while it is built, and the CLI builds the run's domain before
    anything is written (flows/cli.py `_check_before_start`), so such input is a user error
    (exit 2) and never a failed stage."""


class Domain(ABC):
    """What the stages ask of a domain; a new domain is one module deriving from it plus its
    line in `configs.domain.DOMAINS` (docs/domains.md). Its constructor checks the domain's
    own input, raising `DomainInputError`."""

    name: str
    levels: tuple[int, ...]
    # The task mix (reasoning_gym): names and weights; () in single-task domains.
    tasks: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()

    def __init__(self, config: RunConfig | None = None) -> None:  # noqa: B027
        """A domain is built from the run's config (None: the defaults) by `get_domain`, in
        any process; it reads only its own sections of it."""

    # ---- the proposer ------------------------------------------------------------------------

    def proposer_prompt(self, level: int) -> str:
        """Prompt asking the proposer role for one problem of `level` (one of `levels`)."""
        return level_prompt(level, self.style_examples(level))

    def style_examples(self, level: int) -> list[str]:
        """Problems the proposer is shown to write one more like them (self-instruct; the
        dataset domain's `proposer_examples`): none by default."""
        return []

    @abstractmethod
    def parse(self, proposal: str) -> Problem | Rejected:
        """Admit a proposer completion as a problem (its reference computed by the domain's
        executor where it has one), or reject it with the reason recorded as `drop_reason`."""

    def prepare(self, proposals: list[str]) -> None:  # noqa: B027
        """Admit many proposals at once before `parse` reads them one by one (an executing
        domain runs the whole batch in one sandbox call); nothing by default."""

    @abstractmethod
    def generate(self, rng: random.Random, level: int) -> Problem:
        """The domain's own generator (warm-up, baselines, held-out set); `rng` is the only
        source of randomness, so a seed fixes the problem."""

    def generate_task(self, rng: random.Random, task: str, level: int) -> Problem:
        """A generator problem of `task` at `level` (the (task, level) bandit's draws)."""
        msg = f"domain {self.name!r} has no tasks to generate {task!r} from"
        raise ValueError(msg)

    def shape(self, problem_text: str) -> str:
        """The problem's form with its constants masked (`curate.diversity.on = "shape"`)."""
        return digit_shape(problem_text)

    def task_of(self, problem_text: str) -> str | None:
        """The task a problem text belongs to (per-task held-out accuracy); None by default."""
        return None

    @abstractmethod
    def heldout(self, per_level: int) -> list[Problem]:
        """A fixed held-out set of `per_level` problems per level, identical on every call,
        none of which the proposer's rounds train on."""

    # ---- the solver --------------------------------------------------------------------------

    @abstractmethod
    def solver_prompt(self, problem_text: str) -> str:
        """Prompt asking the solver role to answer a problem."""

    def question(self, problem_text: str) -> str:
        """What a chat model's user message asks (domains/chat.py): the raw solver prompt
        without its role tag, unless the domain says otherwise."""
        return self.solver_prompt(problem_text).removeprefix(SOLVE_TAG).strip()

    def solver_messages(self, problem_text: str) -> list[dict[str, str]]:
        """The solver's conversation before its answer, as chat messages: the user's `question`
        (the chat wrapper adds `[prompt]`'s system message and instruction). A reward model
        renders them with its own chat template (domains/reward_model.py)."""
        return [{"role": "user", "content": self.question(problem_text)}]

    def cut(self, completion: str) -> str:
        """A sampled completion as the verifier reads it (the chat wrapper cuts it at its stop
        strings); unchanged by default."""
        return completion

    @abstractmethod
    def extract(self, completion: str) -> str | None:
        """The final answer in a solver completion, or None when there is none (majority votes
        count these)."""

    def answers(self, completions: list[str]) -> list[str | None]:
        """`extract` of each completion, each distinct text extracted once (`extract` is pure,
        and k samples of an easy problem often repeat one text)."""
        extracted = {text: self.extract(text) for text in dict.fromkeys(completions)}
        return [extracted[text] for text in completions]

    def training_target(self, reference: str) -> str:
        """The solver completion a reference teaches (the warm-up, too-hard problems): the
        reference itself unless the domain's references are no answers (python_io)."""
        return reference

    # ---- the verifier ------------------------------------------------------------------------

    @abstractmethod
    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        """One verdict per completion, against the problem row at its position.

        Parameters
        ----------
        completions
            Solver completions (already cut).
        problems
            Problem rows as stored (`problem_row`), one per completion; `reference` is the label
            judged against (`with_label` for a majority vote), None where there is none.

        Returns
        -------
        A `Judgement` per completion: a reward in [0, 1], or None with the reason it could not
        be judged (never 0 for "cannot judge").
        """

    @abstractmethod
    def verifier(self) -> str:
        """The verifier's id as verdicts record it (`verdicts.verifier`): the domain, how it
        judges, and a version bumped when its judgements change, e.g. `arithmetic/integer@1`."""

    def score(self, completions: list[str], problems: list[ProblemRow]) -> list[float | None]:
        """The rewards of `judge` alone."""
        return [j.reward for j in self.judge(completions, problems)]


class WrappedDomain(Domain):
    """A domain that changes some of another's methods (its chat template: domains/chat.py; its
    verifier: domains/judge.py) and passes every other call to it, one method each: a method
    the domain API gains is passed on here once, not in every wrapper."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.name, self.levels = domain.name, domain.levels
        self.tasks, self.weights = domain.tasks, domain.weights

    def proposer_prompt(self, level: int) -> str:
        return self.domain.proposer_prompt(level)

    def style_examples(self, level: int) -> list[str]:
        return self.domain.style_examples(level)

    def parse(self, proposal: str) -> Problem | Rejected:
        return self.domain.parse(proposal)

    def prepare(self, proposals: list[str]) -> None:
        self.domain.prepare(proposals)

    def generate(self, rng: random.Random, level: int) -> Problem:
        return self.domain.generate(rng, level)

    def generate_task(self, rng: random.Random, task: str, level: int) -> Problem:
        return self.domain.generate_task(rng, task, level)

    def shape(self, problem_text: str) -> str:
        return self.domain.shape(problem_text)

    def task_of(self, problem_text: str) -> str | None:
        return self.domain.task_of(problem_text)

    def heldout(self, per_level: int) -> list[Problem]:
        return self.domain.heldout(per_level)

    def solver_prompt(self, problem_text: str) -> str:
        return self.domain.solver_prompt(problem_text)

    def question(self, problem_text: str) -> str:
        return self.domain.question(problem_text)

    def solver_messages(self, problem_text: str) -> list[dict[str, str]]:
        return self.domain.solver_messages(problem_text)

    def cut(self, completion: str) -> str:
        return self.domain.cut(completion)

    def extract(self, completion: str) -> str | None:
        return self.domain.extract(completion)

    def training_target(self, reference: str) -> str:
        return self.domain.training_target(reference)

    def verifier(self) -> str:
        return self.domain.verifier()

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        return self.domain.judge(completions, problems)
