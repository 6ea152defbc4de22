"""TRL's SFT, GRPO and DPO trainers on a chat model's stored rows (models/chat_rows.py): each
trains on conversational rows, TRL renders their prompts exactly as they were stored, and the
reward functions read plain completion texts."""

from __future__ import annotations

import json
import pickle

import pytest

from configs import load_config
from domains import get_domain
from domains.chat import ChatDomain
from models.chat_rows import training_examples
from tests.models.chat_model import build_chat_model


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("chat") / "model")


@pytest.fixture(scope="module")
def rows(chat_model):
    config = load_config(None, {"model.path": str(chat_model), "domain.name": "reasoning_gym",
                                "prompt.system": "Be brief."})
    domain = get_domain("reasoning_gym", config)
    questions = [(f"basic_arithmetic L1: What is {a} plus {b}?", str(a + b))
                 for a in range(2) for b in range(2)]
    return [{"prompt": domain.solver_prompt(text), "completion": answer,
             "rejected": str(int(answer) + 1), "weight": 1.0, "role": "solver",
             "problem": json.dumps({"text": text, "reference": answer, "level": 1,
                                    "task": "basic_arithmetic", "payload": None})}
            for text, answer in questions]


def _common(tmp_path, name):
    return {"out_dir": tmp_path / name, "work_dir": tmp_path / f"{name}-work",
            "learning_rate": 1e-3, "epochs": 1.0, "max_steps": 1, "seed": 0}


def test_trl_renders_the_stored_prompts_of_conversational_rows(chat_model, rows):
    from transformers import AutoTokenizer
    from trl.data_utils import maybe_apply_chat_template

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    for row, example in zip(rows, training_examples(tokenizer, rows, {"completion": "completion"}),
                            strict=True):
        rendered = maybe_apply_chat_template(example, tokenizer)
        assert rendered["prompt"] == row["prompt"]
        assert rendered["completion"].startswith(row["completion"])  # then the end of the turn


def test_sft_and_dpo_train_on_conversational_rows(chat_model, rows, tmp_path):
    from models.dpo import train_dpo
    from models.trainer import train_sft

    sft = train_sft(base=chat_model, rows=rows, batch_size=4, max_length=96,
                    **_common(tmp_path, "sft"))
    assert sft.steps == 1 and sft.trained_tokens > 0 and (tmp_path / "sft/config.json").is_file()
    dpo = train_dpo(base=chat_model, rows=rows, batch_size=4, max_length=96, beta=0.1,
                    **_common(tmp_path, "dpo"))
    assert dpo.steps == 1 and (tmp_path / "dpo/config.json").is_file()


def test_grpo_rewards_read_completion_texts(chat_model, rows, tmp_path):
    from models.grpo import train_grpo

    seen = []

    def verifier(completions, problem, **_):
        seen.extend(completions)
        return [float(c.strip() == json.loads(p)["reference"])
                for c, p in zip(completions, problem, strict=True)]

    result = train_grpo(base=chat_model, rows=rows, reward=verifier, batch_size=4,
                        num_generations=2, temperature=1.0, max_completion_length=4, beta=0.0,
                        **_common(tmp_path, "grpo"))
    assert result.steps == 1 and len(result.rewards) == 1
    assert len(seen) == 4 and all(isinstance(text, str) for text in seen)


def test_a_chat_domain_survives_pickling_for_a_worker(chat_model, rows):
    config = load_config(None, {"model.path": str(chat_model), "domain.name": "reasoning_gym",
                                "prompt.system": "Be brief."})
    domain = get_domain("reasoning_gym", config)
    text = "basic_arithmetic L1: What is 0 plus 0?"
    assert domain.solver_prompt(text) == rows[0]["prompt"]
    copy = pickle.loads(pickle.dumps(domain))
    assert isinstance(copy, ChatDomain) and copy.solver_prompt(text) == rows[0]["prompt"]
