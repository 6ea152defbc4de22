"""Curate's shortcuts over columns give what the general code gives: verdict rewards taken by
position when the verdicts are stored in the rollouts' order (else joined on rollout_id) equal
a lookup by rollout_id, and row ids hashed over whole columns equal storage.fingerprint.row_id
row by row."""

import random

import polars as pl
import pytest

from storage.datasets import write_atomic
from storage.fingerprint import row_id
from tasks.curriculum.columns import row_ids
from tasks.curriculum.selection import rewarded_rollouts, with_positions


def _rollouts(count: int, seed: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    rollouts, verdicts = [], []
    for index in range(count):
        rid = f"p{index // 4:03d}-{index % 4}"
        rollouts.append({"rollout_id": rid, "run_id": "run-1", "round": 1,
                         "problem_id": f"p{index // 4:03d}", "sample_index": index % 4,
                         "prompt": "<solve>1+1=", "completion": "2", "completion_tokens": 1,
                         "checkpoint": "ck"})
        verdicts.append({"rollout_id": rid, "run_id": "run-1", "round": 1,
                         "problem_id": f"p{index // 4:03d}", "answer": "2",
                         "reward": rng.choice([None, 0.0, 1.0, 0.5]), "method": "reference",
                         "label": None, "agreement": None})
    return rollouts, verdicts


def _expected(rollouts: list[dict], verdicts: list[dict], rewards: list[float]) -> list[tuple]:
    """(position, problem_id, sample_index, reward) of the rollouts with one of `rewards`."""
    reward = {v["rollout_id"]: v["reward"] for v in verdicts}  # the last verdict of an id
    return [(pos, r["problem_id"], r["sample_index"], reward.get(r["rollout_id"]))
            for pos, r in enumerate(rollouts) if reward.get(r["rollout_id"]) in rewards]


def _reorder(verdicts: list[dict], how: str, rng: random.Random) -> list[dict]:
    if how == "shuffled":
        return rng.sample(verdicts, len(verdicts))
    if how == "one_missing":
        return verdicts[:-1]
    if how == "two_swapped":
        swapped = list(verdicts)
        swapped[3], swapped[4] = swapped[4], swapped[3]
        return swapped
    if how == "extra_verdict":
        return [*verdicts, {**verdicts[0], "rollout_id": "elsewhere", "reward": 1.0}]
    if how == "repeated_verdict":
        return [*verdicts[:-1], {**verdicts[2], "reward": 1.0 - (verdicts[2]["reward"] or 0.0)}]
    return verdicts


@pytest.mark.parametrize("rewards", [[1.0], [1.0, 0.0]])
@pytest.mark.parametrize("how", ["in_order", "shuffled", "one_missing", "two_swapped",
                                 "extra_verdict", "repeated_verdict"])
@pytest.mark.parametrize("source", ["files", "rows"])
def test_rewards_by_position_or_join_equal_a_lookup_by_rollout_id(source, how, rewards,
                                                                  tmp_path):
    rng = random.Random(len(how))
    rollouts, verdicts = _rollouts(60, seed=len(how))
    verdicts = _reorder(verdicts, how, rng)
    inputs = {"rollouts": rollouts, "verdicts": verdicts}
    if source == "files":
        inputs = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
                  for kind, rows in inputs.items()}
    frame = rewarded_rollouts(inputs["rollouts"], inputs["verdicts"], rewards)
    assert frame.columns == ["rollout_pos", "problem_id", "sample_index", "reward"]
    assert frame.rows() == _expected(rollouts, verdicts, rewards)
    assert len(frame) > 5


def test_a_null_rollout_id_takes_no_verdict_by_position():
    rollouts, verdicts = _rollouts(8, seed=1)
    rollouts[5]["rollout_id"] = verdicts[5]["rollout_id"] = None
    for v in verdicts:
        v["reward"] = 1.0
    frame = rewarded_rollouts(rollouts, verdicts, [1.0])
    assert frame["rollout_pos"].to_list() == [0, 1, 2, 3, 4, 6, 7]  # joined: null matches none


