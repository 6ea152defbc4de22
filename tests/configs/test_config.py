import tomllib
from pathlib import Path

import pytest

from configs import ConfigError, RunConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_cpu_file_equals_builtin_defaults():
    assert load_config(ROOT / "configs" / "tiny-cpu.toml") == RunConfig()
    assert load_config(None) == RunConfig()


def test_every_default_is_spelled_out_in_tiny_cpu_toml():
    data = tomllib.loads((ROOT / "configs" / "tiny-cpu.toml").read_text())
    dumped = RunConfig().model_dump()
    for section, values in dumped.items():
        if isinstance(values, dict):
            assert set(data[section]) == {k for k, v in values.items() if v is not None}, section
        else:
            assert data[section] == values


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("roundz = 3", "unknown key `roundz`"),
        ("rounds = -1", "`rounds` = -1: Input should be greater than or equal to 0"),
        ("[train]\nlearning_rate = 0", "`train.learning_rate` = 0"),
        ("[rollout]\nbackend = 'tpu'", "`rollout.backend` = 'tpu'"),
        ("[rollout]\ntensor_parallel_size = 2", "tensor_parallel_size = 2 needs backend = 'vllm'"),
        ("[rollout]\ndtype = 'int8'", "`rollout.dtype` = 'int8'"),
        ("[rollout]\ngpu_memory_utilization = 1.5", "`rollout.gpu_memory_utilization` = 1.5"),
        ("[curate]\nmin_pass_rate = 0.9\nmax_pass_rate = 0.1", "min_pass_rate = 0.9 must be < max_pass_rate"),
        ("[curate]\nsolver_targets = 'rationalize'\n[train]\nalgorithm = 'grpo'",
         "with train.algorithm = 'grpo' set curate.solver_targets = 'verified'"),
        ("[train]\nalgorithm = 'dpo'", "(the default) trains references by SFT; with train.algorithm = 'dpo'"),
        ("[curate]\nsolver_targets = 'rationalize'\n[verify]\nlabels = 'majority'",
         "with verify.labels = 'majority' set curate.solver_targets = 'verified'"),
        ("[train]\nproposer_algorithm = 'grpo'", "needs train.replay_proposer_rows = true"),
        ("rounds = [", "not valid TOML"),
    ],
)
def test_bad_config_names_key_and_value(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert needle in message
    assert str(path) in message
    assert "\n" not in message


def test_missing_file_names_path(tmp_path):
    with pytest.raises(ConfigError, match="file not found: .*nope.toml"):
        load_config(tmp_path / "nope.toml")


def test_overrides_apply_dotted_keys():
    cfg = load_config(None, {"rounds": 1, "rollout.samples_per_problem": 2})
    assert cfg.rounds == 1
    assert cfg.rollout.samples_per_problem == 2
