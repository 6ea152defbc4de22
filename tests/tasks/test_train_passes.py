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
    from tasks.train import SUB_SECTIONS, train_settings

    def settings(warmup=False, **train):
        overrides = {"curate.solver_targets": "verified",
                     **{f"train.{k}": v for k, v in train.items()}}
        return train_settings(load_config(None, overrides), warmup=warmup)

    nested = {name for name, value in load_config(None).train.model_dump().items()
              if isinstance(value, dict)}
    assert nested == SUB_SECTIONS
    sft = settings()
    assert "save_steps" not in sft["train"] and "oom_retry_batch_size" not in sft["train"]
    assert settings(save_steps=7) == sft  # operational: never changes a result
    assert sft["train"]["replay_proposer_rows"] is False and sft["train"]["learning_rate"] == 0.002
    # every [train] key counts, whatever its value
    assert settings(replay_proposer_rows=True) != sft
    # SFT for both roles reads no [train.grpo], [train.dpo], [train.proposer], nor [train.warmup]
    assert not SUB_SECTIONS & set(sft["train"]) and "online_reward" not in sft
    for unread, value in [("grpo.beta", 0.5), ("dpo.beta", 0.5), ("proposer.max_steps", 7),
                          ("warmup.learning_rate", 0.5)]:
        assert settings(**{unread: value}) == sft, unread
    grpo = settings(algorithm="grpo")
    assert grpo["train"]["grpo"]["num_generations"] == 8 and "dpo" not in grpo["train"]
    assert settings(algorithm="grpo", **{"grpo.beta": 0.5}) != grpo
    dpo = settings(algorithm="dpo")
    assert set(dpo["train"]) & SUB_SECTIONS == {"dpo"}
    proposer = settings(replay_proposer_rows=True, **{"proposer.algorithm": "grpo"})
    assert set(proposer["train"]) & SUB_SECTIONS == {"grpo", "proposer"}
    assert proposer["train"]["proposer"]["samples"] == 8
    assert settings(replay_proposer_rows=True, **{"proposer.algorithm": "grpo",
                                                  "proposer.max_steps": 7}) != proposer
    # the online reward samples the solver and scores with curate's reward
    assert set(proposer["online_reward"]) == {"rollout", "curate", "labels",
                                              "max_completion_length"}
    # the warm-up reads [train.warmup] only, so arms that differ in an algorithm section share it
    warmup = settings(warmup=True)
    assert set(warmup["train"]) & SUB_SECTIONS == {"warmup"} and warmup["warmup"] is True
    assert settings(warmup=True, replay_proposer_rows=True, **{"proposer.algorithm": "grpo",
                                                               "grpo.beta": 0.5}) \
        == settings(warmup=True, replay_proposer_rows=True)
    assert settings(warmup=True, **{"warmup.max_steps": 7}) != warmup


def _train_rows(round_index: int, count: int, role=None) -> list[dict]:
    return [{"train_row_id": f"t{round_index}-{i}", "run_id": "r", "round": round_index,
             "role": role or ("proposer" if i % 3 == 0 else "solver"), "prompt": f"q{i}",
             "completion": f"a{i}", "rejected": None, "weight": 1.0 + i, "problem_id": f"p{i}",
             "rollout_id": None if i % 2 else f"r{i}", "proposal_id": f"s{i}"}
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
