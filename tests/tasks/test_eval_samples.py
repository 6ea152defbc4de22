"""Evaluation with several samples per held-out item (`[evaluate] samples`, `temperature`): the
estimators exactly (pass@k against brute-force enumeration, maj@k on hand-built answers), the
intervals over items, the rows and sampling of `eval_rows`, the config's checks, promotion
pairing by item, and the stage once on the tiny model with its gate."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from configs import ConfigError, PromoteConfig, RunConfig, load_config
from domains import get_domain
from models.rollout_types import Completion
from storage.audit.round_metrics import bootstrap_interval, item_interval, wilson_interval
from tasks.evaluate import (
    MAJ_SUBSETS,
    eval_rows,
    item_passes,
    majority_at_ks,
    majority_correct,
    pass_at_k,
    pass_at_ks,
    sample_figures,
)
from tasks.promote import level_flips, promotion_decision
from tasks.promotion_tests import mcnemar, paired_bootstrap

# ---- pass@k -------------------------------------------------------------------------------


def _brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of the C(n, k) size-k subsets of n samples (c correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_equals_the_share_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_force_pass_at_k(n, c, k),
                                                       abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_share_correct_and_pass_at_n_is_any_correct():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 1, 10) == 1.0 and pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 1, 0), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_refuses_impossible_arguments(n, c, k):
    with pytest.raises(ValueError, match=f"pass@{k} from {c} correct of {n} samples"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(("samples", "ks"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]),
                                             (6, [1, 2, 4, 6]), (16, [1, 2, 4, 8, 16])])
def test_the_pass_at_k_list_is_powers_of_two_and_n(samples, ks):
    assert pass_at_ks(samples) == ks


# ---- maj@k --------------------------------------------------------------------------------


@pytest.mark.parametrize(("answers", "rewards", "expected"), [
    # the majority answer is right though one sample is wrong
    (["42", "42", "41"], [1.0, 1.0, 0.0], True),
    # the majority is wrong although one sample is right (pass@3 would count the item)
    (["41", "41", "42"], [0.0, 0.0, 1.0], False),
    # a tie goes to the smallest string ("10" < "9"), as verify's votes
    (["9", "10"], [1.0, 0.0], False),
    (["10", "9"], [1.0, 0.0], True),
    # unjudged answers do not vote: two unjudged "7"s would outvote the judged "42"
    (["7", "7", "42"], [None, None, 1.0], True),
    # an unextracted answer (None) votes for nothing
    ([None, None, "41"], [0.0, 0.0, 0.0], False),
    # no judged answer: no vote
    (["7", None], [None, None], None),
])
def test_majority_answer_is_judged_by_the_samples_that_gave_it(answers, rewards, expected):
    corrects = [r == 1.0 for r in rewards]
    assert majority_correct(answers, rewards, corrects) is expected


# ---- the figures of a set of rows -----------------------------------------------------------


def _rows(items: dict[str, list[tuple[str | None, float | None]]]) -> list[dict]:
    """Eval rows: item -> its samples' (answer, reward); level 1, reference "42"."""
    return [{"item_id": item, "level": 1, "answer": answer, "reward": reward,
             "correct": reward == 1.0, "sample": k}
            for item, samples in items.items() for k, (answer, reward) in enumerate(samples)]


