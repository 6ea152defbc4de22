"""What the train fingerprint covers of `[train] device`, `dtype`, `gradient_checkpointing`,
`num_processes` and `[train.lora]`: the resolved dtype and an enabled LoRA, never where or in
how many processes the training runs."""

import pytest

from configs import load_config
from tasks.train import train_settings


def _settings(warmup=False, **train):
    return train_settings(load_config(None, {f"train.{k}": v for k, v in train.items()}),
                          warmup=warmup)


@pytest.fixture
def cpu_only(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_where_and_how_a_training_runs_is_not_fingerprinted(cpu_only):
    default = _settings()
    assert not {"device", "dtype", "gradient_checkpointing", "num_processes",
                "lora"} & set(default["train"])
    for key, value in [("device", "cpu"), ("dtype", "float32"), ("gradient_checkpointing", True),
                       ("num_processes", 2)]:
        assert _settings(**{key: value}) == default, key
        assert _settings(warmup=True, **{key: value}) == _settings(warmup=True), key


def test_the_resolved_dtype_is_fingerprinted_unless_float32(cpu_only, monkeypatch):
    import torch

    assert _settings(dtype="bfloat16")["train"]["dtype"] == "bfloat16"
    assert _settings(dtype="bfloat16") != _settings()
    # `auto` on a CUDA machine trains in bfloat16: the same config is a different stage there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _settings()["train"]["dtype"] == "bfloat16"
    assert _settings(dtype="float32") == _settings(device="cpu")
    assert "dtype" not in _settings(dtype="float32")["train"]


def test_lora_is_fingerprinted_in_every_mode_when_enabled_only(cpu_only):
    for warmup in (False, True):
        plain = _settings(warmup=warmup)
        assert _settings(warmup=warmup, **{"lora.rank": 4}) == plain  # unread when disabled
        lora = _settings(warmup=warmup, **{"lora.enabled": True})
        assert lora["train"]["lora"]["rank"] == 16 and lora != plain
        assert _settings(warmup=warmup, **{"lora.enabled": True, "lora.rank": 4}) != lora
