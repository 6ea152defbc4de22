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
