"""The LLM judge (`verify.compare = "judge"`) and the domain wrapper that puts a judge, a reward
model (domains/reward_model.py) or the user's reward function (domains/reward_function.py) in
the one judging path.

`judged_domain(domain, config)` (called by `domains.get_domain`) wraps the run's domain in a
`JudgedDomain` whose `judge(completions, problems)` asks the configured scorer instead of the
domain's own verifier; every other method is the wrapped domain's. So verify, the GRPO reward
(models/grpo.py `verifier_reward`), the proposer's online reward and evaluate all get the
judge's rewards through `Domain.judge`, as they get every other verifier's.

A judgement, prompt by prompt:

    prompt  "Rate the answer to the question from 1 (wrong or useless) to 10 (correct and
             complete). ...\\n\\nQuestion: What is 2 + 3?\\n\\nAnswer: 5\\n\\nReply with the
             score only.\\nScore:"   (through the judge's chat template where it has one)
    reply   " 9"
    reward  (9 - 1) / 9 = 0.889          scale "1-10"; "pass_fail": PASS -> 1.0, FAIL -> 0.0

A reply with no score on its scale is `Judgement(None, "judge_unparseable")`, a verifier failure
(gated by `gates.max_verifier_failure_share`), never 0. The judge samples greedily, so the same
prompt on the same judge gives the same reply: a reward is data. All completions of one `judge`
call are judged in one backend call (the verify stage calls it once per chunk of rollouts), and
a prompt already judged in this process, or stored (`remember`), is not sent again.

Judge calls are data: the verify stage stores every prompt, reply and parsed reward as a
`judgements` dataset keyed by `key(prompt)` (a hash of the judge's id and the prompt), with the
rollout each judged (tasks/judgements.py); `flywheel reverify` gives a judge with the same id
the stored replies, so it asks nothing again. `cost` adds up calls, prompts, reply tokens and
seconds, which the stage's metrics report.

The judge is a fixed model, `[verify.judge] model_path` or else the run's `model.path` (the base
model): the same completion gets the same reward in every round and stage. With `incumbent =
true` (Meta-Rewarding's self-judge) the round's own answers (verify, rationalization, the GRPO and
proposer rewards) are judged by the round's incumbent instead (`incumbent_judged`; its id names
the checkpoint's fingerprint, so the same judge still gives the same reward), and the held-out
answers by the fixed one, so candidate and incumbent are compared by one judge. It runs on
the run's `[rollout]` backend; a launched GRPO process, which rebuilds the domain from the
domain's settings alone, judges on the transformers backend. The judgements the GRPO reward asks
for while training are stored by the train stage (models/grpo_journal.py `JudgementJournal`); the
verdict's `verifier` names the judge and its settings'
hash.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from domains.answers import after_thinking
from domains.base import Domain, DomainInputError, ProblemRow, WrappedDomain
from domains.checking import Judgement
from domains.pairwise import PAIRWISE_TEMPLATE, pair_outcome

if TYPE_CHECKING:

    from configs import RunConfig
    from configs.domain import JudgeConfig
    from models.rollout_types import Completion, RolloutBackend

JUDGE_VERSION = 1  # bumped when the same reply would be parsed into another reward
# The built-in prompt of each scale (`[verify.judge] template` unset).
SCALE_TEMPLATES = {
    "1-10": ("Rate the answer to the question from 1 (wrong or useless) to 10 (correct and "
             "complete).{rubric}\n\nQuestion: {question}\n\nAnswer: {answer}\n\n"
             "Reply with the score only.\nScore:"),
    "pass_fail": ("Decide whether the answer to the question is correct.{rubric}\n\n"
                  "Question: {question}\n\nAnswer: {answer}\n\n"
                  "Reply with PASS or FAIL only.\nVerdict:"),
}
# The prompt asking for a question's criteria (`[verify.judge] rubrics = true`, EvoRubric style).
RUBRIC_TEMPLATE = ("Write three to five short criteria that a correct and complete answer to the "
                   "question must meet, one per line.\n\nQuestion: {question}\n\nCriteria:")
_LABELLED_SCORE = re.compile(r"(?i)\bscore\s*(?:is|of|:|=)?\s*(\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"(?<![\d.\-])(\d+(?:\.\d+)?)")
_PASS_FAIL = re.compile(r"(?i)\b(pass|fail)\b")


def parse_score(reply: str, scale: str) -> float | None:
    """The reward in [0, 1] a judge's `reply` gives, or None when it holds none on `scale`.

    1-10: the number after a "score" label, else the reply's first number; s in [1, 10] gives
    (s - 1) / 9, any other number None. pass_fail: the first whole word PASS or FAIL (any case).

    >>> parse_score(" 7", "1-10"), parse_score("Score: 10/10", "1-10")
    (0.6666666666666666, 1.0)
    >>> parse_score("FAIL: the sum is wrong", "pass_fail"), parse_score("great!", "1-10")
    (0.0, None)
    """
    if scale == "pass_fail":
        match = _PASS_FAIL.search(reply)
        return None if match is None else float(match.group(1).lower() == "pass")
    if scale != "1-10":
        msg = f"verify.judge.scale = {scale!r}: use '1-10' or 'pass_fail'"
        raise ValueError(msg)
    match = _LABELLED_SCORE.search(reply) or _NUMBER.search(reply)
    if match is None:
        return None
    score = float(match.group(1))
    return (score - 1.0) / 9.0 if 1.0 <= score <= 10.0 else None


class Scorer(Protocol):
    """What `JudgedDomain` asks of a verifier that replaces the domain's own."""

    def judge(self, completions: list[str], problems: list[ProblemRow],
              domain: Domain) -> list[Judgement]: ...

    def describe(self) -> str: ...


