"""A flywheel run of a pretrained-format chat model (a tiny random Qwen2 with a BPE tokenizer and
a ChatML template, tests/models/chat_model.py) over a dataset domain of 50 question/answer lines
and 20 held-out lines: warm-up + 1 generator round, in-process under the session's Prefect
server.

Every stored prompt is the chat template's rendering, the training rows become TRL's
conversational rows and SFT trains on them, and no held-out question reaches a `problems` file.
"""

from __future__ import annotations

import json

import pytest

from configs import load_config
from domains.chat import chat_messages
from domains.dataset import normalise_question
from models.chat_rows import training_examples
from storage.catalog import Catalog
from tests.models.chat_model import build_chat_model, question_lines

SYSTEM, INSTRUCTION = "Be brief.", "Put your final answer in \\boxed{}."


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory, prefect_server):
    from transformers import AutoTokenizer

    from flows.run import RunSpec, flywheel_flow

    tmp = tmp_path_factory.mktemp("chat-run")
    model = build_chat_model(tmp / "model")
    lines = question_lines(70, seed=1)
    overrides = {
        "rounds": 1, "model.path": str(model),
        "domain.name": "dataset", "domain.min_level": 1, "domain.max_level": 1,
        "domain.seed_max_level": 1, "domain.seed_problems": 40, "domain.heldout_per_level": 20,
        "domain.dataset.paths": [_write_jsonl(tmp / "train.jsonl", lines[:50])],
        "domain.dataset.heldout_path": _write_jsonl(tmp / "heldout.jsonl", lines[50:]),
        "prompt.system": SYSTEM, "prompt.instruction": INSTRUCTION,
        "synthesize.proposals": 8, "synthesize.max_new_tokens": 12,
        "rollout.samples_per_problem": 2, "rollout.max_new_tokens": 8,
        "evaluate.max_new_tokens": 8, "train.batch_size": 8, "train.max_length": 96,
        "train.warmup.max_steps": 3, "train.max_steps": 2, "gates.enabled": False,
        # the random model solves nothing: round 1 trains on the references of generator
        # problems (a proposer's new questions have none)
        "curate.solver_targets": "reference", "synthesize.source": "generator",
    }
    config = load_config(None, overrides)
    flywheel_flow(RunSpec(data_root=str(tmp / "data"), run_id="chat", config=config))
    return (Catalog(tmp / "data"), AutoTokenizer.from_pretrained(model),
            [r["question"] for r in lines[50:]])


def _expected_prompt(tokenizer, user: str) -> str:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


@pytest.mark.slow
def test_the_chat_run_completes_and_trains_both_rounds(chat_run):
    catalog, _, _ = chat_run
    stages = catalog.query("SELECT round, stage, status FROM stages WHERE run_id = 'chat'")
    assert all(r["status"] == "completed" for r in stages), stages
    assert {(r["round"], r["stage"]) for r in stages} >= {(0, "train"), (1, "train"),
                                                          (1, "evaluate")}
    assert catalog.query("SELECT status FROM runs WHERE run_id = 'chat'")[0]["status"] == \
        "completed"
    steps = catalog.query("SELECT round, value FROM metrics WHERE run_id = 'chat'"
                          " AND stage = 'train' AND name = 'steps' ORDER BY round")
    assert [r["round"] for r in steps] == [0, 1] and all(r["value"] > 0 for r in steps), steps


@pytest.mark.slow
def test_stored_prompts_are_the_chat_templates_rendering(chat_run):
    catalog, tokenizer, _ = chat_run
    rollouts = catalog.query("SELECT r.prompt, p.text FROM rollouts r JOIN problems p"
                             " USING (problem_id) WHERE r.run_id = 'chat'")
    assert rollouts
    for row in rollouts:
        assert row["prompt"] == _expected_prompt(tokenizer, f"{row['text']} {INSTRUCTION}")
    evals = catalog.query("SELECT prompt FROM evals WHERE run_id = 'chat'")
    assert evals and all(chat_messages(tokenizer, r["prompt"]) for r in evals)
    proposer = catalog.query("SELECT DISTINCT prompt FROM proposals WHERE run_id = 'chat'")
    assert [r["prompt"] for r in proposer] == [_expected_prompt(
        tokenizer, "Write one new problem of difficulty level 1. Reply with the problem only.")]


@pytest.mark.slow
def test_train_rows_are_conversational_for_trl(chat_run):
    from trl.data_utils import is_conversational

    catalog, tokenizer, _ = chat_run
    rows = catalog.query("SELECT prompt, completion, rejected, weight, role FROM train_rows"
                         " WHERE run_id = 'chat'")
    assert {r["role"] for r in rows} == {"solver", "proposer"}
    examples = training_examples(tokenizer, rows, {"completion": "completion"})
    assert all(is_conversational(e) for e in examples)
    assert examples[0]["prompt"][0] == {"role": "system", "content": SYSTEM}
    assert all(e["completion"][0]["role"] == "assistant" for e in examples)


@pytest.mark.slow
def test_no_heldout_question_is_in_any_problems_file(chat_run):
    catalog, _, heldout = chat_run
    texts = {normalise_question(r["text"])
             for r in catalog.query("SELECT text FROM problems WHERE run_id = 'chat'")}
    assert texts and not texts & {normalise_question(q) for q in heldout}
