"""The reward model (`verify.compare = "reward_model"`): a sequence classifier scores each
(solver prompt, answer) pair, and the sigmoid of its score is the reward.

`judged_domain` (domains/judge.py) puts a `RewardModel` in the one judging path, as it puts the
LLM judge, so verify, the GRPO reward, the proposer's online reward and evaluate all get its
rewards through `Domain.judge`. A scoring, pair by pair:

    messages  [{"role": "user", "content": "What is 2 + 3?"},   (the solver's messages,
               {"role": "assistant", "content": "5"}]             `Domain.solver_messages`)
    text      "<|im_start|>user\\nWhat is 2 + 3?<|im_end|>\\n"
              "<|im_start|>assistant\\n5<|im_end|>\\n"     (the reward model's chat template;
                                                       without one: prompt + answer, "<solve>2+3=5")
    score     2.2 (the model's one logit)  -> verdicts.score
    reward    sigmoid(2.2) = 0.900         -> verdicts.reward

Choices, written down here:

- **One label.** Only a model with `num_labels == 1` (the Bradley-Terry reward models: Skywork-
  Reward, ArmoRM's preference head, ...) is accepted; one with more labels is a DomainInputError
  naming the key when it loads, not a guess at which label means "good".
- **No normalisation.** The reward is sigmoid(score) of that completion alone, never centred or
  scaled within a batch or group, so the same completion gets the same reward in every stage,
  batch and process. The per-group part is GRPO's own: its advantage normalises the rewards of
  each prompt's group.
- **Truncation** keeps the last `max_length` tokens: a longer pair loses the start of its prompt
  (then of its answer), never the end of the answer, which is what is judged.
- **One shape per length.** A forward pass holds pairs of one token length only, at most
  `batch_size` of them (`same_length_batches`), filled out to `batch_size` rows with copies of
  its first pair: a pair is scored by the same computation alone or among others of any
  length. Padding, or passes of other row counts, change the kernels' shapes and, by float32
  rounding, the score (seen: about 1e-7 relative on the CPU for some lengths). Filling costs
  compute where a length has fewer than `batch_size` pairs; `batch_size = 1` spends none on
  the CPU. The model pools its last token that is not the config's
  `pad_token_id` (transformers' sequence classifiers), which is set from the tokenizer (its pad
  token, else its eos token) where the config lacks one (`pad_like_the_model`).
- It runs in float32, in eval mode, under `torch.no_grad`, on CUDA where there is one, else the
  CPU.
- Think tags (`verify.think_tags`): only the text after the thinking is scored, as the judge
  reads it; a completion cut off while thinking is `Judgement(None, "thinking_unfinished")`.

The verifier id is `reward_model[<model_path>:<hash of the settings>]@2`. Scores are not stored
as a dataset of their own (their verdicts hold them); the tiny models cannot score meaningfully.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from domains.answers import after_thinking
from domains.base import Domain, DomainInputError, ProblemRow
from domains.chat import has_chat_template
from domains.checking import Judgement

if TYPE_CHECKING:
    from configs import RunConfig
    from configs.domain import RewardModelConfig

REWARD_MODEL_VERSION = 2  # bumped when the same model would give the same pair another reward
# (2: passes of one length and shape, no padding)
KEY = "verify.reward_model.model_path"


def sigmoid(score: float) -> float:
    """The reward of a raw score, in [0, 1], without overflow for scores far from 0.

    >>> sigmoid(0.0), round(sigmoid(2.0), 4), sigmoid(-1000.0)
    (0.5, 0.8808, 0.0)
    """
    import math

    if score >= 0:
        return 1.0 / (1.0 + math.exp(-score))
    exp = math.exp(score)
    return exp / (1.0 + exp)


class RewardModel:
    """A reward model (`[verify.reward_model]`) loaded lazily from `model_path`, a folder or a
    hub id (models/hub.py `locate_model`), with its tokenizer."""

    def __init__(self, settings: RewardModelConfig, *, model_path: str,
                 think_tags: Sequence[str] = ()) -> None:
        self.settings = settings
        self.model_path = model_path
        self.think_tags = tuple(think_tags)  # the answer is read after the thinking
        self._model: Any = None
        self._tokenizer: Any = None
        self.forward_passes = 0

    def __getstate__(self) -> dict[str, Any]:  # shipped to a Ray worker: reload the model there
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def describe(self) -> str:
        """`reward_model[<model>:<hash of the settings>]@<version>`."""
        key = json.dumps({"model": self.model_path, "max_length": self.settings.max_length,
                          "batch_size": self.settings.batch_size,  # the passes' shape
                          "think_tags": list(self.think_tags)}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"reward_model[{self.model_path}:{digest}]@{REWARD_MODEL_VERSION}"

    def judge(self, completions: list[str], problems: list[ProblemRow],
              domain: Domain) -> list[Judgement]:
        answers = [after_thinking(c, self.think_tags) for c in completions]
        texts = [None if a is None else self.text(domain, p["text"], a)
                 for a, p in zip(answers, problems, strict=True)]
        distinct = [t for t in dict.fromkeys(texts) if t is not None]
        scores = dict(zip(distinct, self.scores(distinct), strict=True))
        return [Judgement(None, "thinking_unfinished") if t is None
                else Judgement(sigmoid(scores[t]), score=scores[t]) for t in texts]

    def text(self, domain: Domain, problem_text: str, answer: str) -> str:
        """What is scored: the solver's messages and `answer` as the assistant's reply in the
        reward model's chat template, or the solver prompt followed by `answer` without one."""
        tokenizer = self.tokenizer()
        if not has_chat_template(tokenizer):
            return domain.solver_prompt(problem_text) + answer
        messages = [*domain.solver_messages(problem_text),
                    {"role": "assistant", "content": answer}]
        return tokenizer.apply_chat_template(messages, tokenize=False)

    def scores(self, texts: list[str]) -> list[float]:
        """The model's raw score of each text: texts of one token length together, at most
        `batch_size` per forward pass (`same_length_batches`), each pass filled out to
        `batch_size` rows with copies of its first text, so every pass of a length has one
        shape and no text is padded."""
        import torch

        if not texts:
            return []
        model, tokenizer = self.model(), self.tokenizer()
        special = not has_chat_template(tokenizer)  # a rendering holds its special tokens already
        ids = tokenizer(texts, truncation=True, max_length=self.settings.max_length,
                        add_special_tokens=special)["input_ids"]
        out: dict[int, float] = {}
        with torch.no_grad():
            for batch in same_length_batches(ids, self.settings.batch_size):
                rows = [ids[i] for i in batch]
                rows += [rows[0]] * (self.settings.batch_size - len(rows))
                tokens = torch.tensor(rows, device=model.device)
                logits = model(input_ids=tokens, attention_mask=torch.ones_like(tokens)).logits
                self.forward_passes += 1
                scores = logits[: len(batch), 0].float().cpu()
                out.update(zip(batch, (float(v) for v in scores), strict=True))
        return [out[i] for i in range(len(texts))]

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.folder())
            tokenizer.padding_side = "right"  # each pair keeps the positions it has alone
            tokenizer.truncation_side = "left"  # the answer's end is always scored
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            self._tokenizer = tokenizer
        return self._tokenizer

    def model(self) -> Any:
        if self._model is None:
            import torch
            from transformers import AutoModelForSequenceClassification

            model = AutoModelForSequenceClassification.from_pretrained(
                self.folder(), dtype=torch.float32)
            one_label(self.model_path, model.config.num_labels)
            pad_like_the_model(model.config, self.tokenizer())
            device = "cuda" if torch.cuda.is_available() else "cpu"
            self._model = model.to(device).eval()
        return self._model

    def folder(self) -> Any:
        from models.hub import locate_model

        return locate_model(self.model_path).folder


