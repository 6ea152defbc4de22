"""The proposer's online reward: the solver answers each proposed problem; its pass rate is
rewarded."""

import pytest

from configs import CurateConfig
from domains.arithmetic import ArithmeticDomain
from tasks.curriculum.online import REWARD_NAME, online_proposer_reward

domain = ArithmeticDomain()


def band(reward, **diversity):
    """The curate settings the online reward reads: its reward and the diversity penalty."""
    return CurateConfig(proposer_reward=reward, diversity=diversity)


class FakeSolver:
    """Answers `right` of n samples correctly per prompt (by problem text); records its calls."""

    def __init__(self, right: dict[str, int]):
        self.right, self.calls = right, []

    def __call__(self, prompts, n, seed):
        self.calls.append((list(prompts), n, seed))
        out = []
        for prompt in prompts:
            text = prompt.removeprefix("<solve>").removesuffix("=")
            truth = str(domain.parse(text).reference)
            k = self.right.get(text, 0)
            out.append([truth] * k + ["x"] * (n - k))
        return out


@pytest.mark.parametrize(("name", "right", "expected"), [
    ("learnability", 2, 0.75),   # p = 1/4: 1 - p
    ("learnability", 8, 0.0),    # always solved
    ("learnability", 0, 0.0),    # never solved
    ("variance", 4, 1.0),        # p = 1/2
    ("uncertainty", 6, 0.5),     # p = 3/4
    ("band", 4, 1.0),            # 0.3 <= 1/2 <= 0.8
    ("band", 1, 0.0),
])
def test_reward_is_the_proposer_reward_of_the_solvers_pass_rate(name, right, expected):
    solver = FakeSolver({"37+5": right})
    reward = online_proposer_reward(domain, solver, band(name), samples=8, seed=3)
    assert reward.__name__ == REWARD_NAME
    assert reward(completions=["37+5"], prompts=["<propose>L2:"]) == [pytest.approx(expected)]
    assert solver.calls == [(["<solve>37+5="], 8, 3)]


def test_unparseable_samples_earn_zero_and_are_not_sent_to_the_solver():
    solver = FakeSolver({"12+34": 2})
    reward = online_proposer_reward(domain, solver, band("learnability"), samples=4, seed=0)
    assert reward(completions=["12+", "12+34", "", "hello"]) == [0.0, 0.5, 0.0, 0.0]
    assert solver.calls[0][0] == ["<solve>12+34="]


def test_nothing_valid_asks_the_solver_nothing():
    solver = FakeSolver({})
    reward = online_proposer_reward(domain, solver, band("variance"), samples=4, seed=0)
    assert reward(completions=["+", "x"]) == [0.0, 0.0]
    assert solver.calls == []


def test_every_call_samples_the_solver_with_a_new_seed():
    solver = FakeSolver({"7*8": 1})
    reward = online_proposer_reward(domain, solver, band("variance"), samples=2, seed=10)
    for _ in range(3):
        reward(completions=["7*8"])
    assert [seed for _, _, seed in solver.calls] == [10, 11, 12]


def test_diversity_penalty_lowers_repeated_problems_within_the_batch():
    solver = FakeSolver({"12+34": 4, "7*8": 4})
    plain = online_proposer_reward(domain, solver, band("variance"), samples=8, seed=0)
    repetition = band("variance", penalty=1.0, threshold=0.8)
    penalised = online_proposer_reward(domain, solver, repetition, samples=8, seed=0)
    batch = ["12+34", "12+34", "12+34", "7*8"]
    assert plain(completions=batch) == [1.0, 1.0, 1.0, 1.0]
    got = penalised(completions=batch)
    assert got[:3] == [pytest.approx(1.0 - 3 / 4)] * 3  # cluster of 3 in a batch of 4
    assert got[3] == pytest.approx(1.0 - 1 / 4)


def test_majority_labels_reward_agreement_with_the_vote_not_the_reference():
    def solve(prompts, n, seed):
        return [["5", "5", "5", "7"] for _ in prompts]  # 37+5 = 42: the vote is wrong

    by_vote = online_proposer_reward(domain, solve, band("uncertainty"), samples=4, seed=0,
                                     labels="majority")
    by_reference = online_proposer_reward(domain, solve, band("uncertainty"), samples=4, seed=0)
    assert by_vote(completions=["37+5"]) == [pytest.approx(0.5)]  # agreement 3/4
    assert by_reference(completions=["37+5"]) == [0.0]            # p = 0
