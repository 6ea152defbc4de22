import pytest
from pydantic import ValidationError

from configs import CurateConfig
from domains.arithmetic import ArithmeticDomain
from tasks.curate import (
    curriculum_rows,
    proposer_weight,
    repetition_penalties,
    training_rows,
)
from tasks.curriculum.rewards import (
    band_reward,
    diversity_penalties,
    learnability_reward,
    penalized,
    proposer_reward,
    regret_reward,
    uncertainty_reward,
    variance_reward,
)

P = [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize(
    ("reward", "expected"),
    [
        (variance_reward, [0.0, 0.75, 1.0, 0.75, 0.0]),
        (learnability_reward, [0.0, 0.75, 0.5, 0.25, 0.0]),
        (uncertainty_reward, [0.0, 0.5, 1.0, 0.5, 0.0]),
        (lambda p: band_reward(p, 0.3, 0.8), [0.0, 0.0, 1.0, 1.0, 0.0]),
        (lambda p: band_reward(p, 0.25, 0.75), [0.0, 1.0, 1.0, 1.0, 0.0]),  # edges included
    ],
)
def test_pass_rate_rewards(reward, expected):
    assert [reward(p) for p in P] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [([1.0, 0.0, 1.0], 1.0), ([1.0, 1.0], 0.0), ([0.0], 0.0), ([], 0.0), ([0.2, 0.9, 0.5], 0.7)],
)
def test_regret_is_best_minus_worst(rewards, expected):
    assert regret_reward(rewards) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "pass_rate", "rewards", "expected"),
    [("variance", 0.5, [1.0, 0.0], 1.0), ("learnability", 0.25, [1, 0, 0, 0], 0.75),
     ("uncertainty", 0.75, [1, 1, 1, 0], 0.5), ("band", 0.9, [1.0] * 9 + [0.0], 0.0),
     ("regret", 0.75, [1, 1, 1, 0], 1.0)],
)
def test_proposer_reward_dispatches_by_name(name, pass_rate, rewards, expected):
    assert proposer_reward(name, pass_rate, rewards) == pytest.approx(expected)


def test_unknown_reward_lists_the_choices():
    with pytest.raises(ValueError,
                       match="'novelty' is unknown; choose one of variance, learnability"):
        proposer_reward("novelty", 0.5, [])


@pytest.mark.parametrize(
    ("labels", "expected"),
    [([0, 1, 2, 3], [0.25] * 4), ([0, 0, 2, 0], [0.75, 0.75, 0.25, 0.75]), ([5], [1.0]), ([], [])],
)
def test_diversity_penalty_is_cluster_share_of_batch(labels, expected):
    assert diversity_penalties(labels) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reward", "penalty", "strength", "expected"),
    [(1.0, 0.5, 0.0, 1.0), (1.0, 0.5, 1.0, 0.5), (0.3, 0.5, 1.0, 0.0), (0.75, 0.25, 2.0, 0.25)],
)
def test_penalized_is_clipped_at_zero(reward, penalty, strength, expected):
    assert penalized(reward, penalty, strength) == pytest.approx(expected)


def test_proposer_weight_follows_the_config():
    # default learnability
    assert proposer_weight(0.25, [1, 0, 0, 0], CurateConfig()) == pytest.approx(0.75)
    assert proposer_weight(0.25, [1, 0, 0, 0], CurateConfig(proposer_reward="learnability")) == 0.75
    band = CurateConfig(proposer_reward="band", proposer_band_low=0.2, proposer_band_high=0.3)
    assert proposer_weight(0.25, [], band) == 1.0
    penalised = CurateConfig(proposer_reward="band", proposer_band_low=0.2, proposer_band_high=0.3,
                             diversity={"penalty": 2.0})
    assert proposer_weight(0.25, [], penalised, penalty=0.1) == pytest.approx(0.8)


def test_proposer_band_must_be_ordered():
    with pytest.raises(ValidationError,
                       match="proposer_band_low = 0.9 must be <= proposer_band_high = 0.1"):
        CurateConfig(proposer_band_low=0.9, proposer_band_high=0.1)


