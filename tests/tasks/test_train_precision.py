"""What the train fingerprint covers of `[train] device`, `dtype`, `gradient_checkpointing`,
`num_processes` and `[train.lora]`: the resolved dtype and the LoRA settings, never where or in
how many processes the training runs."""

import pytest

from configs import load_config
from configs.settings import TrainSettings, WarmupTrainSettings
from tasks.fingerprints import stage_fingerprints
from tasks.train import train_settings

RUNTIME_KEYS = {"device", "gradient_checkpointing", "num_processes"}


def _config(**train):
    return load_config(None, {f"train.{k}": v for k, v in train.items()})


def _settings(round_index=1, **train):
    return train_settings(_config(**train), round_index)


def _train_fingerprints(**train):
    """(round 0's, round 1's) train fingerprints."""
    out = stage_fingerprints(_config(**train), rounds=1)
    return out["train", 0], out["train", 1]


@pytest.fixture
def cpu_only(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_where_and_how_a_training_runs_is_not_fingerprinted(cpu_only):
    for model in (WarmupTrainSettings, TrainSettings):
        assert not RUNTIME_KEYS & set(model.model_fields), model
        assert {"dtype", "lora"} <= set(model.model_fields), model
    default = stage_fingerprints(_config(), rounds=1)
    for key, value in [("device", "cpu"), ("dtype", "float32"), ("gradient_checkpointing", True),
                       ("num_processes", 2)]:
        for round_index in (0, 1):
            assert _settings(round_index, **{key: value}) == _settings(round_index), key
        assert stage_fingerprints(_config(**{key: value}), rounds=1) == default, key


def test_the_resolved_dtype_is_fingerprinted(cpu_only, monkeypatch):
    import torch

    assert _settings().dtype == "float32"  # `auto` on a CPU machine
    assert _settings(dtype="bfloat16").dtype == "bfloat16"
    assert _settings(0, dtype="bfloat16").dtype == "bfloat16"
    cpu = _train_fingerprints()
    bf16 = _train_fingerprints(dtype="bfloat16")
    assert bf16[0] != cpu[0] and bf16[1] != cpu[1]
    # `auto` on a CUDA machine trains in bfloat16: the same config is a different stage there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _settings().dtype == "bfloat16"
    assert _train_fingerprints() == bf16
    assert _settings(dtype="float32") == _settings(device="cpu")
    assert _settings(dtype="float32").dtype == "float32"
    assert _train_fingerprints(dtype="float32") == cpu


def test_lora_is_fingerprinted_in_every_mode(cpu_only):
    plain = _train_fingerprints()
    lora = _train_fingerprints(**{"lora.enabled": True})
    rank_4 = _train_fingerprints(**{"lora.enabled": True, "lora.rank": 4})
    # the whole [train.lora] section is in the settings, enabled or not
    disabled_rank_4 = _train_fingerprints(**{"lora.rank": 4})
    for round_index in (0, 1):
        settings = _settings(round_index, **{"lora.enabled": True})
        assert settings.lora.enabled and settings.lora.rank == 16
        assert _settings(round_index, **{"lora.rank": 4}).lora.rank == 4
        assert lora[round_index] != plain[round_index], round_index
        assert rank_4[round_index] != lora[round_index], round_index
        assert disabled_rank_4[round_index] != plain[round_index], round_index
