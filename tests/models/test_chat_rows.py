"""Training rows in TRL's conversational form (models/chat_rows.py)."""

from __future__ import annotations

import pytest

from domains.chat import render
from models.chat_rows import completion_texts, text_reward, training_examples
from models.tiny import build_tokenizer
from tests.models.chat_model import build_chat_model


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_chat_model(tmp_path_factory.mktemp("m") / "m"))


def _row(prompt, completion="42", rejected=None):
    return {"prompt": prompt, "completion": completion, "rejected": rejected, "weight": 1.0}


def test_rendered_rows_become_messages_for_sft_and_dpo(tokenizer):
    user = [{"role": "user", "content": "What is 40 plus 2?"}]
    rows = [_row(render(tokenizer, user), "42", "41")]
    assert training_examples(tokenizer, rows, {"completion": "completion"}) == [
        {"prompt": user, "completion": [{"role": "assistant", "content": "42"}]}]
    pair = training_examples(tokenizer, rows, {"chosen": "completion", "rejected": "rejected"})
    assert pair[0]["rejected"] == [{"role": "assistant", "content": "41"}]
    assert training_examples(tokenizer, rows, {}) == [{"prompt": user}]


def test_raw_rows_stay_text_and_a_mix_is_an_error(tokenizer):
    raw = [_row("<solve>40+2=")]
    assert training_examples(tokenizer, raw, {"completion": "completion"}) == [
        {"prompt": "<solve>40+2=", "completion": "42"}]
    assert training_examples(build_tokenizer(), raw, {"completion": "completion"})[0][
        "prompt"] == "<solve>40+2="
    mixed = raw + [_row(render(tokenizer, [{"role": "user", "content": "q"}]))]
    with pytest.raises(ValueError, match=r"1 of 2 training rows .*'<solve>40\+2='"):
        training_examples(tokenizer, mixed, {"completion": "completion"})


def test_rewards_read_the_text_of_conversational_completions():
    seen = []

    def verifier(completions, label, **_):
        seen.append(completions)
        return [1.0 for _ in completions]

    reward = text_reward(verifier)
    assert reward.__name__ == "verifier"
    reward(prompts=[[]], completions=[[{"role": "assistant", "content": "42"}]], label=["42"])
    reward(prompts=["p"], completions=["41"], label=["42"])
    assert seen == [["42"], ["41"]]
    assert completion_texts(["a", [{"role": "assistant", "content": "b"}]]) == ["a", "b"]
