"""Curate's shortcuts over columns give what the general code gives: verdict rewards taken by
position when the verdicts are stored in the rollouts' order (else joined on rollout_id), and
row ids hashed over whole columns equal to storage.fingerprint.row_id row by row."""

import random

import polars as pl
import pytest

from storage.datasets import write_atomic
from storage.fingerprint import row_id
from tasks.curriculum.columns import row_ids
from tasks.curriculum.selection import aligned, rewarded_rollouts


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


def _expected(rollouts: list[dict], verdicts: list[dict]) -> list[float | None]:
    reward = {v["rollout_id"]: v["reward"] for v in verdicts}  # the last verdict of an id
    return [reward.get(r["rollout_id"]) for r in rollouts]


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
    return verdicts


@pytest.mark.parametrize("how", ["in_order", "shuffled", "one_missing", "two_swapped",
                                 "extra_verdict"])
def test_rewards_by_position_or_join_equal_a_lookup_by_rollout_id(how, tmp_path):
    rng = random.Random(len(how))
    rollouts, verdicts = _rollouts(60, seed=len(how))
    verdicts = _reorder(verdicts, how, rng)
    files = {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
             for kind, rows in [("rollouts", rollouts), ("verdicts", verdicts)]}
    frame = rewarded_rollouts(files["rollouts"], files["verdicts"])
    assert frame["reward"].to_list() == _expected(rollouts, verdicts)
    assert frame["rollout_pos"].to_list() == list(range(len(rollouts)))
    assert frame["rollout_id"].to_list() == [r["rollout_id"] for r in rollouts]
    assert aligned(pl.Series([r["rollout_id"] for r in rollouts]),
                   pl.Series([v["rollout_id"] for v in verdicts])) == (how == "in_order")


def test_alignment_needs_every_id_present_and_equal():
    ids = pl.Series(["a", "b", "c"])
    assert aligned(ids, pl.Series(["a", "b", "c"]))
    assert not aligned(ids, pl.Series(["a", None, "c"]))  # a null is no match
    assert not aligned(pl.Series(["a", None, "c"]), pl.Series(["a", None, "c"]))
    assert not aligned(ids, pl.Series(["a", "b"]))
    assert not aligned(ids, pl.Series(["a", "c", "b"]))


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