def test_sample_figures_on_hand_built_answers():
    rows = _rows({
        "a": [("42", 1.0), ("42", 1.0), ("42", 1.0), ("41", 0.0)],   # c = 3, majority right
        "b": [("41", 0.0), ("41", 0.0), ("42", 1.0), (None, None)],  # c = 1, majority wrong
        "c": [(None, None), (None, None), (None, None), (None, None)],  # nothing judged
    })
    figures = sample_figures(rows)
    assert figures["samples"] == 4.0
    assert figures["pass_at_1"] == pytest.approx((3 / 4 + 1 / 4 + 0) / 3)
    assert figures["pass_at_2"] == pytest.approx((1 + (1 - 3 / 6) + 0) / 3)
    assert figures["pass_at_4"] == pytest.approx(2 / 3)
    assert figures["maj_at_4"] == pytest.approx(1 / 3)
    # maj@2 over the six pairs: a wins 3 (a 42-41 pair ties, and "41" < "42"); b wins only
    # its (42, unjudged) pair; c none
    assert figures["maj_at_2"] == pytest.approx((3 / 6 + 1 / 6 + 0) / 3)
    assert "maj_at_1" not in figures  # it would be pass@1
    assert figures["maj_at_4_unjudged"] == 5.0  # one answer of b, four of c
    assert figures["maj_at_4_no_vote"] == 1.0  # c: counted as not correct
    # maj@4 is pass/fail per item: its Wilson interval of 1 in 3 items
    assert (figures["maj_at_4_low"], figures["maj_at_4_high"]) == pytest.approx(
        wilson_interval(1, 3))
    # pass fractions 0.75, 0.25, 0: a bootstrap over the three items
    assert (figures["accuracy_low"], figures["accuracy_high"]) == pytest.approx(
        bootstrap_interval([0.75, 0.25, 0.0]))
    for name in ("accuracy", "pass_at_1", "pass_at_2", "pass_at_4", "maj_at_2", "maj_at_4"):
        low, high = figures[f"{name}_low"], figures[f"{name}_high"]
        assert 0.0 <= low <= high <= 1.0, name
        if name != "accuracy":
            assert low <= figures[name] <= high, name


def test_majority_at_k_of_all_samples_is_their_one_vote_and_of_one_sample_is_pass_at_1():
    answers = ["42", "41", "42", None, "7"]
    rewards = [1.0, 0.0, 1.0, None, 0.0]
    corrects = [r == 1.0 for r in rewards]
    figures = majority_at_ks(answers, rewards, corrects, [1, 5])
    assert figures[5] == float(majority_correct(answers, rewards, corrects))
    assert figures[1] == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        majority_at_ks(answers, rewards, corrects, [6])


def test_majority_at_k_is_the_mean_of_majority_correct_over_every_k_subset():
    draw = random.Random(3)
    for _ in range(200):
        n = draw.randint(1, 8)
        answers = [draw.choice(["1", "2", "10", None]) for _ in range(n)]
        rewards = [None if a is None or draw.random() < 0.2 else float(a == "1") for a in answers]
        corrects = [r == 1.0 for r in rewards]
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            expected = sum(bool(majority_correct([answers[i] for i in s], [rewards[i] for i in s],
                                                 [corrects[i] for i in s]))
                           for s in subsets) / len(subsets)
            assert majority_at_ks(answers, rewards, corrects, [k])[k] == pytest.approx(expected), (
                answers, rewards, k)


def test_majority_at_k_draws_subsets_when_there_are_too_many_and_stays_near_the_exact_value():
    # 11 right answers "42", 9 wrong "41" of 20 samples; maj@10 wins when a 10-subset holds
    # >= 6 of the 42s (5-5 ties go to "41"): the hypergeometric tail, exactly
    answers = ["42"] * 11 + ["41"] * 9
    rewards = [1.0] * 11 + [0.0] * 9
    corrects = [r == 1.0 for r in rewards]
    assert math.comb(20, 10) > MAJ_SUBSETS
    exact = sum(math.comb(11, j) * math.comb(9, 10 - j) for j in range(6, 11)) / math.comb(20, 10)
    drawn = majority_at_ks(answers, rewards, corrects, [10])[10]
    assert drawn == majority_at_ks(answers, rewards, corrects, [2, 10])[10]  # a fixed seed
    # the draw's standard error at 1000 subsets is about 0.016
    assert abs(drawn - exact) < 0.06


def test_one_sample_per_item_adds_only_the_wilson_interval_of_the_accuracy():
    rows = _rows({f"i{k}": [("42", 1.0 if k < 3 else 0.0)] for k in range(10)})
    assert sample_figures(rows) == pytest.approx(dict(zip(
        ("accuracy_low", "accuracy_high"), wilson_interval(3, 10), strict=True)))


