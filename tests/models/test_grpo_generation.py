"""GRPO's generation backend: transformers by default, TRL's colocated vLLM under
`rollout.backend = "vllm"` on a GPU, refused on the CPU (models/grpo.py explains why)."""

from __future__ import annotations

import pytest

from configs import ConfigError, load_config
from configs.settings import WarmupTrainSettings
from models.grpo import check_generation, grpo_config, grpo_generation, train_grpo
from models.runtime import Precision, TrainRuntime
from tasks.fingerprints import stage_fingerprints
from tasks.train import pass_settings, train_settings

GRPO = {"train.algorithm": "grpo", "curate.solver_targets": "verified"}


def _config_arguments(tmp_path, **generation):
    return grpo_config(work_dir=tmp_path, steps=1, batch_size=8, gradient_accumulation_steps=1,
                       learning_rate=1e-4, save_steps=0, seed=0, logging_steps=1,
                       num_generations=4, max_completion_length=4, temperature=1.0, beta=0.0,
                       **generation)


def test_generation_settings_follow_the_rollout_backend():
    assert grpo_generation(load_config(None).rollout) == {}
    rollout = load_config(None, {"rollout.backend": "vllm",
                                 "rollout.gpu_memory_utilization": 0.25}).rollout
    assert grpo_generation(rollout) == {"generation_backend": "vllm",
                                        "vllm_gpu_memory_utilization": 0.25,
                                        "vllm_tensor_parallel_size": 1}


def test_grpo_config_asks_trl_for_colocated_vllm_only_when_told(tmp_path):
    default = _config_arguments(tmp_path)
    assert default.use_vllm is False
    vllm = _config_arguments(tmp_path, **grpo_generation(load_config(
        None, {"rollout.backend": "vllm", "rollout.gpu_memory_utilization": 0.25}).rollout))
    assert vllm.use_vllm is True and vllm.vllm_mode == "colocate"
    assert vllm.vllm_gpu_memory_utilization == 0.25 and vllm.vllm_tensor_parallel_size == 1


def test_vllm_generation_is_refused_on_the_cpu_before_anything_is_built(tmp_path):
    cpu = TrainRuntime(precision=Precision(device="cpu"))
    check_generation("transformers", cpu)  # the CPU path stays
    check_generation("vllm", TrainRuntime(precision=Precision(device="cuda", dtype="bfloat16")))
    with pytest.raises(ValueError, match="needs CUDA") as info:
        train_grpo(base=tmp_path / "no-model", rows=[], reward=lambda **_: [],
                   out_dir=tmp_path / "out", learning_rate=1e-4, batch_size=8, epochs=1,
                   max_steps=1, num_generations=4, temperature=1.0, max_completion_length=4,
                   beta=0.0, seed=0, work_dir=tmp_path / "work", runtime=cpu,
                   generation_backend="vllm")
    assert "\n" not in str(info.value) and "rollout.backend = 'transformers'" in str(info.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_the_config_refuses_vllm_grpo_on_a_cpu_training():
    with pytest.raises(ConfigError) as info:
        load_config(None, {**GRPO, "rollout.backend": "vllm", "train.device": "cpu"})
    message = str(info.value)
    assert "\n" not in message and "train.device = 'cuda'" in message
    load_config(None, {**GRPO, "rollout.backend": "vllm", "train.device": "cuda"})
    load_config(None, {**GRPO, "train.device": "cpu"})  # transformers generation
    load_config(None, {"rollout.backend": "vllm", "train.device": "cpu"})  # SFT


def test_the_train_fingerprint_covers_vllm_generation_and_keeps_the_others():
    def config(**overrides):  # train.device = "auto": the config allows vLLM
        return load_config(None, overrides)

    def settings(round_index=1, **overrides):
        return train_settings(config(**overrides), round_index)

    assert "generation_backend" not in pass_settings(settings(**GRPO), "grpo")
    sft_vllm = settings(**{"rollout.backend": "vllm"})
    assert "generation_backend" not in pass_settings(sft_vllm, "sft")  # SFT samples nothing
    vllm = settings(**GRPO, **{"rollout.backend": "vllm"})
    assert vllm.rollout.backend == "vllm"
    assert pass_settings(vllm, "grpo")["generation_backend"] == "vllm"
    assert vllm.model_copy(update={"rollout": settings(**GRPO).rollout}) == settings(**GRPO)
    assert (stage_fingerprints(config(**GRPO, **{"rollout.backend": "vllm"}))["train", 1]
            != stage_fingerprints(config(**GRPO))["train", 1])
    # the warm-up trains SFT: its settings hold no [rollout]
    assert "rollout" not in WarmupTrainSettings.model_fields
    assert settings(0, **GRPO, **{"rollout.backend": "vllm"}) == settings(0, **GRPO)
