"""LoRA and reduced-precision training on the tiny model, on the CPU.

A LoRA SFT pass writes a full checkpoint (the adapter merged in) that plain transformers loads,
and keeps the adapter in `adapter/`: the merged model's greedy answers equal those of the base
with the adapter applied by peft, and differ from the untrained base's (the adapter learned
something, so the equality is not the trivial one of a zero adapter). A bfloat16 training saves
its checkpoint in bfloat16. About 15 s on one core (most of it importing TRL).
"""

import json
import random

import pytest

from domains.arithmetic import ArithmeticDomain
from models.lora import ADAPTER_DIR
from models.runtime import LoraSettings, Precision, TrainRuntime
from models.tiny import build_tiny_model
from models.trainer import last_checkpoint, train_sft

pytestmark = pytest.mark.slow
domain = ArithmeticDomain()
LORA = LoraSettings(rank=8, alpha=16.0, dropout=0.0, target_modules="all-linear")


def _rows(count, seed=0):
    rng = random.Random(seed)
    return [{"prompt": domain.solver_prompt(p.text), "completion": p.reference, "weight": 1.0}
            for p in (domain.generate(rng, 1) for _ in range(count))]


def _train(root, runtime, **kwargs):
    base = build_tiny_model(root / "init", hidden_size=64, num_layers=2, head_dim=32,
                            intermediate_size=128, init_seed=0)
    result = train_sft(base=base, rows=_rows(32), out_dir=root / "out", learning_rate=1e-2,
                       batch_size=8, epochs=4, max_steps=12, max_length=24, seed=0,
                       work_dir=root / "trainer", runtime=runtime, **kwargs)
    return base, root / "out", result


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("lora"), TrainRuntime(lora=LORA), save_steps=6)


def _greedy(model, tokenizer, prompts):
    import torch

    answers = []
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = model.generate(ids, max_new_tokens=6, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
            answers.append(out[0, ids.shape[1]:].tolist())
    return answers


def test_lora_writes_a_merged_checkpoint_whose_greedy_answers_are_the_adapters(lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, out, result = lora_run
    assert result.steps == 12
    assert (out / "model.safetensors").is_file()
    assert (out / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompts = [row["prompt"] for row in _rows(12, seed=5)]
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in name for name in merged.state_dict())
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base),
                                        out / ADAPTER_DIR).eval()
    untrained = AutoModelForCausalLM.from_pretrained(base).eval()
    assert _greedy(merged, tokenizer, prompts) == _greedy(adapted, tokenizer, prompts)
    assert _greedy(merged, tokenizer, prompts) != _greedy(untrained, tokenizer, prompts)


def test_lora_trainer_checkpoints_hold_the_adapter_and_count_as_complete(lora_run):
    _, out, _ = lora_run
    checkpoint, incomplete = last_checkpoint(out.parent / "trainer")
    assert checkpoint is not None and checkpoint.name == "checkpoint-12" and not incomplete
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model.safetensors").exists()


def test_a_bfloat16_training_saves_its_checkpoint_in_bfloat16(tmp_path):
    from safetensors import safe_open

    _, out, result = _train(tmp_path, TrainRuntime(precision=Precision("cpu", "bfloat16")))
    assert result.steps == 12 and result.mean_loss == result.mean_loss  # not NaN
    with safe_open(out / "model.safetensors", framework="pt") as weights:
        dtypes = {str(weights.get_tensor(name).dtype) for name in weights.keys()}
    assert dtypes == {"torch.bfloat16"}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
