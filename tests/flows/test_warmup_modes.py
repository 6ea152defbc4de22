"""`[warmup] mode`: what round 0 does. `references` (the default) trains on the seed references;
`self_samples` samples k answers per seed problem and trains on the verified ones (rejection
sampling through the rollout and verify stages, curate's `warmup_solver_rows`); `none` runs no
round-0 stage but a promote that keeps the base model, and round 1 starts from it.

The settings and rows are checked as pure functions; each non-default mode also runs once on
the tiny CPU model, cut to a few seeds and steps, in process under the session's Prefect server,
and `status`, `audit` and `report` read the run without a warm-up back."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from configs import load_config
from configs.settings import (
    SelfSampleCurateSettings,
    SelfSampleRolloutSettings,
    WarmupCurateSettings,
    WarmupRolloutSettings,
    stage_settings,
)
from domains import get_domain
from storage.catalog import Catalog
from tasks.fingerprints import stage_fingerprints
from tasks.incumbent import NO_WARMUP

# A run that costs seconds: few seeds, samples, held-out items and steps, no data gates.
SMALL = {"domain.seed_problems": 40, "domain.heldout_per_level": 3, "synthesize.proposals": 16,
         "rollout.samples_per_problem": 4, "rollout.batch_size": 64, "train.batch_size": 16,
         "train.warmup.max_steps": 3, "train.max_steps": 2, "gates.enabled": False}


def test_self_samples_samples_k_answers_in_round_zero_and_shares_the_seed_problems():
    references = load_config(None)
    self_samples = load_config(None, {"warmup.mode": "self_samples"})
    rollout = stage_settings(self_samples, "rollout", 0)
    assert type(rollout) is SelfSampleRolloutSettings and rollout.samples_per_problem == 16
    assert type(stage_settings(self_samples, "curate", 0)) is SelfSampleCurateSettings
    default = stage_settings(references, "rollout", 0)
    assert type(default) is WarmupRolloutSettings and default.samples_per_problem == 1
    assert type(stage_settings(references, "curate", 0)) is WarmupCurateSettings
    assert stage_settings(self_samples, "rollout", 1) == stage_settings(references, "rollout", 1)
    before, after = stage_fingerprints(references), stage_fingerprints(self_samples)
    assert [s for s in before if before[s] == after[s]] == [
        ("base", 0), ("baseline", 0), ("synthesize", 0)]


def test_without_a_warm_up_round_zero_only_decides():
    fingerprints = stage_fingerprints(load_config(None, {"warmup.mode": "none"}))
    assert sorted(s for s in fingerprints if s[1] == 0) == [
        ("base", 0), ("baseline", 0), ("promote", 0)]
    assert {stage for stage, r in fingerprints if r == 1} == {
        "synthesize", "rollout", "verify", "curate", "train", "evaluate", "promote"}


def _seed_round():
    """Two seed problems of level 1: one answered right twice and wrong once, one never."""
    domain = get_domain("arithmetic")
    rng = random.Random(0)
    problems, rollouts, verdicts = [], [], []
    for index, rewards in enumerate([(1, 0, 1), (0, 0, 0)]):
        problem = domain.generate(rng, 1)
        pid = f"p{index}"
        problems.append({"problem_id": pid, "run_id": "r", "round": 0, "text": problem.text,
                         "reference": problem.reference, "level": 1, "source": "seed",
                         "proposal_id": f"q{index}"})
        for sample, reward in enumerate(rewards):
            rid = f"{pid}-{sample}"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "sample_index": sample,
                             "prompt": domain.solver_prompt(problem.text),
                             "completion": f"{problem.reference}" if reward else "x"})
            verdicts.append({"rollout_id": rid, "problem_id": pid, "reward": float(reward)})
    return domain, problems, rollouts, verdicts


@pytest.mark.parametrize("self_samples", [False, True])
def test_the_warm_up_trains_on_references_or_on_the_verified_answers(self_samples):
    from tasks.curate import curriculum_rows, training_frame

    domain, problems, rollouts, verdicts = _seed_round()
    curation = load_config(None, {"curate.max_answers_per_problem": 1,
                                  "domain.seed_max_level": 1}).curate
    curriculum = curriculum_rows(problems, verdicts, curation, warmup=True, warmup_max_level=1)
    assert all(c["kept"] for c in curriculum)  # the warm-up's curriculum is the same in both
    rows = training_frame(domain, problems, rollouts, verdicts, curriculum, curation,
                          warmup=True, self_samples=self_samples).to_dicts()
    solver = [(r["problem_id"], r["rollout_id"], r["completion"]) for r in rows
              if r["role"] == "solver"]
    if self_samples:  # the first verified answer of the solved problem; none for the other
        assert solver == [("p0", "p0-0", problems[0]["reference"])]
    else:
        assert [(pid, rid) for pid, rid, _ in solver] == [("p0", None), ("p1", None)]
    assert {r["problem_id"] for r in rows if r["role"] == "proposer"} == {"p0", "p1"}


def _run(tmp_path, run_id, overrides):
    from flows.run import RunSpec, flywheel_flow

    config = load_config(None, {**SMALL, **overrides})
    flywheel_flow(RunSpec(data_root=str(tmp_path), run_id=run_id, config=config))
    return Catalog(tmp_path), config


@pytest.mark.slow
def test_a_self_samples_warm_up_trains_on_the_model_s_verified_answers(tmp_path,
                                                                        prefect_server):
    # Majority labels make an untrained model's answers verifiable: the tiny model agrees with
    # itself often enough for the warm-up to keep some of its own answers.
    catalog, config = _run(tmp_path, "self", {"rounds": 0, "warmup.mode": "self_samples",
                                              "verify.labels": "majority",
                                              "curate.solver_targets": "verified"})
    counts = catalog.query("SELECT count(*) AS n, count(DISTINCT problem_id) AS problems"
                           " FROM rollouts WHERE run_id = 'self' AND round = 0")[0]
    assert counts["n"] == counts["problems"] * config.rollout.samples_per_problem
    solver = catalog.query(
        "SELECT t.completion, t.rollout_id, r.completion AS sampled, v.reward FROM train_rows t"
        " JOIN rollouts r USING (rollout_id) JOIN verdicts v USING (rollout_id)"
        " WHERE t.run_id = 'self' AND t.round = 0 AND t.role = 'solver'")
    assert solver, "the warm-up kept none of the model's answers"
    assert all(r["reward"] == 1.0 and r["completion"] == r["sampled"] for r in solver)
    unanchored = catalog.query("SELECT count(*) AS n FROM train_rows WHERE run_id = 'self'"
                               " AND role = 'solver' AND rollout_id IS NULL")[0]["n"]
    assert unanchored == 0  # no reference rows
    stages = {r["stage"] for r in catalog.query(
        "SELECT stage FROM stages WHERE run_id = 'self' AND round = 0 AND status = 'completed'")}
    assert {"train", "evaluate", "promote"} <= stages


@pytest.mark.slow
def test_without_a_warm_up_round_one_starts_from_the_base_model(tmp_path, prefect_server):
    from flows.cli import app

    # the untrained tiny model solves nothing: round 1 trains on generator references
    catalog, _ = _run(tmp_path, "cold", {"rounds": 1, "warmup.mode": "none",
                                         "synthesize.source": "generator",
                                         "curate.solver_targets": "reference"})
    stages = catalog.query("SELECT round, stage, status FROM stages WHERE run_id = 'cold'")
    assert all(r["status"] == "completed" for r in stages), stages
    assert sorted((r["round"], r["stage"]) for r in stages if r["round"] == 0) == [
        (0, "base"), (0, "baseline"), (0, "promote")]
    decided = catalog.query("SELECT round, incumbent, candidate, promoted, reason FROM rounds"
                            " WHERE run_id = 'cold' ORDER BY round")
    assert [r["round"] for r in decided] == [0, 1]
    assert (decided[0]["candidate"], decided[0]["promoted"], decided[0]["reason"]) == (
        None, False, NO_WARMUP)
    base = catalog.query("SELECT fingerprint FROM stages WHERE run_id = 'cold'"
                         " AND stage = 'base'")[0]["fingerprint"]
    assert decided[1]["incumbent"] == base and decided[1]["candidate"] is not None
    sampled_by = {r["checkpoint"] for r in catalog.query(
        "SELECT DISTINCT checkpoint FROM rollouts WHERE run_id = 'cold' AND round = 1")}
    assert sampled_by == {base}

    runner = CliRunner()
    for args in (["status", "cold"], ["status", "cold", "--json"], ["audit", "cold", "funnel"],
                 ["audit", "cold", "drift"], ["report", "cold", "--out", str(tmp_path / "r")]):
        result = runner.invoke(app, [*args, "--data-root", str(tmp_path)])
        assert result.exit_code == 0, (args, result.output)
    status = runner.invoke(app, ["status", "cold", "--data-root", str(tmp_path)]).output
    assert "no warm-up" in status, status
