"""The train stage's passes: which trainer gets which rows."""

from functools import partial

from models import passes
from tasks.rows import split_for

plan_passes = partial(passes.plan_passes, split=split_for)


def test_proposer_grpo_takes_this_rounds_proposer_rows_out_of_the_other_passes():
    solver = {"role": "solver", "weight": 1.0, "rejected": None, "round": 1}
    pair = {"role": "solver", "weight": 1.0, "rejected": "3", "round": 1}
    proposer = {"role": "proposer", "weight": 0.5, "rejected": None, "round": 1}
    rows = [solver, pair, proposer]
    assert plan_passes("sft", "sft", rows, 1) == [("sft", rows)]
    assert plan_passes("sft", "grpo", rows, 1) == [("sft", [solver, pair]), ("proposer-grpo", [proposer])]
    assert plan_passes("grpo", "grpo", rows, 1) == [("grpo", [solver, pair]), ("proposer-grpo", [proposer])]
    assert plan_passes("dpo", "grpo", rows, 1) == [("dpo", [pair]), ("proposer-grpo", [proposer]),
                                                   ("sft", [solver])]
    assert plan_passes("grpo", "sft", rows, 1) == [("grpo", [solver, pair]), ("sft", [proposer])]


def test_replayed_proposer_rows_stay_in_the_solvers_sft_pass_only_under_sft():
    solver = {"role": "solver", "weight": 1.0, "rejected": None, "round": 2}
    new = {"role": "proposer", "weight": 0.5, "rejected": None, "round": 2}
    replayed = {"role": "proposer", "weight": 1.0, "rejected": None, "round": 0}
    rows = [solver, new, replayed]
    assert plan_passes("sft", "grpo", rows, 2) == [("sft", [solver, replayed]),
                                                   ("proposer-grpo", [new, replayed])]
    assert plan_passes("grpo", "grpo", rows, 2) == [("grpo", [solver]), ("proposer-grpo", [new, replayed])]
    assert plan_passes("dpo", "grpo", rows, 2) == [("proposer-grpo", [new, replayed]), ("sft", [solver])]


def test_proposer_grpo_settings_enter_the_fingerprint_only_when_the_proposer_uses_grpo():
    from configs import load_config
    from tasks.train import fingerprinted_settings

    def settings(**train):
        return fingerprinted_settings(load_config(None, {f"train.{k}": v for k, v in train.items()})
                                      .slice("train")["train"])

    sft = settings()
    assert not any(key.startswith("proposer_") for key in sft)  # runs made before the keys existed
    assert "save_steps" not in sft and "learning_rate" in sft
    assert settings(proposer_max_steps=7) == sft
    assert "replay_proposer_rows" in sft and "replay_proposer_rows" not in settings(replay_proposer_rows=True)
    grpo = settings(proposer_algorithm="grpo", replay_proposer_rows=True)
    assert grpo["proposer_algorithm"] == "grpo" and grpo["proposer_samples"] == 8
    assert settings(proposer_algorithm="grpo", replay_proposer_rows=True, proposer_max_steps=7) != grpo
    warmup = load_config(None, {"train.proposer_algorithm": "grpo", "train.replay_proposer_rows": True})
    # the warm-up trains no proposer by GRPO
    assert fingerprinted_settings(warmup.slice("train")["train"], warmup=True) == settings(replay_proposer_rows=True)


def test_replay_can_leave_out_earlier_proposer_rows():
    from tasks.train import with_replay

    earlier = [[{"id": f"s{i}", "role": "solver"} for i in range(50)]
               + [{"id": f"p{i}", "role": "proposer"} for i in range(50)]]
    own = [{"id": f"n{i}", "role": "solver"} for i in range(20)]
    both = with_replay(own, earlier, ratio=2.0, seed=0)
    solver_only = with_replay(own, earlier, ratio=2.0, seed=0, proposer_rows=False)
    assert len(both) == len(solver_only) == 60
    assert any(r["role"] == "proposer" for r in both[20:])
    assert {r["role"] for r in solver_only[20:]} == {"solver"} and solver_only[:20] == own
