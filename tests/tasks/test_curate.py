import pytest

from configs import CurateConfig
from domains.arithmetic import ArithmeticDomain
from tasks.curate import curriculum_rows, drop_reason, training_rows

domain = ArithmeticDomain()
BAND = CurateConfig(min_pass_rate=0.0, max_pass_rate=1.0, max_answers_per_problem=2,
                    solver_targets="verified")


@pytest.mark.parametrize(
    ("pass_rate", "std", "band", "reason"),
    [(None, 0.0, BAND, "unjudged"), (0.0, 0.0, BAND, "too_hard"), (1.0, 0.0, BAND, "too_easy"),
     (0.5, 0.5, BAND, None),
     (0.2, 0.4, CurateConfig(min_pass_rate=0.3, max_pass_rate=0.8), "too_hard"),
     (0.9, 0.3, CurateConfig(min_pass_rate=0.3, max_pass_rate=0.8), "too_easy"),
     (0.5, 0.0, BAND, "zero_variance")],
)
def test_drop_reason(pass_rate, std, band, reason):
    assert drop_reason(pass_rate, std, band) == reason


def _fixture():
    problems = [
        {"problem_id": pid, "run_id": "r", "round": 1, "text": text, "reference": ref, "level": 1,
         "source": "proposer", "proposal_id": "q" + pid}
        for pid, text, ref in [("a", "1+1", "2"), ("b", "2+2", "4"), ("c", "3*3", "9")]
    ]
    answers = {"a": ["2", "2", "2", "2"], "b": ["4", "5", "4", "1"], "c": ["1", "2", "3", "4"]}
    rollouts, verdicts = [], []
    for pid, outs in answers.items():
        for i, out in enumerate(outs):
            rid = f"{pid}{i}"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "sample_index": i,
                             "prompt": "<solve>", "completion": out})
            ref = next(p["reference"] for p in problems if p["problem_id"] == pid)
            verdicts.append({"rollout_id": rid, "problem_id": pid, "reward": float(out == ref)})
    return problems, rollouts, verdicts


def test_curriculum_keeps_the_band_and_says_why_it_drops():
    problems, _rollouts, verdicts = _fixture()
    curriculum = {c["problem_id"]: c
                  for c in curriculum_rows(problems, verdicts, BAND, warmup=False)}
    assert curriculum["a"]["drop_reason"] == "too_easy" and curriculum["a"]["pass_rate"] == 1.0
    assert curriculum["b"]["kept"] and curriculum["b"]["pass_rate"] == 0.5
    assert curriculum["c"]["drop_reason"] == "too_hard"


def test_training_rows_are_verified_answers_of_kept_problems_with_lineage():
    problems, rollouts, verdicts = _fixture()
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=False)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, BAND, warmup=False)
    solver = [r for r in rows if r["role"] == "solver"]
    proposer = [r for r in rows if r["role"] == "proposer"]
    assert [r["rollout_id"] for r in solver] == ["b0", "b2"]
    assert all(r["completion"] == "4" and r["problem_id"] == "b" and r["proposal_id"] == "qb"
               for r in solver)
    assert len(proposer) == 1 and proposer[0]["completion"] == "2+2"
    assert proposer[0]["weight"] == 0.5  # learnability 1 - p at p = 0.5
    assert len({r["train_row_id"] for r in rows}) == len(rows)


def test_warmup_trains_solver_on_references_up_to_its_level_and_proposer_on_all():
    problems, rollouts, verdicts = _fixture()
    problems[2]["level"] = 3
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=True, warmup_max_level=2)
    assert [c["drop_reason"] for c in curriculum] == [None, None, "above_warmup_level"]
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, BAND, warmup=True)
    solver = {r["problem_id"]: r["completion"] for r in rows if r["role"] == "solver"}
    assert solver == {"a": "2", "b": "4"}
    proposer = {r["problem_id"]: r["prompt"] for r in rows if r["role"] == "proposer"}
    assert proposer == {"a": "<propose>L1:", "b": "<propose>L1:", "c": "<propose>L3:"}
    assert all(r["rollout_id"] is None for r in rows)


