import itertools
import math
from collections import Counter

import pytest

from tasks.curriculum.bandit import (
    bucket_rewards,
    level_probabilities,
    q_values,
    sample_levels,
    td_update,
)
from tasks.curriculum.columns import lazy_frame
from tasks.curriculum.pass_rates import VERDICT_COLUMNS, reward_stats

LEVELS = [2, 3, 4]


def _row(level, pass_rate, judged=4):
    """A curriculum row of binary rewards: its mean |advantage| is 2 p (1 - p)."""
    mad = 0.0 if pass_rate is None else 2 * pass_rate * (1 - pass_rate)
    return {"level": level, "pass_rate": pass_rate, "judged": judged, "reward_mad": mad}


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [([1, 1, 1, 1], 0.0), ([0, 0, 0, 0], 0.0), ([1, 0, 1, 0], 0.5), ([1, 0, 0, 0], 0.375),
     ([1, 1, 1, 0], 0.375)],
)
def test_reward_mad_of_binary_rewards_is_2p_1_minus_p(rewards, expected):
    verdicts = [{"problem_id": "a", "reward": float(r)} for r in rewards]
    stats = reward_stats(lazy_frame(verdicts, VERDICT_COLUMNS)).row(0, named=True)
    mean = sum(rewards) / len(rewards)
    assert stats["reward_mad"] == pytest.approx(expected)
    assert stats["reward_mad"] == pytest.approx(2 * mean * (1 - mean))


@pytest.mark.parametrize(
    ("rewards", "pass_rate", "expected"),
    [([0.5, 0.5, 0.5, 0.5], 0.5, 0.0),             # partial credit alike: no advantage
     ([0.25, 0.75, 0.25, 0.75], 0.5, 0.25),
     ([1.0, 0.5, 0.0, None], 0.5, 1 / 3),          # an unjudged sample counts for nothing
     ([0.2, 0.4, 0.0, 0.2], 0.2, 0.1)],
)
def test_reward_mad_of_graded_rewards_is_their_mean_abs_deviation(rewards, pass_rate, expected):
    verdicts = [{"problem_id": "a", "reward": r} for r in rewards]
    stats = reward_stats(lazy_frame(verdicts, VERDICT_COLUMNS)).row(0, named=True)
    assert stats["pass_rate"] == pytest.approx(pass_rate)
    assert stats["reward_mad"] == pytest.approx(expected)
    assert stats["reward_mad"] < 2 * pass_rate * (1 - pass_rate)


def test_graded_rewards_that_never_disagree_move_no_level_toward_them():
    """Level 2 scores 0.5 partial credit on every sample, level 3 is solved half the time: the
    bandit's reward is the spread of the samples, not the mean credit."""
    verdicts = ([{"problem_id": "two", "reward": 0.5}] * 8
                + [{"problem_id": "three", "reward": float(i % 2)} for i in range(8)])
    stats = reward_stats(lazy_frame(verdicts, VERDICT_COLUMNS))
    rows = [{**row, "level": 2 if row["problem_id"] == "two" else 3}
            for row in stats.to_dicts()]
    assert bucket_rewards(rows, LEVELS) == pytest.approx({2: 0.0, 3: 0.5})


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], {}),
        ([_row(3, 0.5, 4),
          _row(3, 1.0, 4)], {3: 0.25}),
        ([_row(2, 0.25, 4),
          _row(4, None, 0)],
         {2: 0.375}),  # unjudged ignored
        # one sample: no advantage (the warm-up)
        ([_row(2, 1.0, 1)], {}),
        ([_row(5, 0.5, 4),
          _row(1, 0.5, 4)], {}),
    ],
)
def test_bucket_rewards(rows, expected):
    assert bucket_rewards(rows, LEVELS) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("q", "rewards", "alpha", "expected"),
    [({2: 0.0, 3: 0.0}, {3: 0.5}, 0.5, {2: 0.0, 3: 0.25}),
     ({2: 0.4, 3: 0.2}, {2: 0.0, 3: 0.4}, 1.0, {2: 0.0, 3: 0.4}),
     ({2: 0.4}, {}, 0.5, {2: 0.4})],
)
def test_td_update_moves_only_buckets_seen(q, rewards, alpha, expected):
    assert td_update(q, rewards, alpha) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("q", "temperature", "expected"),
    [({2: 0.1, 3: 0.1}, 0.1, {2: 0.5, 3: 0.5}),
     ({2: 0.0, 3: 0.1}, 0.1, {2: 1 / (1 + math.e), 3: math.e / (1 + math.e)}),
     ({2: 0.0, 3: 0.1}, 100.0, {2: 0.5, 3: 0.5})],
)
def test_level_probabilities_are_a_softmax(q, temperature, expected):
    assert level_probabilities(q, temperature) == pytest.approx(expected, abs=1e-3)


def test_temperature_must_be_positive():
    with pytest.raises(ValueError, match="temperature = 0"):
        level_probabilities({2: 0.0}, 0)


def _round(pass_rates: dict[int, list[float]]) -> list[dict[str, float]]:
    return [_row(level, p) for level, rates in pass_rates.items() for p in rates]


