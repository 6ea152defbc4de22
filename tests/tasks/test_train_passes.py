"""The train stage's passes: which trainer gets which rows."""

from functools import partial

import pytest

from models import passes
from tasks.rows import split_for

plan_passes = partial(passes.plan_passes, split=split_for)


def test_proposer_grpo_takes_this_rounds_proposer_rows_out_of_the_other_passes():
    solver = {"role": "solver", "weight": 1.0, "rejected": None, "round": 1}
    pair = {"role": "solver", "weight": 1.0, "rejected": "3", "round": 1}
    proposer = {"role": "proposer", "weight": 0.5, "rejected": None, "round": 1}
    rows = [solver, pair, proposer]
    assert plan_passes("sft", "sft", rows, 1) == [("sft", rows)]
    assert plan_passes("sft", "grpo", rows, 1) == [("sft", [solver, pair]),
                                                   ("proposer-grpo", [proposer])]
    assert plan_passes("grpo", "grpo", rows, 1) == [("grpo", [solver, pair]),
                                                    ("proposer-grpo", [proposer])]
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
    assert plan_passes("grpo", "grpo", rows, 2) == [("grpo", [solver]),
                                                    ("proposer-grpo", [new, replayed])]
    assert plan_passes("dpo", "grpo", rows, 2) == [("proposer-grpo", [new, replayed]),
                                                   ("sft", [solver])]


def test_train_fingerprint_covers_the_sub_sections_its_mode_reads():
    from configs import load_config
    from configs.settings import TrainOperations, TrainSettings, WarmupTrainSettings
    from tasks.fingerprints import stage_fingerprints
    from tasks.train import train_settings

    def config(**train):
        return load_config(None, {"curate.solver_targets": "verified",
                                  **{f"train.{k}": v for k, v in train.items()}})

    def fingerprints(**train):
        """(round 0's, round 1's) train fingerprints."""
        out = stage_fingerprints(config(**train), rounds=1)
        return out["train", 0], out["train", 1]

    nested = {name for name, value in load_config(None).train.model_dump().items()
              if isinstance(value, dict)}
    assert nested == {"warmup", "grpo", "dpo", "proposer", "lora"}
    warmup_fields = set(WarmupTrainSettings.model_fields)
    round_fields = set(TrainSettings.model_fields)
    assert nested <= round_fields  # rounds >= 1 hold every sub-section, whatever the algorithm
    # operational keys are in no train settings and never change a result
    assert set(TrainOperations.model_fields) == {"save_steps", "oom_retry_batch_size"}
    assert not set(TrainOperations.model_fields) & (warmup_fields | round_fields)
    sft_config = config()
    assert stage_fingerprints(config(save_steps=7), rounds=1) == stage_fingerprints(sft_config,
                                                                                   rounds=1)
    sft = train_settings(sft_config, 1)
    assert isinstance(sft, TrainSettings)
    assert sft.replay_proposer_rows is False and sft.learning_rate == 0.002
    base = fingerprints()
    # every [train] key counts, whatever its value
    assert fingerprints(replay_proposer_rows=True)[1] != base[1]
    # rounds >= 1 fingerprint the whole settings object: a change of any algorithm section
    # reruns the round's train stage, SFT or not
    for key, value in [("grpo.beta", 0.5), ("dpo.beta", 0.5), ("proposer.max_steps", 7)]:
        assert fingerprints(**{key: value})[1] != base[1], key
    grpo = train_settings(config(algorithm="grpo"), 1)
    assert grpo.algorithm == "grpo" and grpo.grpo.num_generations == 8
    assert fingerprints(algorithm="grpo")[1] != base[1]
    assert fingerprints(algorithm="grpo", **{"grpo.beta": 0.5})[1] \
        != fingerprints(algorithm="grpo")[1]
    proposer = train_settings(config(replay_proposer_rows=True, **{"proposer.algorithm": "grpo"}),
                              1)
    assert proposer.proposer.algorithm == "grpo" and proposer.proposer.samples == 8
    assert fingerprints(replay_proposer_rows=True, **{"proposer.algorithm": "grpo",
                                                      "proposer.max_steps": 7})[1] \
        != fingerprints(replay_proposer_rows=True, **{"proposer.algorithm": "grpo"})[1]
    # the online reward samples the solver and scores with curate's reward
    assert {"rollout", "curate", "labels", "proposal_max_new_tokens"} <= round_fields
    assert proposer.rollout == sft_config.rollout and proposer.curate == sft_config.curate
    assert proposer.proposal_max_new_tokens == sft_config.synthesize.max_new_tokens
    # the warm-up reads [train.warmup] (and LoRA) only of the sub-sections, so arms that differ
    # in an algorithm section share it
    assert warmup_fields & nested == {"warmup", "lora"}
    assert not warmup_fields & {"algorithm", "learning_rate", "epochs", "max_steps", "rollout",
                                "curate", "labels", "proposal_max_new_tokens"}
    assert type(train_settings(sft_config, 0)) is WarmupTrainSettings
    assert fingerprints(**{"grpo.beta": 0.5, "dpo.beta": 0.5, "proposer.max_steps": 7,
                           "learning_rate": 0.5, "epochs": 3.0})[0] == base[0]
    # train.algorithm is no warm-up train setting (round 0's curate reads it: the rows' form)
    assert train_settings(config(algorithm="grpo"), 0) == train_settings(sft_config, 0)
    assert fingerprints(replay_proposer_rows=True, **{"proposer.algorithm": "grpo",
                                                      "grpo.beta": 0.5})[0] \
        == fingerprints(replay_proposer_rows=True)[0]
    assert fingerprints(**{"warmup.max_steps": 7})[0] != base[0]
    assert fingerprints(**{"warmup.learning_rate": 0.5})[0] != base[0]


