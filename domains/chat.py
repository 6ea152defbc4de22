"""Prompts for pretrained chat models: the tokenizer's chat template around each role's messages.

    solver    [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "What is 7 * 6? Put the answer in \\boxed{}."}]
              -> "<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nWhat is 7 * 6? ..."
                 "<|im_end|>\\n<|im_start|>assistant\\n"
    proposer  [..., {"role": "user", "content": "Write one new problem of difficulty level 3. ..."}]

`ChatDomain` wraps a domain (domains/__init__.py `get_domain` does it for a run with a
`model.path`, or with a `[prompt]` key changed): its `solver_prompt` and `proposer_prompt` are
`tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)` of the
messages above, so every stage that asks the domain for a prompt (synthesize, rollout, curate,
evaluate, the online proposer reward) gets the same rendering; `cut` ends completions at the
stop strings and `training_target` writes references in `[prompt] answer_format`. Every other
method of `domains.base.Domain` is passed to the wrapped domain explicitly (judging included).
The tokenizer is `model.path`'s, loaded on the first prompt; one without a chat template (the
built-in tiny model), or `chat_template = "never"`, keeps the domain's raw prompt. The solver's
user message is the domain's `question(text)` (the question without its task tag; by default
its raw prompt without the role tag), then `[prompt] instruction`.

`chat_messages` inverts the rendering (models/chat_rows.py turns stored training rows into TRL's
conversational rows with it), and `[prompt] stop` strings cut completions (`cut_at_stop`).
A rendering already holds the special tokens its template wants (a Llama-3 template writes its
BOS itself), so the backends tokenize renderings without adding the tokenizer's own
(`special_tokens_for`), as TRL's trainers do; raw prompts keep them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domains.base import Domain, WrappedDomain, numbered

if TYPE_CHECKING:

    from configs import PromptConfig

Messages = list[dict[str, str]]
# Stand-ins for the contents when the template is rendered once to find where contents go.
_SYSTEM_MARK, _USER_MARK = "\x00flywheel-system\x00", "\x00flywheel-user\x00"


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer: Any, messages: Messages) -> str:
    """The prompt text a chat model is sampled with: the template plus the assistant's opening."""
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def role_messages(system: str, user: str) -> Messages:
    """A system message (left out when empty) and the user's message."""
    head = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": user}]


def chat_messages(tokenizer: Any, prompt: str) -> Messages | None:
    """The messages whose rendering is exactly `prompt`, or None when `prompt` is no rendering
    of this tokenizer's template (a raw prompt). The template is rendered around stand-in
    contents, once with a system message and once without; the contents are read off `prompt`
    between the template's pieces, and the answer is checked by rendering it again."""
    for with_system in (True, False):
        pattern = render(tokenizer, role_messages(_SYSTEM_MARK if with_system else "",
                                                  _USER_MARK))
        before, _, after = pattern.partition(_USER_MARK)
        fixed = len(before.replace(_SYSTEM_MARK, "")) + len(after)  # the template's own text
        if len(prompt) < fixed or not prompt.endswith(after):
            continue
        body = prompt[:len(prompt) - len(after)]
        if with_system:
            head, _, between = before.partition(_SYSTEM_MARK)
            cut = body.find(between, len(head)) if body.startswith(head) and between else -1
            if cut < 0:
                continue
            messages = role_messages(body[len(head):cut], body[cut + len(between):])
        elif body.startswith(before):
            messages = role_messages("", body[len(before):])
        else:
            continue
        if render(tokenizer, messages) == prompt:
            return messages
    return None


def special_tokens_for(tokenizer: Any, prompts: list[str]) -> bool:
    """Whether `prompts` are tokenized with the tokenizer's special tokens (`add_special_tokens`):
    False when they are renderings of its chat template, True for raw prompts (a tokenizer
    without a template: every prompt is raw). A mix of both is a ValueError naming a raw one."""
    if not has_chat_template(tokenizer) or not prompts:
        return True
    distinct = list(dict.fromkeys(prompts))
    raw = [prompt for prompt in distinct if chat_messages(tokenizer, prompt) is None]
    if raw and len(raw) < len(distinct):
        msg = (f"{len(raw)} of {len(distinct)} prompts are not renderings of the model's chat "
               f"template (first: {raw[0][:80]!r}); the prompts of one call share one format "
               "([prompt] chat_template)")
        raise ValueError(msg)
    return bool(raw)


def cut_at_stop(text: str, stop: list[str]) -> str:
    """`text` up to the first of the `stop` strings (all of it when none occurs)."""
    ends = [index for index in (text.find(s) for s in stop if s) if index >= 0]
    return text[:min(ends)] if ends else text


class ChatDomain(WrappedDomain):
    """A domain whose prompts go through `model_path`'s chat template (module docstring)."""

    def __init__(self, domain: Domain, prompt: PromptConfig, model_path: str | None,
                 revision: str | None = None) -> None:
        super().__init__(domain)
        self.prompt = prompt
        self.model_path = model_path
        self.revision = revision  # model.revision: a hub id's snapshot (models/hub.py)
        self._tokenizer: Any = None
        self._checked = False

    def __getstate__(self) -> dict[str, Any]:  # shipped to a Ray worker: reload the tokenizer
        return {**self.__dict__, "_tokenizer": None, "_checked": False}

    def tokenizer(self) -> Any | None:
        """`model_path`'s tokenizer when prompts are rendered with its chat template, else None."""
        if not self._checked:
            self._checked = True
            if self.model_path is not None and self.prompt.chat_template == "auto":
                from transformers import AutoTokenizer

                from models.hub import locate_model

                folder = locate_model(self.model_path, self.revision).folder
                loaded = AutoTokenizer.from_pretrained(folder)
                self._tokenizer = loaded if has_chat_template(loaded) else None
        return self._tokenizer

    def solver_messages(self, problem_text: str) -> Messages:
        user = self.domain.question(problem_text)
        if self.prompt.instruction:
            user = f"{user} {self.prompt.instruction}"
        return role_messages(self.prompt.system, user)

    def proposer_messages(self, level: int) -> Messages:
        """The proposer's instruction; with the domain's `style_examples` (self-instruct), the
        problems to imitate after it."""
        user = self.prompt.proposer_instruction.format(level=level)
        examples = self.domain.style_examples(level)
        if examples:
            user = f"{user}\n\nProblems like these:\n{numbered(examples)}"
        return role_messages(self.prompt.system, user)

    def solver_prompt(self, problem_text: str) -> str:
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return self.domain.solver_prompt(problem_text)
        return render(tokenizer, self.solver_messages(problem_text))

    def proposer_prompt(self, level: int) -> str:
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return self.domain.proposer_prompt(level)
        return render(tokenizer, self.proposer_messages(level))

    def training_target(self, reference: str) -> str:
        """What the solver trains on for `reference` (the warm-up, too-hard problems): the
        wrapped domain's target, written in `[prompt] answer_format` when the chat template is in
        use (the format `instruction` asks for, e.g. `\\boxed{42}`), else as it is."""
        target = self.domain.training_target(reference)
        if self.tokenizer() is None:
            return target
        return self.prompt.answer_format.format(answer=target)

    def cut(self, completion: str) -> str:
        """A sampled completion cut before the first `[prompt] stop` string."""
        return cut_at_stop(completion, self.prompt.stop)

    # ---- the wrapped domain's own ------------------------------------------------------------
