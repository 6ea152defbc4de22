"""The columnar curate (polars over files) gives exactly the rows of the list-of-dicts code
(bench/baseline_rows.py) on randomised rounds: same values, same order, same bytes on disk."""

import random

import pytest

from bench import baseline_rows as baseline
from configs import CurateConfig
from domains.arithmetic import ArithmeticDomain
from storage.datasets import to_table, write_atomic
from tasks.curate import curriculum_frame, training_frame

domain = ArithmeticDomain()


def _round(seed: int, *, partial: bool = False, labels: bool = False, duplicates: bool = False,
           layout: str = "shuffled"):
    """problems, rollouts, verdicts of a random round: 0-9 samples per problem, unjudged
    rewards, problems without rollouts, optional partial rewards and labels. `layout`:
    "shuffled" verdicts and samples, "in-rollout-order" verdicts (as verify writes them) of
    shuffled samples, "sorted" samples too (as rollout writes them)."""
    rng = random.Random(seed)
    problems, rollouts, verdicts = [], [], []
    for index in range(rng.randint(30, 120)):
        a, b = rng.randint(0, 99), rng.randint(0, 9)
        pid = f"p{index:03d}"
        problems.append({"problem_id": pid, "run_id": "run-1", "round": 2, "text": f"{a}+{b}",
                         "reference": None if rng.random() < 0.05 else str(a + b),
                         "level": rng.randint(1, 5), "source": "proposer",
                         "proposal_id": f"q{index}"})
        samples = list(range(rng.choice([0, 1, 2, 4, 4, 8, 9])))
        if layout != "sorted":
            rng.shuffle(samples)  # rollouts need not be stored in sample order
        for sample in samples:
            rid = f"{pid}-{sample}"
            right = rng.random() < rng.random()
            completion = str(a + b) if right else str(rng.randint(0, 120))
            rollouts.append({"rollout_id": rid, "run_id": "run-1", "round": 2, "problem_id": pid,
                             "sample_index": sample, "prompt": domain.solver_prompt(f"{a}+{b}"),
                             "completion": completion, "completion_tokens": 3,
                             "checkpoint": "ck"})
            reward = None if rng.random() < 0.1 else float(right)
            if partial and reward is not None and rng.random() < 0.2:
                reward = rng.choice([0.1, 0.3, 0.7])
            verdicts.append({"rollout_id": rid, "run_id": "run-1", "round": 2, "problem_id": pid,
                             "answer": completion, "reward": reward, "method": "reference",
                             "label": (rng.choice([None, completion]) if labels else None),
                             "agreement": 0.5})
    if duplicates:
        problems.append(dict(problems[0]))
    if layout == "shuffled":
        rng.shuffle(verdicts)
    return problems, rollouts, verdicts


CONFIGS = {
    "sft-rationalize": (CurateConfig(), "sft"),
    "sft-verified-band": (CurateConfig(min_pass_rate=0.2, max_pass_rate=0.9,
                                       solver_targets="verified", max_answers_per_problem=2,
                                       max_proposer_rows=10), "sft"),
    "sft-rationalize-ratio": (CurateConfig(rationalize_ratio=0.3, proposer_reward="variance"),
                              "sft"),
    "reference": (CurateConfig(solver_targets="reference", proposer_reward="uncertainty"), "sft"),
    "grpo": (CurateConfig(solver_targets="verified", proposer_reward="band"), "grpo"),
    "dpo": (CurateConfig(solver_targets="verified", proposer_reward="regret"), "dpo"),
    "dpo-rationalize": (CurateConfig(max_proposer_rows=0), "dpo"),
    "no-proposer": (CurateConfig(proposer_rows=False, solver_targets="verified"), "sft"),
}


def _penalties(problems, seed):
    rng = random.Random(seed)
    return {p["problem_id"]: rng.choice([0.0, 0.01, 0.2, 0.5]) for p in problems
            if rng.random() < 0.7}


@pytest.mark.parametrize("layout", ["shuffled", "in-rollout-order", "sorted"])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_curate_rows_equal_the_list_of_dicts_code(name, seed, layout, tmp_path):
    curation, algorithm = CONFIGS[name]
    curation = curation.model_copy(update={"diversity": curation.diversity.model_copy(
        update={"penalty": 0.5})})
    problems, rollouts, verdicts = _round(seed, partial=seed == 1, labels=algorithm == "grpo",
                                          duplicates=seed == 2, layout=layout)
    penalties = _penalties(problems, seed)
    paths = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
             for kind, rows in [("problems", problems), ("rollouts", rollouts),
                                ("verdicts", verdicts)]}
    old_curriculum = baseline.curriculum_rows(problems, verdicts, curation, warmup=False)
    old_rows = baseline.training_rows(domain, problems, rollouts, verdicts, old_curriculum,
                                      curation, warmup=False, penalties=penalties,
                                      algorithm=algorithm, max_pairs_per_problem=3)
    curriculum = curriculum_frame(paths["problems"], paths["verdicts"], curation, warmup=False)
    rows = training_frame(domain, paths["problems"], paths["rollouts"], paths["verdicts"],
                          curriculum, curation, warmup=False, penalties=penalties,
                          algorithm=algorithm, max_pairs_per_problem=3)
    assert curriculum.to_dicts() == old_curriculum
    assert rows.to_dicts() == old_rows
    assert len(old_rows) > 0
    for kind, old, new in [("curriculum", old_curriculum, curriculum), ("train_rows", old_rows,
                                                                        rows)]:
        before = write_atomic(kind, old, tmp_path / f"old-{kind}.parquet")
        after = write_atomic(kind, new, tmp_path / f"new-{kind}.parquet")
        assert before.checksum == after.checksum  # the same file, byte for byte


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("proposer_rows", [True, False])
def test_warmup_rows_equal_the_list_of_dicts_code(seed, proposer_rows):
    curation = CurateConfig(warmup_proposer_rows=proposer_rows, max_proposer_rows=40)
    problems, rollouts, verdicts = _round(seed)
    old_curriculum = baseline.curriculum_rows(problems, verdicts, curation, warmup=True,
                                              warmup_max_level=2)
    old_rows = baseline.training_rows(domain, problems, rollouts, verdicts, old_curriculum,
                                      curation, warmup=True)
    curriculum = curriculum_frame(problems, verdicts, curation, warmup=True, warmup_max_level=2)
    rows = training_frame(domain, problems, rollouts, verdicts, curriculum, curation, warmup=True)
    assert curriculum.to_dicts() == old_curriculum
    assert rows.to_dicts() == old_rows