def same_length_batches(ids: list[list[int]], size: int) -> list[list[int]]:
    """The indices of `ids` in batches of at most `size` token lists of one length, in order of
    first appearance: a batch needs no padding, so a text's score does not depend on the
    lengths of the texts it is batched with."""
    by_length: dict[int, list[int]] = {}
    for index, tokens in enumerate(ids):
        by_length.setdefault(len(tokens), []).append(index)
    return [group[start:start + size] for group in by_length.values()
            for start in range(0, len(group), size)]


def pad_like_the_model(model_config: Any, tokenizer: Any) -> None:
    """Make the tokenizer pad with the token the model's pooling skips: the classifier scores
    the last token that is not `pad_token_id`, so a config without one gets the tokenizer's
    pad token, and a tokenizer padding with another token pads with the config's instead."""
    if model_config.pad_token_id is None:
        model_config.pad_token_id = tokenizer.pad_token_id
    elif tokenizer.pad_token_id != model_config.pad_token_id:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(model_config.pad_token_id)


def one_label(path: str, num_labels: int) -> None:
    """A DomainInputError naming the key unless the model has one label (its score)."""
    if num_labels != 1:
        msg = (f"{KEY} = {path!r}: the model has {num_labels} labels; a reward model has one "
               "(its score): use a sequence classifier trained as a reward model "
               "(num_labels = 1)")
        raise DomainInputError(msg)


def reward_model(config: RunConfig) -> RewardModel:
    """The reward model of `[verify.reward_model]`; a DomainInputError (exit 2 before the run
    starts) when its folder is missing or a hub id is not in the local cache."""
    settings = config.verify.reward_model
    path = settings.model_path
    if path is None:  # the config refuses it (VerifyConfig); a constructed one may not
        msg = (f"verify.compare = 'reward_model' needs a reward model: set {KEY} to a "
               "sequence-classification model folder or hub id")
        raise DomainInputError(msg)
    from models.hub import ModelNotCached, is_hub_id, locate_model

    if is_hub_id(path):
        try:
            folder = locate_model(path).folder
        except ModelNotCached as exc:
            raise DomainInputError(f"{KEY}: {exc}") from None
    else:
        from pathlib import Path

        folder = Path(path)
        if not (folder / "config.json").is_file():
            msg = f"{KEY} = {path!r}: no model folder (config.json) there to load the model from"
            raise DomainInputError(msg)
    from transformers import AutoConfig

    one_label(path, AutoConfig.from_pretrained(folder).num_labels)
    return RewardModel(settings, model_path=path, think_tags=config.verify.think_tags)