def test_items_with_different_sample_counts_are_an_error():
    rows = _rows({"a": [("42", 1.0), ("42", 1.0)], "b": [("42", 1.0)]})
    with pytest.raises(ValueError, match=r"\[1, 2\] samples; every item needs the same number"):
        sample_figures(rows)


def test_item_interval_is_wilson_for_pass_fail_items_and_a_seeded_bootstrap_otherwise():
    assert item_interval([1.0, 0.0, 1.0, 1.0]) == wilson_interval(3, 4)
    assert item_interval([]) == (None, None)
    rng = random.Random(0)
    fractions = [rng.random() for _ in range(50)]
    low, high = item_interval(fractions)
    assert (low, high) == bootstrap_interval(fractions)  # the same every time: a fixed seed
    assert low < sum(fractions) / 50 < high
    # an interval of pass fractions is narrower than treating the same answers as items
    assert high - low < wilson_interval(sum(fractions), 50)[1] - wilson_interval(
        sum(fractions), 50)[0]


# ---- eval_rows ------------------------------------------------------------------------------


class Sampler:
    """A backend answering sample k of a prompt with a seeded guess; it records the params."""

    def __init__(self) -> None:
        self.params = []

    def generate(self, prompts, params, progress=None):
        self.params.append(params)
        rng = random.Random(params.seed)
        if progress is not None:
            progress(len(prompts) * params.n)
        return [[Completion(str(rng.randint(0, 3)), 1) for _ in range(params.n)]
                for _ in prompts]


def test_eval_rows_give_one_row_per_item_and_sample_item_major():
    domain = get_domain("arithmetic")
    backend = Sampler()
    rows = eval_rows(backend, domain, per_level=2, max_new_tokens=4, checkpoint="c", run_id="r",
                     round_index=1, samples=3, temperature=0.7, seed=11)
    (params,) = backend.params
    assert (params.n, params.temperature, params.seed, params.greedy) == (3, 0.7, 11, False)
    items = domain.heldout(2)
    assert len(rows) == 3 * len(items)
    assert [r["sample"] for r in rows[:6]] == [0, 1, 2, 0, 1, 2]
    assert len({r["item_id"] for r in rows[:3]}) == 1 and rows[0]["item_id"] != rows[3]["item_id"]
    assert all(r["correct"] == (r["answer"] == r["reference"]) for r in rows)


def test_the_default_is_one_greedy_answer_from_seed_0_whatever_seed_is_passed():
    backend = Sampler()
    rows = eval_rows(backend, get_domain("arithmetic"), per_level=1, max_new_tokens=4,
                     checkpoint="c", run_id="r", round_index=1, seed=99)
    (params,) = backend.params
    assert (params.n, params.temperature, params.seed, params.greedy) == (1, 1.0, 0, True)
    assert {r["sample"] for r in rows} == {0}


# ---- config ---------------------------------------------------------------------------------


def test_samples_default_to_one_greedy_answer_and_need_a_temperature():
    config = load_config(None)
    assert (config.evaluate.samples, config.evaluate.temperature) == (1, 0.0)
    assert load_config(None, {"evaluate.samples": 4,
                              "evaluate.temperature": 0.8}).evaluate.samples == 4
    with pytest.raises(ConfigError, match=r"samples = 4 with temperature = 0: .* set "
                                          r"temperature > 0"):
        load_config(None, {"evaluate.samples": 4})
    with pytest.raises(ConfigError, match=r"promote.test = 'mcnemar' with evaluate.samples = 4"):
        load_config(None, {"evaluate.samples": 4, "evaluate.temperature": 0.8,
                           "promote.test": "mcnemar"})


# ---- promotion pairs items, not samples ----------------------------------------------------


def _evals(fractions: list[float], samples: int = 4, level: int = 1) -> list[dict]:
    """Eval rows of items i0, i1, ...: item i has round(fraction * samples) correct samples."""
    return [{"item_id": f"i{i}", "level": level, "correct": k < round(f * samples)}
            for i, f in enumerate(fractions) for k in range(samples)]


def test_item_passes_average_an_items_samples():
    assert item_passes(_evals([0.75, 0.0, 1.0])) == {"i0": (1, 0.75), "i1": (1, 0.0),
                                                     "i2": (1, 1.0)}


