"""`[prompt] stop` strings during GRPO (models/grpo.py): TRL's generation stops at them and the
reward reads completions cut before them, as rollout and verify do."""

from __future__ import annotations

import json

from configs import load_config
from domains.base import Problem, problem_row
from models.grpo import grpo_config, grpo_generation, stop_token_ids, train_grpo
from models.tiny import build_tiny_model
from tasks.fingerprints import stage_fingerprints
from tasks.train import pass_settings, train_settings

GRPO = {"train.algorithm": "grpo", "curate.solver_targets": "verified"}


def test_stop_strings_join_the_generation_settings_and_the_train_fingerprint():
    rollout = load_config(None).rollout
    assert grpo_generation(rollout) == {} == grpo_generation(rollout, [])
    assert grpo_generation(rollout, ["</a>"]) == {"stop": ["</a>"]}
    vllm = load_config(None, {"rollout.backend": "vllm"}).rollout
    assert grpo_generation(vllm, ["</a>"])["stop"] == ["</a>"]
    default = train_settings(load_config(None, GRPO), 1)
    assert "stop" not in pass_settings(default, "grpo")  # no stop strings: generate as before
    stopped_config = load_config(None, {**GRPO, "prompt.stop": ["</a>"]})
    stopped = train_settings(stopped_config, 1)
    assert list(stopped.domain.prompt.stop) == ["</a>"]
    assert pass_settings(stopped, "grpo")["stop"] == ["</a>"]
    assert (stage_fingerprints(stopped_config)["train", 1]
            != stage_fingerprints(load_config(None, GRPO))["train", 1])
    sft = train_settings(load_config(None, {"prompt.stop": ["</a>"]}), 1)
    assert "stop" not in pass_settings(sft, "sft")  # SFT samples nothing


def test_trl_gets_the_stop_strings_on_vllm(tmp_path):
    arguments = dict(work_dir=tmp_path, steps=1, batch_size=8, gradient_accumulation_steps=1,
                     learning_rate=1e-4, save_steps=0, seed=0, logging_steps=1, num_generations=4,
                     max_completion_length=4, temperature=1.0, beta=0.0)
    vllm = grpo_config(**arguments, generation_backend="vllm", stop=["</a>"])
    assert vllm.generation_kwargs == {"stop": ["</a>"]}  # vLLM SamplingParams.stop
    assert grpo_config(**arguments, stop=["</a>"]).generation_kwargs is None


def test_grpo_on_transformers_stops_at_a_one_token_stop_string(tmp_path):
    base = tmp_path / "tiny"
    build_tiny_model(base, hidden_size=32, num_layers=1, head_dim=8, intermediate_size=32,
                     init_seed=0)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    stops = ["1", "2", "3", "+"]  # one character = one token of the tiny model
    assert stop_token_ids(tokenizer, [*stops, "12"]) == [tokenizer.convert_tokens_to_ids(s)
                                                        for s in stops]
    seen_ids, seen_texts = [], []

    def reward(*, completions, completion_ids, **_):
        seen_ids.extend(completion_ids)
        seen_texts.extend(completions)
        return [0.0 if n % 2 else 1.0 for n in range(len(completions))]

    rows = [{"prompt": f"<solve>{a}+{b}=", "completion": str(a + b), "weight": 1.0,
             "problem": json.dumps(problem_row(Problem(f"{a}+{b}", str(a + b), 1)))}
            for a in range(4) for b in range(2)]
    train_grpo(base=base, rows=rows, reward=reward, out_dir=tmp_path / "out", learning_rate=1e-4,
               batch_size=8, epochs=1, max_steps=2, num_generations=4, temperature=2.0,
               max_completion_length=24, beta=0.0, seed=0, work_dir=tmp_path / "work",
               stop=stops)
    stop_ids = set(stop_token_ids(tokenizer, stops)) | {tokenizer.eos_token_id}
    assert seen_ids and len(seen_ids) == len(seen_texts) == 16
    for ids, text in zip(seen_ids, seen_texts, strict=True):
        ended = [k for k, token in enumerate(ids) if token in stop_ids]
        assert not ended or ended == [len(ids) - 1]  # generation ends at the first stop
        assert not any(s in text for s in stops)  # the reward reads the text cut before it
    assert any(ids and ids[-1] in stop_ids - {tokenizer.eos_token_id} for ids in seen_ids)