def test_rationalize_trains_too_hard_problems_on_their_reference_and_the_rest_as_verified():
    problems, rollouts, verdicts = _fixture()
    band = CurateConfig(max_answers_per_problem=2, solver_targets="rationalize",
                        rationalize_ratio=0.5)
    curriculum = {c["problem_id"]: c
                  for c in curriculum_rows(problems, verdicts, band, warmup=False)}
    assert curriculum["c"]["kept"] and curriculum["c"]["pass_rate"] == 0.0
    assert curriculum["a"]["drop_reason"] == "too_easy"  # mastered: nothing to learn either way
    rows = training_rows(domain, problems, rollouts, verdicts, list(curriculum.values()), band,
                         warmup=False)
    solver = [(r["problem_id"], r["completion"], r["rollout_id"])
              for r in rows if r["role"] == "solver"]
    assert solver == [("b", "4", "b0"), ("b", "4", "b2"), ("c", "9", None)]
    assert domain.solver_prompt("3*3") in [r["prompt"] for r in rows]
    proposer = {r["problem_id"]: r["weight"] for r in rows if r["role"] == "proposer"}
    assert proposer == {"b": 0.5, "c": 0.0}  # learnability: p = 0 teaches the proposer nothing


def test_rationalize_caps_references_per_verified_row_lowest_level_first():
    problems, _rollouts, verdicts = _fixture()
    for pid, level in [("d", 4), ("e", 3), ("f", 3)]:  # three more problems nobody solved
        problems.append({**problems[2], "problem_id": pid, "level": level})
        verdicts += [{"rollout_id": f"{pid}{i}", "problem_id": pid, "reward": 0.0}
                     for i in range(4)]
    problems[2]["level"] = 5

    def kept(ratio):
        band = CurateConfig(max_answers_per_problem=2, solver_targets="rationalize",
                            rationalize_ratio=ratio)
        rows = curriculum_rows(problems, verdicts, band, warmup=False)
        return [r["problem_id"] for r in rows if r["kept"] and r["pass_rate"] == 0.0]

    # 2 verified rows (problem b): ratio 1 -> 2 references, the level-3 ones
    assert kept(0.0) == [] and kept(1.0) == ["e", "f"] and kept(1.5) == ["d", "e", "f"]
    assert kept(10.0) == ["c", "d", "e", "f"]


@pytest.mark.parametrize(("passed", "targets", "reason"),
                         [(0, "rationalize", "too_hard"), (1, "rationalize", None),
                          (0, "verified", None), (None, "rationalize", None)])
def test_partial_credit_without_a_full_reward_is_too_hard_only_where_references_teach(
        passed, targets, reason):
    band = CurateConfig(solver_targets=targets)
    assert drop_reason(0.45, 0.2, band, passed) == reason


def test_rationalize_teaches_the_reference_where_partial_credit_solved_nothing():
    """Graded rewards: problem b earns partial credit (p = 0.5) but no sample is right, so its
    reference is its solver row, counted as too hard; problem a has one right answer."""
    problems, rollouts, _verdicts = _fixture()
    problems = problems[:2]
    rollouts = [r for r in rollouts if r["problem_id"] != "c"]
    rewards = {"a": [1.0, 0.5, 0.25, 0.25], "b": [0.5, 0.75, 0.5, 0.25]}
    verdicts = [{"rollout_id": f"{pid}{i}", "problem_id": pid, "reward": reward}
                for pid, got in rewards.items() for i, reward in enumerate(got)]
    band = CurateConfig(max_answers_per_problem=2, solver_targets="rationalize",
                        rationalize_ratio=1.0)
    curriculum = curriculum_rows(problems, verdicts, band, warmup=False)
    assert [(c["passed"], c["pass_rate"], c["kept"]) for c in curriculum] == [
        (1, 0.5, True), (0, 0.5, True)]  # b rationalized: 1 verified row allows 1 reference
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, band, warmup=False)
    solver = [(r["problem_id"], r["completion"], r["rollout_id"])
              for r in rows if r["role"] == "solver"]
    assert solver == [("a", "2", "a0"), ("b", "4", None)]
    verified = CurateConfig(max_answers_per_problem=2, solver_targets="verified")
    assert [c["drop_reason"] for c in curriculum_rows(problems, verdicts, verified,
                                                      warmup=False)] == [None, None]
    starved = CurateConfig(max_answers_per_problem=2, solver_targets="rationalize",
                           rationalize_ratio=0.5)  # int(0.5 x 1 verified row) = 0 references
    assert [c["drop_reason"] for c in curriculum_rows(problems, verdicts, starved,
                                                      warmup=False)] == [None, "too_hard"]


