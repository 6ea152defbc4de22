"""Verify on hand-made rollouts: reference and majority labels, agreement, label precision."""

import math

import pytest

from domains.arithmetic import ArithmeticDomain
from storage.datasets import to_table
from tasks.verify import verdict_metrics, verdict_rows

domain = ArithmeticDomain()
# problem -> (reference, completions of its k = 4 samples)
CASES = {
    "a": ("2", ["2", "2", "3", "2"]),    # majority right, agreement 0.75
    "b": ("9", ["8", "8", "9", "x"]),    # majority wrong ("8"); "x" has no answer
    "c": ("5", ["x", "x", "x", "x"]),    # no answer at all: no majority label
    "d": (None, ["4", "6", "6", "4"]),   # no reference; tie 4 / 6 -> "4"
}


def _inputs():
    problems = [{"problem_id": pid, "reference": ref} for pid, (ref, _) in CASES.items()]
    rollouts = [{"rollout_id": f"{pid}{i}", "run_id": "r", "round": 1, "problem_id": pid,
                 "completion": completion}
                for pid, (_, completions) in CASES.items()
                for i, completion in enumerate(completions)]
    return problems, rollouts


def _by_problem(rows):
    out = {}
    for r in rows:
        out.setdefault(r["problem_id"], []).append(r)
    return out


def test_reference_labels_keep_the_old_rewards_and_record_agreement():
    problems, rollouts = _inputs()
    rows = _by_problem(verdict_rows(domain, rollouts, problems, "reference"))
    assert [r["reward"] for r in rows["a"]] == [1.0, 1.0, 0.0, 1.0]
    assert [r["reward"] for r in rows["b"]] == [0.0, 0.0, 1.0, 0.0]
    assert [r["reward"] for r in rows["c"]] == [0.0] * 4
    assert [r["reward"] for r in rows["d"]] == [None] * 4
    assert {r["method"] for r in rows["a"] + rows["b"] + rows["c"]} == {"reference"}
    assert {r["method"] for r in rows["d"]} == {"none"}
    assert {r["label"] for r in rows["b"]} == {"9"} and {r["label"] for r in rows["d"]} == {None}
    assert {r["agreement"] for r in rows["a"]} == {0.75}
    assert {r["agreement"] for r in rows["b"]} == {0.5}
    assert {r["agreement"] for r in rows["c"]} == {0.0}
    assert [r["answer"] for r in rows["b"]] == ["8", "8", "9", None]


def test_majority_labels_reward_agreement_with_the_vote():
    problems, rollouts = _inputs()
    rows = verdict_rows(domain, rollouts, problems, "majority")
    to_table("verdicts", rows)  # the documented schema
    by = _by_problem(rows)
    assert [r["reward"] for r in by["a"]] == [1.0, 1.0, 0.0, 1.0]
    assert [r["reward"] for r in by["b"]] == [1.0, 1.0, 0.0, 0.0]  # the wrong majority is rewarded
    assert {r["label"] for r in by["b"]} == {"8"}
    assert [r["reward"] for r in by["c"]] == [None] * 4           # no vote: cannot judge
    assert {r["method"] for r in by["c"]} == {"none"} and {r["label"] for r in by["c"]} == {None}
    assert [r["reward"] for r in by["d"]] == [1.0, 0.0, 0.0, 1.0]  # no reference needed; tie -> "4"
    assert {r["method"] for r in by["a"] + by["b"] + by["d"]} == {"majority"}
    # the pass rate of a problem under majority labels is its agreement
    for pid in ("a", "b", "d"):
        assert sum(r["reward"] for r in by[pid]) / 4 == by[pid][0]["agreement"]


def test_label_precision_metrics():
    problems, rollouts = _inputs()
    rows = verdict_rows(domain, rollouts, problems, "majority")
    metrics = verdict_metrics(rows, problems, "majority")
    # problems with both a label and a reference: a (right), b (wrong); c has no label,
    # d no reference
    assert metrics["labelled_problems"] == 2
    assert metrics["label_precision"] == 0.5
    assert metrics["label_precision_confident"] == 1.0  # only a has more than half the samples
    assert metrics["unjudged"] == 4 and metrics["verdicts"] == 16
    assert metrics["mean_agreement"] == pytest.approx((0.75 + 0.5 + 0.0 + 0.5) / 4)
    assert metrics["tied_share"] == 0.25
    reference_metrics = verdict_metrics(verdict_rows(domain, rollouts, problems), problems)
    # references are the labels: nothing to measure
    assert "label_precision" not in reference_metrics
    assert reference_metrics["mean_agreement"] == metrics["mean_agreement"]


def test_mean_reward_is_the_same_in_any_row_order():
    """Graded rewards whose float sum depends on the order it is taken in: the verify stage's
    mean is exactly rounded, so every order (and every polars version's own) gives one value."""
    rewards = [0.1, 0.2, 0.3, 0.7, 1 / 3, 0.9]
    rows = [{"rollout_id": f"r{i}", "problem_id": f"p{i}", "reward": r, "method": "reference",
             "answer": "1", "label": None} for i, r in enumerate(rewards)]
    means = {verdict_metrics(order, [])["mean_reward"] for order in (rows, rows[::-1],
                                                                     rows[1:] + rows[:1])}
    assert means == {math.fsum(rewards) / len(rewards)}
    assert sum(rewards) != sum(rewards[::-1])  # the case a plain sum gets wrong


def test_unknown_label_mode_is_an_error():
    problems, rollouts = _inputs()
    with pytest.raises(ValueError, match="verify.labels = 'vote'"):
        verdict_rows(domain, rollouts, problems, "vote")


def test_older_verdict_files_without_label_read_as_null_next_to_new_ones(tmp_path):
    import duckdb
    import pyarrow.parquet as pq

    from storage.catalog import create_parquet_view

    problems, rollouts = _inputs()
    new = to_table("verdicts", verdict_rows(domain, rollouts, problems, "majority"))
    old = new.drop_columns(["label", "agreement"])  # the schema before this change
    pq.write_table(old, tmp_path / "a-old.parquet")
    pq.write_table(new, tmp_path / "b-new.parquet")
    (tmp_path / "c-damaged.parquet").write_bytes(b"not parquet")
    con = duckdb.connect()
    create_parquet_view(con, "verdicts", [str(tmp_path / "a-old.parquet"),
                                          str(tmp_path / "b-new.parquet")])
    rows = con.execute("SELECT count(*), count(label), count(agreement) FROM verdicts").fetchone()
    assert rows == (32, 12, 16)  # 16 old rows with nulls; 12 of the 16 new rows have a label
    # a damaged file does not stop the view from being defined (the stage runner recomputes it)
    create_parquet_view(con, "damaged", [str(tmp_path / "b-new.parquet"),
                                         str(tmp_path / "c-damaged.parquet")])
