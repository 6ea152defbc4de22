"""The train stage's passes: which trainer gets which rows."""

from flywheel.tasks.train import plan_passes


def test_proposer_grpo_takes_the_proposer_rows_out_of_every_other_pass():
    solver = {"role": "solver", "weight": 1.0, "rejected": None}
    pair = {"role": "solver", "weight": 1.0, "rejected": "3"}
    proposer = {"role": "proposer", "weight": 0.5, "rejected": None}
    rows = [solver, pair, proposer]
    assert plan_passes("sft", "sft", rows) == [("sft", rows)]
    assert plan_passes("sft", "grpo", rows) == [("sft", [solver, pair]), ("proposer-grpo", [proposer])]
    assert plan_passes("grpo", "grpo", rows) == [("grpo", [solver, pair]), ("proposer-grpo", [proposer])]
    assert plan_passes("dpo", "grpo", rows) == [("dpo", [pair]), ("proposer-grpo", [proposer]),
                                                ("sft", [solver])]
    assert plan_passes("grpo", "sft", rows) == [("grpo", [solver, pair]), ("sft", [proposer])]


def test_proposer_grpo_settings_enter_the_fingerprint_only_when_the_proposer_uses_grpo():
    from flywheel.config import load_config
    from flywheel.tasks.train import fingerprinted_settings

    def settings(**train):
        return fingerprinted_settings(load_config(None, {f"train.{k}": v for k, v in train.items()})
                                      .slice("train")["train"])

    sft = settings()
    assert not any(key.startswith("proposer_") for key in sft)  # runs made before the keys existed
    assert "save_steps" not in sft and "learning_rate" in sft
    assert settings(proposer_max_steps=7) == sft
    grpo = settings(proposer_algorithm="grpo")
    assert grpo["proposer_algorithm"] == "grpo" and grpo["proposer_samples"] == 8
    assert settings(proposer_algorithm="grpo", proposer_max_steps=7) != grpo
    warmup = load_config(None, {"train.proposer_algorithm": "grpo"}).slice("train")["train"]
    assert fingerprinted_settings(warmup, warmup=True) == sft  # the warm-up trains no proposer by GRPO
