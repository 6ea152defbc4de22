"""The model checks made before a run writes anything: one line naming the key and the fix."""

from __future__ import annotations

import json

import pytest

from models.preflight import ModelUnfit, check_model_folder, check_tiny_model_fits, tiny_parameters
from models.tiny import build_tiny_model, parameter_count


def _folder(tmp_path, *files):
    folder = tmp_path / "model"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("{}" if name.endswith(".json") else "x")
    return folder


@pytest.mark.parametrize(("files", "needle"), [
    (None, "no such folder"),
    ((), "no config.json"),
    (("config.json",), "no weights"),
    (("config.json", "model.safetensors"), "no tokenizer"),
])
def test_an_incomplete_model_folder_is_named(tmp_path, files, needle):
    path = tmp_path / "model" if files is None else _folder(tmp_path, *files)
    with pytest.raises(ModelUnfit, match=needle):
        check_model_folder(str(path))


def test_config_json_that_is_not_json(tmp_path):
    folder = _folder(tmp_path, "model.safetensors", "tokenizer.json")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelUnfit, match="not valid JSON"):
        check_model_folder(str(folder))


def test_a_saved_tiny_model_passes_and_its_parameters_match(tmp_path):
    out = build_tiny_model(tmp_path / "tiny", hidden_size=64, num_layers=2, head_dim=32,
                           intermediate_size=128, init_seed=0)
    check_model_folder(str(out))
    from transformers import AutoModelForCausalLM

    assert json.loads((out / "config.json").read_text())["vocab_size"] == 100
    loaded = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(out).parameters())
    estimate = tiny_parameters(64, 2, 128)
    assert estimate == parameter_count(out) and 0.99 < estimate / loaded <= 1.0  # norms aside


@pytest.mark.parametrize(("shape", "memory", "fits"), [
    ((128, 4, 512), 24 << 30, True),       # the default tiny model
    ((4096, 64, 512), 24 << 30, False),    # 4.7 B parameters: 70 GiB to train
    ((4096, 64, 512), 128 << 30, True),
    ((1024, 8, 4096), 1 << 30, False),
])
def test_the_tiny_model_must_fit_in_memory(shape, memory, fits):
    if fits:
        check_tiny_model_fits(*shape, memory=memory)
    else:
        with pytest.raises(ModelUnfit, match=r"B parameters; training it needs about \d+ GiB"):
            check_tiny_model_fits(*shape, memory=memory)
