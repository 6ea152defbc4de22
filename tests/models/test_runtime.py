"""Device and dtype resolution, the trainer arguments of each runtime, and the `[train]` keys
that choose them. No GPU needed: `torch.cuda.is_available` is patched where CUDA matters."""

import dataclasses
from pathlib import Path

import pytest

from configs import ConfigError, load_config
from models.runtime import (
    LoraSettings,
    Precision,
    TrainRuntime,
    resolve_precision,
    train_runtime,
    weights_dtype,
)
from models.trainer import common_arguments, micro_batch_size


@pytest.mark.parametrize(
    ("device", "dtype", "cuda", "expected"),
    [
        ("auto", "auto", True, Precision("cuda", "bfloat16")),
        ("auto", "auto", False, Precision("cpu", "float32")),
        ("cpu", "auto", True, Precision("cpu", "float32")),
        ("cuda", "auto", True, Precision("cuda", "bfloat16")),
        ("auto", "float32", True, Precision("cuda", "float32")),
        ("auto", "float16", True, Precision("cuda", "float16")),
        ("cuda", "bfloat16", True, Precision("cuda", "bfloat16")),
        ("auto", "bfloat16", False, Precision("cpu", "bfloat16")),
        ("cpu", "bfloat16", False, Precision("cpu", "bfloat16")),
        ("cuda", "auto", False, "sees no CUDA device"),
        ("auto", "float16", False, "'float16' needs a CUDA device"),
        ("cpu", "float16", True, "'float16' needs a CUDA device"),
        ("tpu", "auto", True, "device must be one of"),
    ],
)
def test_device_and_dtype_resolve_from_what_torch_sees(monkeypatch, device, dtype, cuda,
                                                       expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            resolve_precision(device, dtype)
    else:
        assert resolve_precision(device, dtype) == expected


def _arguments(runtime=None):
    return common_arguments(work_dir=Path("/tmp/work"), steps=10, micro_batch=4,
                            gradient_accumulation_steps=2, learning_rate=1e-3, save_steps=0,
                            seed=0, runtime=runtime)


def test_trainer_arguments_on_cuda_train_in_bf16_off_the_cpu():
    from transformers import TrainingArguments

    cuda = _arguments(TrainRuntime(precision=Precision("cuda", "bfloat16"),
                                   gradient_checkpointing=True))
    assert (cuda["use_cpu"], cuda["bf16"], cuda["fp16"]) == (False, True, False)
    assert cuda["gradient_checkpointing"] is True
    assert cuda["gradient_checkpointing_kwargs"] == {"use_reentrant": False}
    fp16 = _arguments(TrainRuntime(precision=Precision("cuda", "float16")))
    assert (fp16["use_cpu"], fp16["bf16"], fp16["fp16"]) == (False, False, True)
    # every key is one TrainingArguments has (TRL's configs extend it)
    assert set(cuda) <= {f.name for f in dataclasses.fields(TrainingArguments)}


def test_the_default_runtime_is_float32_on_the_cpu_as_before():
    default = _arguments()
    assert (default["use_cpu"], default["bf16"], default["fp16"]) == (True, False, False)
    assert default["gradient_checkpointing"] is False
    assert "gradient_checkpointing_kwargs" not in default
    assert default == _arguments(TrainRuntime(precision=Precision("cpu", "float32")))


def test_weights_load_in_the_training_dtype_except_full_float16():
    lora = LoraSettings(rank=4, alpha=8, dropout=0.0, target_modules="all-linear")
    assert weights_dtype(TrainRuntime()) == "float32"
    assert weights_dtype(TrainRuntime(precision=Precision("cuda", "bfloat16"))) == "bfloat16"
    assert weights_dtype(TrainRuntime(precision=Precision("cuda", "float16"))) == "float32"
    assert weights_dtype(TrainRuntime(precision=Precision("cuda", "float16"), lora=lora)) \
        == "float16"


def test_micro_batch_splits_the_batch_over_accumulation_and_processes():
    assert micro_batch_size(64, 1, TrainRuntime()) == 64
    assert micro_batch_size(64, 4, TrainRuntime()) == 16
    assert micro_batch_size(64, 4, TrainRuntime(num_processes=2)) == 8


def test_train_runtime_reads_the_train_section(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train_runtime(load_config(None).train) == TrainRuntime(Precision("cuda", "bfloat16"))
    train = load_config(None, {"train.device": "cpu", "train.gradient_checkpointing": True,
                               "train.num_processes": 2, "train.lora.enabled": True,
                               "train.lora.target_modules": ["q_proj", "v_proj"]}).train
    runtime = train_runtime(train)
    assert runtime.precision == Precision("cpu", "float32")
    assert runtime.gradient_checkpointing and runtime.num_processes == 2
    assert runtime.lora == LoraSettings(rank=16, alpha=32.0, dropout=0.05,
                                        target_modules=("q_proj", "v_proj"))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"train.dtype": "int8"}, "`train.dtype` = 'int8'"),
        ({"train.device": "tpu"}, "`train.device` = 'tpu'"),
        ({"train.device": "cpu", "train.dtype": "float16"}, "needs train.device = 'cuda'"),
        ({"train.num_processes": 3}, "batch_size = 64 must be a multiple of train.num_processes"),
        ({"train.num_processes": 0}, "`train.num_processes` = 0"),
        ({"train.num_processes": 4, "train.oom_retry_batch_size": 2},
         "oom_retry_batch_size = 2 must be a multiple of train.num_processes = 4"),
        ({"train.num_processes": 2, "train.proposer.algorithm": "grpo",
          "train.replay_proposer_rows": True}, "cannot run the proposer's GRPO pass"),
        ({"train.lora.rank": 0}, "`train.lora.rank` = 0"),
        ({"train.lora.target_modules": []}, "name at least one module"),
        ({"train.lora.dropout": 1.0}, "`train.lora.dropout` = 1.0"),
    ],
)
def test_bad_train_runtime_keys_are_named(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


def test_the_preflight_check_names_what_this_machine_lacks(monkeypatch):
    import importlib.util

    import torch

    from models.runtime import check_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    two = load_config(None, {"train.num_processes": 2}).train
    assert check_runtime(two, gpus=2).num_processes == 2
    with pytest.raises(ValueError, match="num_processes = 2 but torch sees 1 CUDA devices"):
        check_runtime(two, gpus=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_runtime(two, gpus=0).precision == Precision("cpu", "float32")  # gloo processes
    with pytest.raises(ValueError, match="train.device = 'cuda' but torch sees no CUDA device"):
        check_runtime(load_config(None, {"train.device": "cuda"}).train)
    lora = load_config(None, {"train.lora.enabled": True}).train
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "peft" else real_find_spec(name, *a))
    with pytest.raises(ValueError, match="needs peft"):
        check_runtime(lora)


def test_the_gpu_config_validates_and_names_every_key_a_gpu_user_edits(monkeypatch):
    import tomllib

    import torch

    path = Path(__file__).resolve().parents[2] / "configs" / "qwen-gpu.toml"
    written = tomllib.loads(path.read_text())
    gpu_keys = {"model": {"path"},
                "rollout": {"backend", "dtype", "batch_size", "tensor_parallel_size",
                            "gpu_memory_utilization", "enforce_eager"},
                "train": {"device", "dtype", "gradient_checkpointing", "num_processes",
                          "batch_size", "learning_rate", "max_length"}}
    for section, keys in gpu_keys.items():
        assert keys <= set(written[section]), (section, keys - set(written[section]))
    assert set(written["train"]["lora"]) == {"enabled", "rank", "alpha", "dropout",
                                             "target_modules"}
    config = load_config(path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train_runtime(config.train).precision == Precision("cuda", "bfloat16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no CUDA device"):
        train_runtime(config.train)  # device = "cuda" fails fast on a CPU-only machine
