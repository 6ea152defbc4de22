"""The promotion gate's paired tests (tasks/promotion_tests.py): known values, calibration under
"no difference", power against a real gain, determinism."""

from __future__ import annotations

import random
from statistics import NormalDist

import pytest

from tasks.promotion_tests import mcnemar, mcnemar_p_value, newcombe_interval, paired_bootstrap

SEEDS = range(1000)
SAMPLES = 2000  # per bootstrap here (the config's default is 10000): 1000 seeds stay fast


def flipped(seed: int, up: float, down: float, items: int = 200) -> tuple[list[bool], list[bool]]:
    """(candidate, incumbent): the incumbent passes each item with probability 1/2; the candidate
    turns each failed item into a pass with probability `up`, each pass into a fail with `down`."""
    rng = random.Random(seed)
    incumbent = [rng.random() < 0.5 for _ in range(items)]
    candidate = [rng.random() >= down if ok else rng.random() < up for ok in incumbent]
    return candidate, incumbent


def test_mcnemar_p_value_matches_the_binomial_tail():
    # 10 items only the candidate passes, 2 only the incumbent: P(X >= 10), X ~ Bin(12, 1/2)
    assert mcnemar_p_value(10, 2) == (66 + 12 + 1) / 4096
    assert mcnemar_p_value(0, 0) == 1.0
    assert mcnemar_p_value(5, 5) == pytest.approx(638 / 1024)
    test = mcnemar([True] * 10 + [False] * 2 + [True] * 8, [False] * 10 + [True] * 2 + [True] * 8)
    assert (test.difference, test.p_value, test.items) == (0.4, 79 / 4096, 20)
    assert test.passed and test.low < 0.4 < test.high


def test_newcombe_interval_matches_a_published_example():
    # Cavo et al. 2012 in Fagerland, Lydersen & Laake, chapter 8: -0.0621 (95% CI -0.1186 to
    # -0.0046), as R's contingencytables::Newcombe_square_and_add_CI_paired_2x2 prints it
    low, high = newcombe_interval(59, 6, 16, 80, NormalDist().inv_cdf(0.975))
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)
    low, high = newcombe_interval(10, 0, 0, 10, 1.645)  # nothing discordant: still an interval
    assert low < 0 < high


@pytest.mark.parametrize("method", ["paired_bootstrap", "mcnemar"])
def test_an_equal_candidate_is_not_promoted_as_a_gain(method):
    """About 10 random flips each way: the false-promotion rate stays near alpha."""
    def run(candidate, incumbent):
        if method == "mcnemar":
            return mcnemar(candidate, incumbent)
        return paired_bootstrap(candidate, incumbent, samples=SAMPLES)
    promoted = sum(run(*flipped(seed, up=0.1, down=0.1)).passed for seed in SEEDS)
    assert promoted <= 0.05 * len(SEEDS), promoted


@pytest.mark.parametrize("method", ["paired_bootstrap", "mcnemar"])
def test_a_real_gain_is_promoted(method):
    """+0.15 expected on 200 items (fail -> pass 0.4, pass -> fail 0.1)."""
    def run(candidate, incumbent):
        if method == "mcnemar":
            return mcnemar(candidate, incumbent)
        return paired_bootstrap(candidate, incumbent, samples=SAMPLES)
    promoted = sum(run(*flipped(seed, up=0.4, down=0.1)).passed for seed in SEEDS)
    assert promoted >= 0.95 * len(SEEDS), promoted


def test_non_inferiority_bound():
    # exactly 10 flips each way: no gain, but clearly within a 0.05 margin
    candidate, incumbent = [True] * 10 + [False] * 10 + [True] * 90 + [False] * 90, \
        [False] * 10 + [True] * 10 + [True] * 90 + [False] * 90
    assert not paired_bootstrap(candidate, incumbent).passed
    within = paired_bootstrap(candidate, incumbent, bound=-0.05)
    assert within.passed and within.difference == 0 and within.low > -0.05
    # 10 items lost, none gained: 0.05 worse, not shown to be within a 0.05 margin
    worse = paired_bootstrap([False] * 10 + incumbent[10:], [True] * 10 + incumbent[10:],
                             bound=-0.05)
    assert worse.difference == -0.05 and not worse.passed


def test_same_inputs_same_answer():
    candidate, incumbent = flipped(7, up=0.2, down=0.1)
    assert paired_bootstrap(candidate, incumbent) == paired_bootstrap(candidate, incumbent)
    assert mcnemar(candidate, incumbent) == mcnemar(candidate, incumbent)
    other = paired_bootstrap(candidate, incumbent, seed=1)
    assert other.difference == paired_bootstrap(candidate, incumbent).difference


def test_describe_is_one_line_with_difference_interval_and_p():
    candidate, incumbent = [True] * 30 + [False] * 170, [True] * 23 + [False] * 177
    line = paired_bootstrap(candidate, incumbent).describe()
    assert line.startswith("+0.035 [+0.")
    assert line.endswith("<= 0.050 (paired bootstrap, 200 items, 90% interval)")
    assert "for a gain > -0.020" in paired_bootstrap(candidate, incumbent, bound=-0.02).describe()


@pytest.mark.parametrize(("candidate", "incumbent", "needle"), [
    ([True], [True, False], "1 candidate and 2 incumbent results"),
    ([], [], "no items"),
])
def test_bad_inputs_say_what_to_pass(candidate, incumbent, needle):
    with pytest.raises(ValueError, match=needle):
        paired_bootstrap(candidate, incumbent)
