import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from configs import ConfigError, RunConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_cpu_file_equals_builtin_defaults():
    assert load_config(ROOT / "configs" / "tiny-cpu.toml") == RunConfig()
    assert load_config(None) == RunConfig()


def test_every_default_is_spelled_out_in_tiny_cpu_toml():
    data = tomllib.loads((ROOT / "configs" / "tiny-cpu.toml").read_text())

    def check(written, defaults, where):
        assert set(written) == {k for k, v in defaults.items() if v is not None}, where
        for key, value in defaults.items():
            if isinstance(value, dict):
                check(written[key], value, f"{where}.{key}".lstrip("."))
            elif value is not None:
                assert written[key] == value, f"{where}.{key}"

    check(data, RunConfig().model_dump(), "")


def _sections(model, where=""):
    """(dotted name, field) of every field of `model` and of its sections, recursively."""
    for name, info in model.model_fields.items():
        yield f"{where}{name}", info
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            yield from _sections(info.annotation, f"{where}{name}.")


def test_every_config_field_has_a_description():
    missing = [name for name, info in _sections(RunConfig) if not info.description]
    assert not missing, missing


def test_algorithm_settings_are_nested_in_sections_of_their_own():
    nested = {name for name, info in _sections(RunConfig)
              if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
              and "." in name}
    assert nested == {"synthesize.bandit", "curate.diversity", "train.warmup", "train.grpo",
                      "train.dpo", "train.proposer", "train.lora", "domain.reasoning_gym",
                      "domain.dataset", "verify.judge", "verify.reward_model", "proposer.model"}


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
        ("[curate]\nmin_pass_rate = 0.9\nmax_pass_rate = 0.1",
         "min_pass_rate = 0.9 must be < max_pass_rate"),
        ("[curate]\nsolver_targets = 'rationalize'\n[train]\nalgorithm = 'grpo'",
         "with train.algorithm = 'grpo' set curate.solver_targets = 'verified'"),
        ("[train]\nalgorithm = 'dpo'",
         "(the default) trains references by SFT; with train.algorithm = 'dpo'"),
        ("[curate]\nsolver_targets = 'rationalize'\n[verify]\nlabels = 'majority'",
         "with verify.labels = 'majority' set curate.solver_targets = 'verified'"),
        ("[train.proposer]\nalgorithm = 'grpo'",
         "train.proposer.algorithm = 'grpo' with an SFT solver needs "
         "train.replay_proposer_rows = true"),
        ("[train.grpo]\nbeta = -1",
         "`train.grpo.beta` = -1: Input should be greater than or equal to 0"),
        ("[train]\ngrpo_beta = 0.1", "unknown key `train.grpo_beta`"),
        ("[curate]\nsolver_targets = 'verified'\n[train]\nalgorithm = 'grpo'\nbatch_size = 12",
         "train.batch_size = 12 must be a multiple of train.grpo.num_generations = 8"),
        ("[train]\noom_retry_batch_size = 5",
         "oom_retry_batch_size = 5 must be smaller than batch_size = 64"),
        ("[synthesize.bandit]\nalpha = 0",
         "`synthesize.bandit.alpha` = 0: Input should be greater than 0"),
        ("[curate.diversity]\non = 'words'", "`curate.diversity.on` = 'words'"),
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


@pytest.mark.parametrize(
    ("data", "needle"),
    [(b"rounds = 2\nseed = \xff\n", "not UTF-8 text at byte offset 18 (line 2): 0xff"),
     (b"\xef\xbb\xbfrounds = \"\xe9\"\n", "not UTF-8 text at byte offset 13 (line 1): 0xe9"),
     (b"rounds = 2\x00\n", "not valid TOML: Expected newline or end of document after a "
                               "statement (at line 1, column 11)"),
     (b"a = " + b"[" * 100_000 + b"]" * 100_000, "not valid TOML: values nested too deeply")])
def test_a_config_that_is_not_utf8_toml_names_file_and_offset(tmp_path, data, needle):
    path = tmp_path / "bad.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"config error in {path}: ") and needle in str(info.value)
    assert "\n" not in str(info.value)


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfrounds = 2\n")
    assert load_config(path).rounds == 2


def test_an_unreadable_config_names_the_file(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    path = tmp_path / "locked.toml"
    path.write_text("rounds = 2\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match=f"cannot read {path} \\(Permission denied\\)"):
        load_config(path)


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("domain.dataset.max_question_chars", 0, "greater than or equal to 1"),
    ("domain.dataset.max_answer_chars", 2_000_000, "less than or equal to 1000000")])
def test_the_length_limits_are_ranged(key, value, needle):
    with pytest.raises(ConfigError, match=f"`{key}` = {value}: Input should be {needle}"):
        load_config(None, {key: value})


def test_overrides_apply_dotted_keys():
    cfg = load_config(None, {"rounds": 1, "rollout.samples_per_problem": 2})
    assert cfg.rounds == 1
    assert cfg.rollout.samples_per_problem == 2


def test_overrides_reach_nested_sections():
    cfg = load_config(None, {"train.grpo.beta": 0.1, "curate.diversity.penalty": 1.0,
                             "synthesize.bandit.alpha": 0.2, "train.warmup.max_steps": 7})
    assert (cfg.train.grpo.beta, cfg.curate.diversity.penalty) == (0.1, 1.0)
    assert (cfg.synthesize.bandit.alpha, cfg.train.warmup.max_steps) == (0.2, 7)
    assert cfg.train.grpo.num_generations == 8  # the rest of the section keeps its defaults


def test_a_stored_config_reads_back_through_the_models():
    from configs import validate_config

    cfg = load_config(ROOT / "configs" / "r-zero.toml")
    assert validate_config(cfg.model_dump(mode="json"), "stored") == cfg