@dataclass
class JudgeCost:
    """What a judge spent, added up over its life in this process (a stage reads the
    difference, `since`): backend calls, distinct prompts sent and their reply tokens, seconds
    in the backend, and distinct prompts answered by stored judgements instead."""

    calls: int = 0
    prompts: int = 0
    reply_tokens: int = 0
    seconds: float = 0.0
    reused: int = 0

    def since(self, before: JudgeCost) -> dict[str, float]:
        """The cost after `before` (a copy taken then) as metrics `judge_<field>`."""
        return {f"judge_{name}": getattr(self, name) - getattr(before, name)
                for name in ("calls", "prompts", "reply_tokens", "seconds", "reused")}


class ModelJudge:
    """An LLM judge: `[verify.judge]` over a backend loaded lazily from `model_path` (or given:
    tests pass a scripted one)."""

    def __init__(self, settings: JudgeConfig, *, model_path: str, revision: str | None = None,
                 backend_name: str = "transformers", batch_size: int = 64,
                 dtype: str = "float32", backend: RolloutBackend | None = None,
                 think_tags: Sequence[str] = (), name: str | None = None) -> None:
        self.settings = settings
        self.name = name or model_path  # the judge's id names it (an incumbent: its fingerprint)
        self.think_tags = tuple(think_tags)  # the judge reads the answer after the thinking
        self.template = settings.template or SCALE_TEMPLATES[settings.scale]
        self.pairwise = settings.mode == "pairwise"
        self.pair_template = settings.pairwise_template or PAIRWISE_TEMPLATE
        self._partner: dict[str, str] = {}  # pairwise: first-order prompt -> swapped prompt
        self.model_path, self.revision = model_path, revision
        self.backend_name, self.batch_size, self.dtype = backend_name, batch_size, dtype
        self._backend = backend
        self._tokenizer: Any = None
        self._replies: dict[str, str] = {}  # prompt -> reply: this process's and stored ones
        self._stored: set[str] = set()  # prompts whose reply came from stored judgements
        self._counted: set[str] = set()  # prompts already counted in `cost`
        self.cost = JudgeCost()

    def __getstate__(self) -> dict[str, Any]:  # shipped to a Ray worker: reload the model there
        return {**self.__dict__, "_backend": None, "_tokenizer": None}

    def describe(self) -> str:
        """`judge[<model>:<scale>:<hash of the judge's settings>]@<version>`; the model is
        `incumbent@<fingerprint>` for a round's incumbent, wherever its folder is."""
        key = json.dumps({"model": self.name, "revision": self.revision,
                          "template": self.template, "rubric": self.settings.rubric,
                          "scale": self.settings.scale,
                          "max_new_tokens": self.settings.max_new_tokens,
                          "think_tags": list(self.think_tags),
                          **({"mode": "pairwise", "pairwise_template": self.pair_template}
                             if self.pairwise else {}),
                          **({"rubric_template": self.rubric_prompt("{question}"),
                              "rubric_max_new_tokens": self.settings.rubric_max_new_tokens}
                             if self.settings.rubrics else {})}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"judge[{self.name}:{self.settings.scale}:{digest}]@{JUDGE_VERSION}"

    def prompt(self, question: str, answer: str, anchor: str | None = None) -> str:
        """The template filled in (before the judge's chat template); with `rubrics`, the
        question's criteria must have been written (`write_rubrics`). Pairwise: the prompt
        with `answer` first and `anchor` (the reference) second; the swapped one is its
        `partner`."""
        text = self.rubric_of(question) if self.settings.rubrics else self.settings.rubric
        rubric = f"\n\nRubric: {text}" if text else ""
        own = self.settings.pairwise_template if self.pairwise else self.settings.template
        if own is not None:  # a user's template places the rubric text itself
            rubric = text
        if not self.pairwise:
            return self.template.format(question=question, answer=answer, rubric=rubric)
        first, second = (self.pair_template.format(question=question, first=a, second=b,
                                                   rubric=rubric)
                         for a, b in ((answer, anchor), (anchor, answer)))
        self._partner[first] = second
        return first

    def partner(self, prompt: str) -> str | None:
        """Pairwise: the prompt with the two answers swapped; None pointwise."""
        return self._partner.get(prompt)

    def rubric_prompt(self, question: str) -> str:
        """The prompt asking for `question`'s criteria (`rubrics = true`)."""
        return (self.settings.rubric_template or RUBRIC_TEMPLATE).format(question=question)

    def rubric_of(self, question: str) -> str:
        """The criteria the judge wrote for `question` (`write_rubrics` first)."""
        return self._replies[self.rubric_prompt(question)].strip()

    def write_rubrics(self, questions: Sequence[str]) -> None:
        """The judge's criteria for each question not yet written (or stored), in one call."""
        self.ensure([self.rubric_prompt(q) for q in questions],
                    max_new_tokens=self.settings.rubric_max_new_tokens)

    def judge(self, completions: list[str], problems: list[ProblemRow],
              domain: Domain) -> list[Judgement]:
        prompts = self.prompts(completions, problems, domain)
        self.ensure(prompts)
        return [self.judgement(prompt) if prompt is not None else self.unasked(completion)
                for prompt, completion in zip(prompts, completions, strict=True)]

    def unasked(self, completion: str) -> Judgement:
        """Why a completion had no prompt: cut off while thinking, else (pairwise) its problem
        has no reference to compare with."""
        if after_thinking(completion, self.think_tags) is None:
            return Judgement(None, "thinking_unfinished")
        return Judgement(None, "none")

    def prompts(self, completions: list[str], problems: list[ProblemRow],
                domain: Domain) -> list[str | None]:
        """The judge prompt of each completion (its answer after the thinking, with its
        problem's question; pairwise: the first of two, with the reference); None where the
        completion was cut off while thinking, or (pairwise) its problem has no reference."""
        answers = [after_thinking(c, self.think_tags) for c in completions]
        if self.pairwise:  # no opponent, nothing to ask
            answers = [None if p["reference"] is None else a
                       for a, p in zip(answers, problems, strict=True)]
        questions = [domain.question(p["text"]) for p in problems]
        if self.settings.rubrics:  # EvoRubric: each question's criteria first
            self.write_rubrics([q for q, a in zip(questions, answers, strict=True)
                                if a is not None])
        return [None if a is None else self.prompt(q, a, p["reference"])
                for a, q, p in zip(answers, questions, problems, strict=True)]

    def judgement(self, prompt: str) -> Judgement:
        """The reward of a prompt already replied to (`ensure`; pairwise: both orders)."""
        if self.pairwise:
            reward, _ = self.outcome(prompt)
        else:
            reward = parse_score(self._replies[prompt], self.settings.scale)
        return Judgement(reward, None if reward is not None else "judge_unparseable")

    def outcome(self, prompt: str) -> tuple[float | None, bool | None]:
        """Pairwise: (reward, whether both orders agreed) of a prompt and its partner."""
        return pair_outcome(self._replies[prompt], self._replies[self._partner[prompt]])

    def reply(self, prompt: str) -> str:
        """The judge's reply to a prompt already replied to (`ensure`)."""
        return self._replies[prompt]

    def key(self, prompt: str) -> str:
        """A judgement's id: the hash of (this judge's id, the prompt), so a stored judgement
        answers the same prompt to the same judge again (`remember`)."""
        both = f"{prompt}\n{self._partner[prompt]}" if prompt in self._partner else prompt
        return hashlib.sha256(f"{self.describe()}\n{both}".encode()).hexdigest()[:32]

    def remember(self, prompts: Sequence[str], replies: Sequence[str]) -> None:
        """Take stored replies of this judge (tasks/judgements.py) as given: a prompt among
        them is not sent again."""
        self._replies.update(zip(prompts, replies, strict=True))
        self._stored.update(prompts)

    def ensure(self, prompts: Sequence[str | None], *, max_new_tokens: int | None = None) -> None:
        """Every prompt replied to: those not yet replied to (in this process or stored:
        `remember`) in one backend call of replies up to `max_new_tokens` (default the
        judge's); the cost is added to `cost`."""
        asked = [p for p in prompts if p is not None]
        distinct = list(dict.fromkeys([*asked, *(self._partner[p] for p in asked
                                                 if p in self._partner)]))
        missing = [p for p in distinct if p not in self._replies]
        self.cost.reused += sum(p in self._stored for p in distinct if p not in self._counted)
        self._counted.update(distinct)
        if not missing:
            return
        started = time.perf_counter()
        samples = self.replies(missing, max_new_tokens or self.settings.max_new_tokens)
        self.cost.seconds += time.perf_counter() - started
        self.cost.prompts += len(missing)
        self.cost.reply_tokens += sum(sample.tokens for sample in samples)
        self._replies.update(zip(missing, (s.text for s in samples), strict=True))

    def replies(self, prompts: list[str], max_new_tokens: int) -> list[Completion]:
        """The judge's greedy reply to each prompt, in one backend call."""
        from models.rollout_types import SamplingParams

        backend = self.backend()
        rendered = [self.render(p) for p in prompts]
        params = SamplingParams(n=1, temperature=1.0, greedy=True, seed=0,
                                max_new_tokens=max_new_tokens)
        self.cost.calls += 1
        return [samples[0] for samples in backend.generate(rendered, params)]

    def backend(self) -> RolloutBackend:
        if self._backend is None:
            from transformers import AutoTokenizer

            from models.backends import make_backend
            from models.hub import locate_model

            folder = locate_model(self.model_path, self.revision).folder
            self._tokenizer = AutoTokenizer.from_pretrained(folder)  # its chat template
            self._backend = make_backend(self.backend_name, folder, batch_size=self.batch_size,
                                         dtype=self.dtype)
        return self._backend

    def render(self, prompt: str) -> str:
        """`prompt` as the judge's user message in its chat template, where it has one (a given
        backend: its own tokenizer's, if it has one)."""
        from domains.chat import has_chat_template, render, role_messages

        tokenizer = self._tokenizer or getattr(self.backend(), "tokenizer", None)
        if tokenizer is None or not has_chat_template(tokenizer):
            return prompt
        return render(tokenizer, role_messages("", prompt))


def model_judge(config: RunConfig) -> ModelJudge:
    """The judge of `[verify.judge]` on the run's `[rollout]` backend; a DomainInputError (exit 2
    before the run starts) when there is no model to judge with or its folder is missing."""
    settings = config.verify.judge
    path = settings.model_path or config.model.path
    if settings.incumbent and config.model.path is None:
        msg = ("verify.judge.incumbent = true needs model.path: the incumbent judges its own "
               "answers, and the built-in tiny model cannot judge; set model.path to a chat "
               "model folder or hub id, or verify.judge.incumbent = false")
        raise DomainInputError(msg)
    if path is None:
        msg = ("verify.compare = 'judge' needs a judge model: set verify.judge.model_path (or "
               "model.path) to a model folder or hub id; the built-in tiny model cannot judge")
        raise DomainInputError(msg)
    revision = None if settings.model_path else config.model.revision
    from models.hub import ModelNotCached, is_hub_id, locate_model

    key = "verify.judge.model_path" if settings.model_path else "model.path"
    if is_hub_id(path):
        try:
            locate_model(path, revision)
        except ModelNotCached as exc:
            raise DomainInputError(f"{key}: {exc}") from None
    else:
        if not (Path(path) / "config.json").is_file():
            msg = f"{key} = {path!r}: no model folder (config.json) there; the judge loads it"
            raise DomainInputError(msg)
    rollout = config.rollout
    return ModelJudge(settings, model_path=path, revision=revision,
                      backend_name=rollout.backend, batch_size=rollout.batch_size,
                      dtype=rollout.dtype, think_tags=config.verify.think_tags)


def judged_domain(domain: Domain, config: RunConfig) -> Domain:
    """`domain` judged by `verify.reward_function`, the LLM judge or the reward model
    (domains/reward_model.py) when one is configured, else `domain` itself."""
    verify = config.verify
    if verify.reward_function is not None:
        from domains.reward_function import RewardFunction

        return JudgedDomain(domain, RewardFunction(verify.reward_function))
    if verify.compare == "judge":
        return JudgedDomain(domain, model_judge(config))
    if verify.compare == "reward_model":
        from domains.reward_model import reward_model

        return JudgedDomain(domain, reward_model(config))
    return domain


def incumbent_judged(domain: Domain, folder: Path | str, fingerprint: str) -> Domain:
    """With `[verify.judge] incumbent = true`, `domain` (the run's, whose judge is the fixed
    one) judged instead by the round's incumbent, the model at `folder` of `fingerprint`, on the
    fixed judge's backend and settings; else `domain` itself."""
    if not (isinstance(domain, JudgedDomain) and isinstance(domain.scorer, ModelJudge)
            and domain.scorer.settings.incumbent):
        return domain
    fixed = domain.scorer
    judge = ModelJudge(fixed.settings, model_path=str(folder), backend_name=fixed.backend_name,
                       batch_size=fixed.batch_size, dtype=fixed.dtype,
                       think_tags=fixed.think_tags, name=f"incumbent@{fingerprint[:16]}")
    return JudgedDomain(domain.domain, judge)


class JudgedDomain(WrappedDomain):
    """A domain whose verifier is `scorer` (a `ModelJudge`, a `RewardModel` or a
    `RewardFunction`); every other method is the wrapped domain's (WrappedDomain)."""

    def __init__(self, domain: Domain, scorer: Scorer) -> None:
        super().__init__(domain)
        self.scorer = scorer

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        return self.scorer.judge(list(completions), problems, self.domain)

    def verifier(self) -> str:
        return self.scorer.describe()
