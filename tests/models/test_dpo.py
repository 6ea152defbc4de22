"""DPO on hand-made verified pairs: the loss falls, the chosen-over-rejected log-probability
margin grows, and the checkpoint loads like any other."""

import pytest

from models.backends import SamplingParams, TransformersBackend
from models.dpo import train_dpo
from models.tiny import build_tiny_model

PAIRS = [(f"<solve>{a}+{b}=", str(a + b), str(a + b + 1)) for a in range(4) for b in range(4)]


def _margin(checkpoint):
    """Mean over PAIRS of log p(chosen | prompt) - log p(rejected | prompt), end-of-text
    included."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()

    def logprob(prompt, completion):
        prompt_ids = tokenizer(prompt).input_ids
        ids = torch.tensor([prompt_ids + tokenizer(completion).input_ids
                            + [tokenizer.eos_token_id]])
        with torch.inference_mode():
            logits = model(ids).logits[0, :-1].log_softmax(-1)
        targets = ids[0, 1:]
        return logits[torch.arange(len(targets)), targets][len(prompt_ids) - 1:].sum().item()

    return sum(logprob(p, c) - logprob(p, r) for p, c, r in PAIRS) / len(PAIRS)


def _rows(pairs):
    return [{"prompt": p, "completion": c, "rejected": r, "weight": 1.0} for p, c, r in pairs]


def test_dpo_widens_the_chosen_margin_and_writes_a_loadable_checkpoint(tmp_path):
    base = build_tiny_model(tmp_path / "init", hidden_size=64, num_layers=2, head_dim=32,
                            intermediate_size=128, init_seed=0)
    before = _margin(base)
    result = train_dpo(base=base, rows=_rows(PAIRS), out_dir=tmp_path / "out", learning_rate=1e-3,
                       batch_size=16, epochs=30, max_steps=30, max_length=24, beta=0.1, seed=0,
                       work_dir=tmp_path / "trainer", logging_steps=1)
    after = _margin(tmp_path / "out")
    assert result.steps == 30 and result.trained_tokens > 0
    assert after > before + 1.0, (before, after)
    # the first step's loss is log 2 (policy = reference); it falls below its own mean
    assert result.final_loss < result.mean_loss < 0.6931
    backend = TransformersBackend(tmp_path / "out")
    assert len(backend.generate(["<solve>1+2="],
                                SamplingParams(n=2, temperature=1.0, max_new_tokens=4,
                                               seed=0))[0]) == 2


def test_dpo_refuses_rows_without_a_rejected_completion(tmp_path):
    rows = _rows(PAIRS[:2]) + [{"prompt": "<propose>L1:", "completion": "1+1", "rejected": None,
                                "weight": 1.0}]
    with pytest.raises(ValueError, match="1 DPO rows have no rejected completion .*'<propose>L1:'"):
        train_dpo(base=tmp_path, rows=rows, out_dir=tmp_path, learning_rate=1e-3, batch_size=2,
                  epochs=1, max_steps=1, max_length=24, beta=0.1, seed=0, work_dir=tmp_path)