def _round():
    """Two problems, 4 samples each: '12+34' right 1 of 4 (p 0.25), '56+78' right 3 of 4
    (p 0.75)."""
    domain = ArithmeticDomain()
    problems, rollouts, verdicts = [], [], []
    for pid, text, right in [("a", "12+34", 1), ("b", "56+78", 3)]:
        problems.append({"problem_id": pid, "run_id": "r", "round": 1, "text": text, "level": 3,
                         "reference": domain.parse(text).reference, "source": "proposer",
                         "proposal_id": "q" + pid})
        for i in range(4):
            rollouts.append({"rollout_id": f"{pid}{i}", "problem_id": pid, "sample_index": i,
                             "prompt": "<solve>", "completion": "x"})
            verdicts.append({"rollout_id": f"{pid}{i}", "problem_id": pid,
                             "reward": float(i < right)})
    return domain, problems, rollouts, verdicts


@pytest.mark.parametrize(
    ("config", "weights"),
    [(CurateConfig(proposer_reward="variance"), {"a": 0.75, "b": 0.75}),
     (CurateConfig(proposer_reward="learnability"), {"b": 0.25, "a": 0.75}),
     (CurateConfig(proposer_reward="band", proposer_band_low=0.5, proposer_band_high=1.0),
      {"b": 1.0, "a": 0.0}),
     (CurateConfig(proposer_reward="regret"), {"a": 1.0, "b": 1.0})],
)
def test_training_rows_weight_proposer_rows_by_the_chosen_reward(config, weights):
    domain, problems, rollouts, verdicts = _round()
    curriculum = curriculum_rows(problems, verdicts, config, warmup=False)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, config, warmup=False)
    proposer = {r["problem_id"]: r["weight"] for r in rows if r["role"] == "proposer"}
    assert proposer == pytest.approx(weights)
    assert (sorted(proposer, key=lambda pid: -proposer[pid])
            == sorted(weights, key=lambda pid: -weights[pid]))


def test_repeated_proposals_lower_the_proposer_weight():
    domain, problems, rollouts, verdicts = _round()
    config = CurateConfig(proposer_reward="regret", diversity={"penalty": 1.0, "threshold": 0.35})
    # the proposer wrote 12+34 three times, a near duplicate (12+35, J = 0.5) once, 56+78 once,
    # garbage once
    samples = ["12+34", "12+34", " 12+34", "12+35", "56+78", "?"]
    proposals = [{"text": t, "problem_id": domain.parse(t).text if t != "?" else None}
                 for t in samples]
    id_of = {"12+34": "a", "56+78": "b", "12+35": "c"}
    for p in proposals:
        p["problem_id"] = id_of.get(p["problem_id"])
    penalties = repetition_penalties(domain, proposals, config)
    assert penalties == pytest.approx({"a": 4 / 5, "c": 4 / 5, "b": 1 / 5})
    curriculum = curriculum_rows(problems, verdicts, config, warmup=False)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, config, warmup=False,
                         penalties=penalties)
    proposer = {r["problem_id"]: r["weight"] for r in rows if r["role"] == "proposer"}
    assert proposer == pytest.approx({"a": 1 - 4 / 5, "b": 1 - 1 / 5})


def test_shape_penalty_counts_problems_of_one_form_as_repeats():
    domain = ArithmeticDomain()
    assert domain.shape("512-87") == domain.shape("734-21") == "000-00" != domain.shape("12+34")
    proposals = [{"text": t, "problem_id": pid}
                 for t, pid in [("512-87", "a"), ("734-21", "b"), ("12+34", "c")]]
    by_text = repetition_penalties(domain, proposals, CurateConfig(diversity={"penalty": 1.0}))
    by_shape = repetition_penalties(domain, proposals,
                                    CurateConfig(diversity={"penalty": 1.0, "on": "shape"}))
    assert by_text == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    assert by_shape == pytest.approx({"a": 2 / 3, "b": 2 / 3, "c": 1 / 3})