def test_bandit_shifts_toward_the_bucket_with_the_highest_mean_abs_advantage():
    # level 2 is solved (p = 1), level 4 is out of reach (p = 0), level 3 is at the edge
    rounds = [_round({2: [1.0, 0.9, 1.0], 3: [0.5, 0.4, 0.7], 4: [0.0, 0.1, 0.0]})] * 4
    shares = []
    for seen in range(len(rounds) + 1):
        q = q_values(rounds[:seen], LEVELS, alpha=0.5, initial_q=0.25)
        shares.append(level_probabilities(q, 0.1)[3])
        drawn = Counter(sample_levels(q, 2000, temperature=0.1, seed=7))
        assert sum(drawn.values()) == 2000
        if seen:
            assert drawn[3] > drawn[2] and drawn[3] > drawn[4]
    assert shares[0] == pytest.approx(1 / 3)
    assert all(later > earlier for earlier, later in itertools.pairwise(shares))
    assert shares[-1] > 0.6


def test_levels_are_deterministic_for_a_seed_and_replay_equals_incremental_updates():
    rounds = [_round({2: [1.0], 3: [0.5], 4: [0.25]}), _round({3: [0.9], 4: [0.5]})]
    q = q_values(rounds, LEVELS, alpha=0.3, initial_q=0.1)
    step = {level: 0.1 for level in LEVELS}
    for rows in rounds:
        step = td_update(step, bucket_rewards(rows, LEVELS), 0.3)
    assert q == pytest.approx(step)
    assert q == q_values(rounds, LEVELS, alpha=0.3, initial_q=0.1)
    first = sample_levels(q, 500, temperature=0.1, seed=3)
    assert first == sample_levels(q, 500, temperature=0.1, seed=3)
    assert first != sample_levels(q, 500, temperature=0.1, seed=4)
    assert set(first) <= set(LEVELS)


def _synthesize_round_1(tmp_path, monkeypatch, scheduler, curricula_rates):
    """synthesize.fn for round 1 with a fake proposer (the generator answers the requested
    level)."""
    import random

    from configs import load_config
    from storage.datasets import read_rows, write_atomic
    from tasks import synthesize as synthesize_module
    from tasks.context import Checkpoint, RunContext
    from tasks.stage import StageOutput

    def fake_propose(domain, checkpoint, *, count, levels, seed, **_):
        rng = random.Random(seed)
        prompts = [domain.proposer_prompt(levels[i % len(levels)]) for i in range(count)]
        return [(p, domain.generate(rng, int(p.split("L")[1].rstrip(":"))).text) for p in prompts]

    monkeypatch.setattr(synthesize_module, "propose", fake_propose)
    config = load_config(None, {"synthesize.level_scheduler": scheduler, "synthesize.proposals": 64,
                                "gates.enabled": False, "domain.heldout_per_level": 1})
    ctx = RunContext(data_root=tmp_path, run_id="bandit", config=config)
    ctx.catalog.ensure_run("bandit", config.model_dump_json())
    curated = []
    for index, rates in enumerate(curricula_rates):
        rows = [{"problem_id": f"{index}-{n}", "run_id": "bandit", "round": index,
                 "level": r["level"], "samples": 4, "judged": 4,
                 "passed": round(4 * r["pass_rate"]), "pass_rate": r["pass_rate"],
                 "reward_std": 0.0, "reward_mad": r["reward_mad"], "kept": True,
                 "drop_reason": None}
                for n, r in enumerate(_round(rates))]
        path = tmp_path / f"curriculum-{index}.parquet"
        write_atomic("curriculum", rows, path)
        curated.append(StageOutput("curate", index, f"fp{index}{sorted(rates.items())}",
                                   {"curriculum": path}, True))
    out = synthesize_module.synthesize.fn(ctx, 1, Checkpoint(tmp_path, "ckpt"), [], curated)
    metrics = {r["name"]: r["value"] for r in ctx.catalog.query(
        "SELECT name, value FROM metrics WHERE stage = 'synthesize'")}
    return out, metrics, read_rows(out.path("proposals"))


def test_synthesize_draws_bandit_levels_and_fingerprints_the_curricula(tmp_path, monkeypatch):
    edge_at_3 = [{2: [1.0, 1.0], 3: [0.5, 0.5], 4: [0.0, 0.0]}] * 2
    out, metrics, proposals = _synthesize_round_1(tmp_path / "a", monkeypatch, "bandit", edge_at_3)
    requested = Counter(int(p["prompt"].split("L")[1].rstrip(":")) for p in proposals)
    assert ({level: metrics[f"requested_level_{level}"] for level in LEVELS}
            == {level: requested[level] for level in LEVELS})
    assert sum(requested.values()) == 64 and requested[3] > requested[2] + requested[4]
    assert metrics["bandit_q_level_3"] > metrics["bandit_q_level_2"] == metrics["bandit_q_level_4"]
    again, _, repeated = _synthesize_round_1(tmp_path / "b", monkeypatch, "bandit", edge_at_3)
    # resume: same levels
    assert again.fingerprint == out.fingerprint and repeated == [dict(p) for p in proposals]
    other, _, _ = _synthesize_round_1(tmp_path / "c", monkeypatch, "bandit", [{2: [0.5]}])
    assert other.fingerprint != out.fingerprint
    cycle_a, cycle_metrics, _ = _synthesize_round_1(tmp_path / "d", monkeypatch, "cycle", edge_at_3)
    cycle_b, _, _ = _synthesize_round_1(tmp_path / "e", monkeypatch, "cycle", [{2: [0.5]}])
    assert cycle_a.fingerprint == cycle_b.fingerprint  # the default does not read the curricula
    assert not any(name.startswith("bandit_") for name in cycle_metrics)