def test_curate_fingerprint_covers_what_its_round_reads():
    from configs import load_config
    from configs.settings import CurateSettings, WarmupCurateSettings, stage_settings
    from tasks.fingerprints import stage_fingerprints

    def settings(round_index=1, **overrides):
        return stage_settings(load_config(None, overrides), "curate", round_index)

    def fingerprints(**overrides):
        """(round 0's, round 1's) curate fingerprints."""
        out = stage_fingerprints(load_config(None, overrides), rounds=1)
        return out["curate", 0], out["curate", 1]

    base = fingerprints()
    rounds = settings()
    assert isinstance(rounds, CurateSettings)
    assert rounds.curate.rationalize_ratio == 1.0 and rounds.curate.diversity.on == "text"
    assert rounds.algorithm == "sft" and rounds.max_pairs_per_problem == 4
    for key, value in [("curate.diversity.on", "shape"), ("curate.rationalize_ratio", 0.5)]:
        assert fingerprints(**{key: value})[1] != base[1], key  # every [curate] key counts
    verified = {"curate.solver_targets": "verified"}
    dpo = settings(**verified, **{"train.algorithm": "dpo"})
    assert dpo.algorithm == "dpo" and dpo.max_pairs_per_problem == 4  # pairs per kept problem
    assert settings(**verified, **{"train.algorithm": "dpo",
                                   "train.dpo.max_pairs_per_problem": 2}).max_pairs_per_problem == 2
    assert fingerprints(**verified, **{"train.algorithm": "dpo",
                                       "train.dpo.max_pairs_per_problem": 2})[1] \
        != fingerprints(**verified, **{"train.algorithm": "dpo"})[1]
    # the whole settings object counts: the pairs' cap reruns a round's curate of any algorithm
    assert fingerprints(**verified, **{"train.dpo.max_pairs_per_problem": 2})[1] \
        != fingerprints(**verified)[1]
    # the warm-up builds no pairs (no max_pairs_per_problem); it reads domain.seed_max_level
    warmup = settings(round_index=0)
    assert type(warmup) is WarmupCurateSettings
    assert "max_pairs_per_problem" not in WarmupCurateSettings.model_fields
    assert warmup.domain.domain.seed_max_level == 2
    assert fingerprints(**{"domain.seed_max_level": 1})[0] != base[0]
    assert fingerprints(**verified, **{"train.algorithm": "dpo",
                                       "train.dpo.max_pairs_per_problem": 2})[0] \
        == fingerprints(**verified, **{"train.algorithm": "dpo"})[0]
    # [curate] is whole in the warm-up's settings too
    assert warmup.curate == rounds.curate
    assert fingerprints(**{"curate.diversity.penalty": 1.0})[0] != base[0]


class _TeachingDomain(ArithmeticDomain):
    """A domain whose references are specs for its scorer, not answers (as python_io's are)."""

    def training_target(self, reference: str) -> str:
        return f"answer:{reference}"


def test_reference_rows_train_on_the_domain_training_target_and_grpo_keeps_the_label():
    teaching = _TeachingDomain()
    problems, rollouts, verdicts = _fixture()
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=True, warmup_max_level=2)
    rows = training_rows(teaching, problems, rollouts, verdicts, curriculum, BAND, warmup=True)
    solver = {r["problem_id"]: r["completion"] for r in rows if r["role"] == "solver"}
    assert solver == {"a": "answer:2", "b": "answer:4", "c": "answer:9"}
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=False)
    grpo = training_rows(teaching, problems, rollouts, verdicts, curriculum, BAND, warmup=False,
                         algorithm="grpo")
    labels = [r["completion"] for r in grpo if r["role"] == "solver"]
    assert labels and not any(label.startswith("answer:") for label in labels)


def test_a_round_with_no_kept_problem_has_no_training_rows():
    problems, rollouts, verdicts = _fixture()
    none_kept = CurateConfig(min_pass_rate=0.9, max_pass_rate=0.95, max_answers_per_problem=2)
    curriculum = curriculum_rows(problems, verdicts, none_kept, warmup=False)
    assert not any(c["kept"] for c in curriculum)
    assert training_rows(domain, problems, rollouts, verdicts, curriculum, none_kept,
                         warmup=False) == []
