"""Training rows in TRL's conversational form, so a chat model trains on what it was sampled with.

Stored `train_rows` keep the prompt exactly as the model was prompted (for a chat model, the
chat template's rendering: domains/chat.py). The trainers' datasets are built here: where the
tokenizer has a chat template and every row's prompt is its rendering, the prompt becomes its
message list and each answer an assistant message, which TRL's SFT, GRPO and DPO trainers
render with the same template (SFT's loss stays on the completion):

    stored  {"prompt": "<|im_start|>user\\nWhat is 7 * 6?<|im_end|>\\n<|im_start|>assistant\\n",
             "completion": "\\\\boxed{42}", ...}
    sft     {"prompt": [{"role": "user", "content": "What is 7 * 6?"}],
             "completion": [{"role": "assistant", "content": "\\\\boxed{42}"}]}
    grpo    {"prompt": [...], "problem": "{\"reference\": \"42\", ...}"}
    dpo     {"prompt": [...], "chosen": [{"role": "assistant", ...}],
             "rejected": [{"role": "assistant", ...}]}

Raw prompts (the built-in tiny model, `[prompt] chat_template = "never"`) stay strings. Rows of
one pass are all one form: some rendered and some raw is an error naming a raw row.
"""

from __future__ import annotations

from typing import Any

from domains.chat import Messages, chat_messages, has_chat_template


def prompt_messages(tokenizer: Any, prompts: list[str]) -> list[Messages] | None:
    """Each prompt's messages when every prompt is a rendering of the tokenizer's chat template;
    None when none is (raw prompts). A mix raises, naming the first raw prompt."""
    if not has_chat_template(tokenizer) or not prompts:
        return None
    found = [chat_messages(tokenizer, prompt) for prompt in prompts]
    if all(messages is None for messages in found):
        return None
    raw = [prompt for prompt, messages in zip(prompts, found, strict=True) if messages is None]
    if raw:
        msg = (f"{len(raw)} of {len(prompts)} training rows have a prompt that is not the model's "
               f"chat template (first: {raw[0][:80]!r}); rows of one run share one prompt format "
               "([prompt] chat_template)")
        raise ValueError(msg)
    return found  # type: ignore[return-value]


def assistant(text: str) -> Messages:
    return [{"role": "assistant", "content": text}]


def training_examples(tokenizer: Any, rows: list[dict[str, Any]],
                      answers: dict[str, str]) -> list[dict[str, Any]]:
    """One trainer example per row: `prompt`, and each `answers` column (example key -> row key)
    as text, or, for rendered chat prompts, the prompt's messages and assistant messages.

    `answers` for SFT {"completion": "completion"}, DPO {"chosen": "completion", "rejected":
    "rejected"}; GRPO passes {} and adds its problem rows itself."""
    messages = prompt_messages(tokenizer, [r["prompt"] for r in rows])
    if messages is None:
        return [{"prompt": r["prompt"], **{key: r[column] for key, column in answers.items()}}
                for r in rows]
    return [{"prompt": m, **{key: assistant(r[column]) for key, column in answers.items()}}
            for r, m in zip(rows, messages, strict=True)]


def completion_texts(completions: list[Any]) -> list[str]:
    """TRL hands reward functions conversational completions as message lists: their text."""
    return [c[-1]["content"] if isinstance(c, list) else c for c in completions]


def text_reward(reward: Any) -> Any:
    """`reward` called with completion texts whatever form TRL hands them in; same name."""

    def on_texts(*args: Any, completions: list[Any], **kwargs: Any) -> list[float]:
        return reward(*args, completions=completion_texts(completions), **kwargs)

    on_texts.__name__ = getattr(reward, "__name__", "reward")
    return on_texts