def test_level_flips_count_the_drop_of_each_items_pass_fraction():
    candidate, incumbent = _evals([0.25, 1.0, 0.5]), _evals([0.75, 0.5, 0.5])
    assert level_flips(candidate, incumbent) == {1: (0.5, 3)}  # only i0 dropped, by 0.5
    decision = promotion_decision(candidate, incumbent, PromoteConfig(max_level_regression=0.1))
    assert not decision.promoted
    assert decision.reason.endswith("level 1: 0.5/3 items pass->fail > 0.100")


def test_the_paired_bootstrap_resamples_items_of_pass_fractions():
    rng = random.Random(1)
    incumbent = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(200)]
    same = paired_bootstrap(incumbent, incumbent)
    assert (same.difference, same.low, same.high, same.passed) == (0.0, 0.0, 0.0, False)
    gained = [min(1.0, f + 0.25) for f in incumbent]
    test = paired_bootstrap(gained, incumbent, samples=2000)
    assert test.difference == pytest.approx(sum(g - i for g, i in zip(gained, incumbent,
                                                                      strict=True)) / 200)
    assert test.passed and 0 < test.low < test.difference < test.high
    # the eval rows of the same sets reach the same test through the promote rule
    decision = promotion_decision(_evals(gained), _evals(incumbent),
                                  PromoteConfig(test="paired_bootstrap", bootstrap_samples=2000))
    assert decision.test == test and decision.promoted


def test_mcnemar_refuses_pass_fractions():
    with pytest.raises(ValueError, match="McNemar's test needs pass/fail items"):
        mcnemar([0.5, 1.0], [0.0, 1.0])
    assert mcnemar([1.0, 1.0, 0.0], [0.0, 1.0, 0.0]).items == 3  # 0/1 fractions still pair


# ---- the stage, on the tiny model ---------------------------------------------------------


def test_the_evaluate_stage_samples_every_item_and_records_the_figures(tmp_path):
    from models.tiny import build_tiny_model
    from tasks.context import Checkpoint, RunContext
    from tasks.evaluate import evaluate

    model = build_tiny_model(tmp_path / "model", hidden_size=32, num_layers=1, head_dim=8,
                             intermediate_size=64, init_seed=0)
    config = RunConfig.model_validate({"domain": {"heldout_per_level": 2},
                                       "evaluate": {"max_new_tokens": 2, "samples": 3,
                                                    "temperature": 1.0},
                                       "gates": {"enabled": False}})
    ctx = RunContext(data_root=tmp_path / "data", run_id="s", config=config)
    ctx.catalog.ensure_run("s", "{}")
    result = evaluate.fn(ctx, 1, Checkpoint(model, "m"))
    from storage.datasets import read_rows

    rows = read_rows(result.path)
    items = len(ctx.domain.heldout(2))
    assert len(rows) == 3 * items and {r["sample"] for r in rows} == {0, 1, 2}
    metrics = {r["name"]: r["value"] for r in ctx.catalog.query(
        "SELECT name, value FROM metrics WHERE stage = 'evaluate'")}
    assert metrics["samples"] == 3.0
    assert metrics["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / len(rows))
    assert metrics["pass_at_1"] == pytest.approx(metrics["accuracy"])
    assert {"pass_at_2", "pass_at_3", "maj_at_3", "maj_at_3_low", "accuracy_low"} <= set(metrics)
    assert metrics["pass_at_3"] >= metrics["pass_at_2"] >= metrics["pass_at_1"]
    assert json.dumps(metrics)  # plain floats
    assert {"maj_at_2", "maj_at_2_low", "maj_at_2_high"} <= set(metrics)
    # status prints every k of them under its table
    from storage.audit.round_summary import at_k_lines, round_summary

    _, header, line = at_k_lines(round_summary(ctx.catalog, "s"))
    assert header.split() == ["round", "pass@1", "pass@2", "pass@3", "maj@2", "maj@3"]
    assert line.split()[:2] == ["1", f"{metrics['pass_at_1']:.3f}"]
