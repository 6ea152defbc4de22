"""`configs/gsm8k-style.toml`, a GPU preset that cannot run here, validated: its keys, the lines a
user edits, and, with those pointed at a local chat model and files, the domain and prompts the
run would use; the README's JSONL example is a usable dataset file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from configs import load_config
from domains import get_domain
from domains.chat import ChatDomain, render
from models.preflight import check_model_folder
from tests.domains.labels import labelled
from tests.models.chat_model import build_chat_model

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "gsm8k-style.toml"
EDITED = ("model.path", "domain.dataset.paths", "domain.dataset.heldout_path")


def readme_jsonl() -> list[dict]:
    section = (ROOT / "README.md").read_text().split("## Your own model and data", 1)[1]
    block = re.search(r"```jsonl\n(.*?)```", section, re.DOTALL).group(1)
    return [json.loads(line) for line in block.splitlines()]


def test_the_preset_is_a_gpu_chat_run_over_a_dataset_file():
    config = load_config(PRESET)
    assert config.domain.name == "dataset" and config.synthesize.source == "pool"
    assert (config.rollout.backend, config.train.device) == ("vllm", "cuda")
    assert config.prompt.chat_template == "auto" and "\\boxed{" in config.prompt.instruction
    assert config.verify.compare == "math" and config.curate.solver_targets == "verified"
    assert config.train.max_length > config.rollout.max_new_tokens
    edit_lines = [line for line in PRESET.read_text().splitlines() if "# EDIT" in line]
    assert [line.split("=")[0].strip() for line in edit_lines] == ["path", "paths", "heldout_path"]
    head = PRESET.read_text().split("\n\n", 1)[0]
    assert "Follows" in head and "Departs" in head


def test_with_its_edited_lines_the_preset_builds_chat_prompts(tmp_path):
    model = build_chat_model(tmp_path / "model")
    rows = readme_jsonl()
    assert len(rows) == 5
    train, held = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    held.write_text(json.dumps(rows[4]) + "\n")
    config = load_config(PRESET, dict(zip(EDITED, [str(model), [str(train)], str(held)],
                                          strict=True)))
    check_model_folder(config.model.path)
    domain = get_domain(config.domain.name, config)
    assert isinstance(domain, ChatDomain)
    assert [p.text for p in domain.heldout(config.domain.heldout_per_level)] == \
        [rows[4]["question"]]
    from transformers import AutoTokenizer

    question = rows[0]["question"]
    expected = render(AutoTokenizer.from_pretrained(model), [
        {"role": "system", "content": config.prompt.system},
        {"role": "user", "content": f"{question} {config.prompt.instruction}"}])
    assert domain.solver_prompt(question) == expected
    assert domain.score(["so \\boxed{8}", "it is 9"], labelled(["8", "8"])) == [1.0, 0.0]