def _train_rows(round_index: int, count: int, role=None) -> list[dict]:
    return [{"train_row_id": f"t{round_index}-{i}", "run_id": "r", "round": round_index,
             "role": role or ("proposer" if i % 3 == 0 else "solver"), "prompt": f"q{i}",
             "completion": f"a{i}", "rejected": None, "weight": 1.0 + i, "problem_id": f"p{i}",
             "rollout_id": None if i % 2 else f"r{i}", "proposal_id": f"s{i}", "problem": None}
            for i in range(count)]


def test_replay_can_leave_out_earlier_proposer_rows(tmp_path):
    from storage.datasets import write_atomic
    from tasks.train import replayed_rows

    earlier = _train_rows(0, 50, "solver") + _train_rows(1, 50, "proposer")
    path = write_atomic("train_rows", earlier, tmp_path / "train.parquet").path
    own = _train_rows(2, 20, "solver")
    both = own + replayed_rows([path], len(own), ratio=2.0, seed=0)
    solver_only = own + replayed_rows([path], len(own), ratio=2.0, seed=0, proposer_rows=False)
    assert len(both) == len(solver_only) == 60
    assert any(r["role"] == "proposer" for r in both[20:])
    assert {r["role"] for r in solver_only[20:]} == {"solver"} and solver_only[:20] == own


@pytest.mark.parametrize("proposer_rows", [True, False])
def test_replayed_rows_read_from_files_are_the_pool_rows_replay_indices_draw(tmp_path,
                                                                              proposer_rows):
    from storage.datasets import write_atomic
    from storage.seeds import replay_indices
    from tasks.train import replayed_rows

    earlier = [_train_rows(0, 40), _train_rows(1, 25)]
    paths = [write_atomic("train_rows", part, tmp_path / f"train-{k}.parquet").path
             for k, part in enumerate(earlier)]
    own = _train_rows(2, 30)
    pool = [r for part in earlier for r in part if proposer_rows or r["role"] != "proposer"]
    expected = [pool[i] for i in replay_indices(len(pool), len(own), ratio=0.5, seed=7)]
    got = replayed_rows(paths, len(own), ratio=0.5, seed=7, proposer_rows=proposer_rows)
    assert got == expected and len(got) == 15
    assert replayed_rows([], len(own), ratio=0.5, seed=7) == []