@pytest.mark.parametrize("labels", ["reference", "majority"])
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_verify_metrics_equal_the_list_of_dicts_code(labels, seed, tmp_path):
    from tasks.verify import verdict_metrics

    problems, _rollouts, verdicts = _round(seed, partial=seed == 6, labels=True,
                                           duplicates=seed == 7)
    rng = random.Random(seed)
    for v in verdicts:  # free-form domains' reasons, missing answers
        if v["reward"] is None:
            v["method"] = rng.choice(["none", "no_answer", "verifier_timeout"])
        if rng.random() < 0.1:
            v["answer"] = None
    path = write_atomic("verdicts", verdicts, tmp_path / "verdicts.parquet").path
    expected = baseline.verdict_metrics(verdicts, problems, labels)
    got = verdict_metrics(path, problems, labels)
    assert got == expected and list(got) == list(expected)
    assert "unjudged_no_answer" in got and (labels == "reference" or "label_precision" in got)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("labels", ["reference", "majority"])
def test_verdicts_over_columns_equal_the_row_by_row_verdicts(seed, labels):
    from tasks.verify import verdict_frame

    problems, rollouts, _ = _round(seed)
    rng = random.Random(seed)
    for r in rollouts:  # answers the vote ties on, and completions with no answer
        r["completion"] = rng.choice([r["completion"], "7", "x", "12"])
    expected = baseline.verdict_rows(domain, rollouts, problems, labels)
    got = verdict_frame(domain, rollouts, problems, labels)
    assert got.to_dicts() == expected and len(expected) == len(rollouts)
    assert to_table("verdicts", got).equals(to_table("verdicts", expected))


def test_a_rollout_of_an_unknown_problem_is_named():
    from tasks.verify import verdict_frame

    problems, rollouts, _ = _round(1)
    known = [p for p in problems if p["problem_id"] != rollouts[0]["problem_id"]]
    with pytest.raises(ValueError, match=f"rollout {rollouts[0]['rollout_id']}: its problem"):
        verdict_frame(domain, rollouts, known, "reference")


@pytest.mark.parametrize("labels", ["reference", "majority"])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_streamed_verdicts_equal_verdicts_of_all_rows(labels, chunk_rows, tmp_path):
    import pyarrow.parquet as pq

    from configs import ScaleConfig
    from tasks.verify import stream_verdicts, verdict_rows

    problems, rollouts, _ = _round(8)
    paths = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
             for kind, rows in [("problems", problems), ("rollouts", rollouts)]}
    written = stream_verdicts(domain, ScaleConfig(rollout_shards=3), paths["rollouts"],
                              paths["problems"], labels, tmp_path / "verdicts.parquet",
                              chunk_rows=chunk_rows)["verdicts"]
    expected = verdict_rows(domain, rollouts, problems, labels)
    assert pq.read_table(written.path).to_pylist() == expected
    assert written.rows == len(expected) and not list(tmp_path.glob(".*tmp*"))


def test_streamed_verdict_files_depend_neither_on_chunks_nor_shards(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from configs import ScaleConfig
    from storage.fingerprint import file_checksum
    from tasks import verify

    monkeypatch.setattr(verify, "GROUP_ROWS", 16)
    problems, rollouts, _ = _round(10)
    paths = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
             for kind, rows in [("problems", problems), ("rollouts", rollouts)]}
    files = [verify.stream_verdicts(domain, ScaleConfig(rollout_shards=shards),
                                    paths["rollouts"], paths["problems"], "reference",
                                    tmp_path / f"verdicts-{shards}-{chunk}.parquet",
                                    chunk_rows=chunk)["verdicts"].path
             for shards in (1, 3) for chunk in (7, 1000)]
    assert len({file_checksum(path) for path in files}) == 1
    metadata = pq.ParquetFile(files[0]).metadata
    assert metadata.num_row_groups == -(-len(rollouts) // 16)


def test_streamed_verdicts_leave_nothing_when_a_part_fails(tmp_path, monkeypatch):
    from configs import ScaleConfig
    from tasks import verify

    problems, rollouts, _ = _round(9)
    paths = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
             for kind, rows in [("problems", problems), ("rollouts", rollouts)]}
    calls = []

    def failing(**kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("verifier crashed")
        return real(**kwargs)

    real = verify.verdict_frame
    monkeypatch.setattr(verify, "verdict_frame", failing)
    with pytest.raises(RuntimeError, match="verifier crashed"):
        verify.stream_verdicts(domain, ScaleConfig(), paths["rollouts"], paths["problems"],
                               "reference", tmp_path / "verdicts.parquet", chunk_rows=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["problems.parquet", "rollouts.parquet"]