def test_row_ids_over_columns_equal_row_id_per_row():
    rng = random.Random(0)
    texts = ["a", 'say "hi"', "back\\slash", "ü", "line\nbreak", None, "", "\x7f", "~", "日本",
             "\U0001f600", "tab\t"]
    strings = pl.Series([rng.choice(texts) for _ in range(400)], dtype=pl.String)
    ints = pl.Series([rng.choice([1, None, -3, 10**12]) for _ in range(400)], dtype=pl.Int64)
    plain = pl.Series([rng.choice(["x", None, "run-1"]) for _ in range(400)], dtype=pl.String)
    for parts in ([strings, ints, plain], [plain], [ints, plain]):
        expected = [row_id("train_row", *values)
                    for values in zip(*[p.to_list() for p in parts], strict=True)]
        assert row_ids("train_row", parts).to_list() == expected
    assert row_ids("train_row", [plain], length=7).to_list() == [
        row_id("train_row", v)[:7] for v in plain.to_list()]
    assert row_ids("train_row", []).to_list() == []


@pytest.mark.parametrize("run_id", ["demo", 'run "quoted" \\ ü'])
def test_rollout_rows_ids_are_row_id_per_rollout(run_id):
    """The rollout stage hashes its rows' ids over columns: the id of each sample is
    row_id("rollout", run_id, round, problem_id, sample_index, checkpoint)."""
    from domains.arithmetic import ArithmeticDomain
    from models.backends import Completion, SamplingParams
    from tasks.rollout import rollout_rows

    class Backend:
        def generate(self, prompts, params, progress=None):
            return [[Completion(text=f"{i}", tokens=1) for i in range(j % 3 + 1)]
                    for j, _ in enumerate(prompts)]

    problems = [{"problem_id": f"p{j}", "text": f"{j}+1"} for j in range(5)]
    rows = rollout_rows(Backend(), ArithmeticDomain(), problems,
                        params=SamplingParams(n=3, temperature=1.0, max_new_tokens=4, seed=0),
                        checkpoint="ck", run_id=run_id, round_index=2)
    assert [(r["problem_id"], r["sample_index"]) for r in rows] == [
        (f"p{j}", i) for j in range(5) for i in range(j % 3 + 1)]
    assert [r["rollout_id"] for r in rows] == [
        row_id("rollout", run_id, 2, r["problem_id"], r["sample_index"], "ck") for r in rows]


def test_row_ids_of_many_rows_are_hashed_in_slices_in_row_order():
    count = 3 * 65536 + 5  # one slice per polars thread, up to three
    ids = pl.Series([f"r{i}" for i in range(count)], dtype=pl.String)
    rounds = pl.Series([i % 7 for i in range(count)], dtype=pl.Int64)
    got = row_ids("train_row", [ids, rounds]).to_list()
    assert len(got) == count
    for i in [0, 1, 65535, 65536, 131072, count // 2, count - 1]:
        assert got[i] == row_id("train_row", f"r{i}", i % 7)


@pytest.mark.parametrize("problem_ids", [
    ["a", "a", "b", "b", "c"],                # runs of one problem each
    ["a", "b", "a", "c", "b", "a", None],     # a problem's rollouts apart, a null id
    ["c", "c", "a", "x", "x", "b"],           # a problem without a problem row
    [None, None, "b", "a"],                   # a null id first
    [],
])
@pytest.mark.parametrize("repeated", [False, True])
def test_positions_per_run_equal_a_join_on_problem_id(problem_ids, repeated):
    rollouts = pl.DataFrame({"rollout_pos": range(len(problem_ids)), "problem_id": problem_ids,
                             "sample_index": [i % 3 for i in range(len(problem_ids))]},
                            schema={"rollout_pos": pl.UInt32, "problem_id": pl.String,
                                    "sample_index": pl.Int64})
    ids = ["b", "a", "c", *(["a"] if repeated else [])]  # a problem row twice
    problems = pl.DataFrame({"pos": range(len(ids)), "problem_id": ids},
                            schema={"pos": pl.Int64, "problem_id": pl.String})
    joined = rollouts.join(problems, on="problem_id", how="inner", maintain_order="left")
    assert with_positions(rollouts, problems).rows() == joined.select(
        "rollout_pos", "sample_index", "pos").rows()
