"""The frames and aggregates a gate reads (storage.gate_data), on small Parquet files."""

from __future__ import annotations

import math
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.catalog import Catalog
from storage.datasets import SCHEMAS, WrittenDataset, dataset_path, write_atomic
from storage.gate_data import (
    FRAME_SQL,
    FRAMES,
    attach_dataset,
    duckdb_frame,
    gate_connection,
    gate_frame,
    max_samples_per_problem,
    problem_means,
    stored_stage_outputs,
)


def _verdict(problem_id: str, index: int, answer: str | None, reward: float | None) -> dict:
    return {"rollout_id": f"{problem_id}-{index}", "run_id": "r", "round": 1,
            "problem_id": problem_id, "answer": answer, "reward": reward, "method": "reference",
            "label": None, "agreement": None, "outcome": None}


VERDICTS = [
    _verdict("a", 0, "1", 1.0), _verdict("a", 1, "2", 0.0), _verdict("a", 2, None, None),
    _verdict("b", 0, "7", 1.0),
]


def _problem(problem_id: str, text: str, level: int) -> dict:
    return {"problem_id": problem_id, "run_id": "r", "round": 1, "text": text, "reference": "0",
            "level": level, "source": "seed", "proposal_id": f"q{problem_id}"}


def _write(kind: str, rows: list[dict], path) -> str:
    return str(write_atomic(kind, rows, path).path)


def test_attach_counts_rows_and_the_rows_frame_is_the_file_as_stored(tmp_path):
    path = _write("verdicts", VERDICTS, tmp_path / "it's verdicts.parquet")  # a quote in the path
    with gate_connection() as con:
        assert attach_dataset(con, path) == 4
        rows = gate_frame(con, "rows")
    assert list(rows.columns) == SCHEMAS["verdicts"].names
    assert rows["rollout_id"].tolist() == ["a-0", "a-1", "a-2", "b-0"]


def test_an_all_null_text_column_is_made_str_like_every_other_text_column(tmp_path):
    path = _write("verdicts", VERDICTS, tmp_path / "v.parquet")
    with gate_connection() as con:
        attach_dataset(con, path)
        raw = con.sql("SELECT * FROM data").df()
        rows = gate_frame(con, "rows")
    assert str(raw["label"].dtype) == "object"
    assert rows["label"].tolist() == raw["label"].astype("str").tolist()


def _sample_value(field: pa.Field, index: int):
    """Row `index` of a column: a value, a null where the column allows one (row 1), or one
    that repeats (row 2)."""
    if index == 1 and field.nullable:
        return None
    value = {"string": f"v{index % 2}", "int64": index % 2, "double": index / 4,
             "bool": index % 2 == 0}
    return value[str(field.type)]


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_frame_is_the_frame_duckdb_converts(kind, tmp_path):
    """The Arrow conversion gives, column for column, the dtypes and values DuckDB's own does:
    with and without nulls, with a limit, empty, and for the aggregated frames."""
    from pandas.testing import assert_frame_equal

    schema = SCHEMAS[kind]
    rows = [{f.name: _sample_value(f, i) for f in schema} for i in range(3)]
    files = {"rows": tmp_path / "rows.parquet", "empty": tmp_path / "empty.parquet"}
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), files["rows"])
    pq.write_table(pa.Table.from_pylist([], schema=schema), files["empty"])
    needs = {"rows": set(), "per_problem": {"problem_id", "reward", "answer"},
             "lengths": {"problem_id", "text", "level"}}
    frames = [frame for frame in FRAMES if needs[frame] <= set(schema.names)]
    checked = 0
    for path in files.values():
        with gate_connection() as con:
            attach_dataset(con, path)
            for frame in frames:
                for limit in (None, 1):
                    sql = FRAME_SQL[frame] + ("" if limit is None else f" LIMIT {limit}")
                    assert_frame_equal(gate_frame(con, frame, limit=limit),
                                       duckdb_frame(con.sql(sql)))
                    checked += 1
    assert checked == 4 * len(frames)


def test_a_column_of_another_type_reaches_the_gate_as_duckdb_converts_it(tmp_path):
    from pandas.testing import assert_frame_equal

    path = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"rollout_id": ["a", None], "round": pa.array([1, None], pa.int32()),
                             "at": pa.array([0, 1], pa.timestamp("s"))}), path)
    with gate_connection() as con:
        attach_dataset(con, path)
        rows = gate_frame(con, "rows")
        assert_frame_equal(rows, duckdb_frame(con.sql("SELECT * FROM data")))
    assert str(rows["round"].dtype) == "Int32"  # as DuckDB gives it, for the dtype check to fail


def test_per_problem_frame_aggregates_each_problem(tmp_path):
    path = _write("verdicts", VERDICTS, tmp_path / "v.parquet")
    with gate_connection() as con:
        attach_dataset(con, path)
        per_problem = gate_frame(con, "per_problem")
        assert max_samples_per_problem(con) == 3
    assert list(per_problem.columns) == ["problem_id", "samples", "judged", "pass_rate",
                                         "distinct_answers", "answer_spread"]
    a, b = per_problem.to_dict(orient="records")
    assert (a["problem_id"], a["samples"], a["judged"], a["pass_rate"]) == ("a", 3, 2, 0.5)
    assert a["distinct_answers"] == 3  # "1", "2" and the missing answer
    assert a["answer_spread"] == 1.0
    assert (b["problem_id"], b["samples"], b["distinct_answers"]) == ("b", 1, 1)
    assert b["answer_spread"] is None or math.isnan(b["answer_spread"])  # one sample: no spread


def test_lengths_frame_and_problem_means(tmp_path):
    rows = [_problem("p1", "1+1", 1), _problem("p2", "12+30", 3)]
    path = _write("problems", rows, tmp_path / "p.parquet")
    with gate_connection() as con:
        attach_dataset(con, path)
        lengths = gate_frame(con, "lengths")
    assert list(lengths.columns) == ["problem_id", "text", "text_length", "level"]
    assert lengths["text_length"].tolist() == [3, 5]
    assert problem_means(path) == (4.0, 2.0)


def test_problem_means_of_an_empty_file_are_none(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMAS["problems"]), path)
    assert problem_means(path) == (None, None)


def test_unreadable_file_and_unknown_frame_raise(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"not parquet")
    with pytest.raises(duckdb.Error):
        problem_means(path)
    with gate_connection() as con, pytest.raises(duckdb.Error):
        attach_dataset(con, path)
    good = _write("verdicts", VERDICTS, tmp_path / "v.parquet")
    with gate_connection() as con:
        attach_dataset(con, good)
        with pytest.raises(KeyError, match="known: rows, per_problem, lengths"):
            gate_frame(con, "nope")
    assert FRAMES == ("rows", "per_problem", "lengths")


def test_missing_column_raises_for_the_frames_that_need_it(tmp_path):
    table = pa.Table.from_pylist(VERDICTS, schema=SCHEMAS["verdicts"]).drop(["problem_id"])
    path = tmp_path / "v.parquet"
    pq.write_table(table, path)
    with gate_connection() as con:
        attach_dataset(con, path)
        assert len(gate_frame(con, "rows")) == 4
        with pytest.raises(duckdb.Error):
            max_samples_per_problem(con)
        with pytest.raises(duckdb.Error):
            gate_frame(con, "per_problem")


def test_connection_is_closed_after_the_block():
    with gate_connection() as con:
        con.execute("SELECT 1")
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")


def test_stored_stage_outputs_keep_the_newest_attempt_and_skip_checkpoints(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.ensure_run("r", "{}")

    def record(fingerprint: str, status: str, *, checkpoint: bool = False) -> None:
        path = dataset_path(tmp_path, "r", 1, "verdicts", fingerprint)
        outputs = [write_atomic("verdicts", VERDICTS, path)]
        if checkpoint:
            outputs.append(WrittenDataset("checkpoint", tmp_path / "ckpt", 0, "-"))
        catalog.record_completed(run_id="r", round_index=1, stage="verify",
                                 fingerprint=fingerprint, started_at=time.time(),
                                 outputs=outputs, inputs={}, status=status)

    record("a" * 32, "gate_failed")
    record("b" * 32, "completed", checkpoint=True)
    catalog.record_failed(run_id="r", round_index=1, stage="verify", fingerprint="c" * 32,
                          started_at=time.time(), error="boom")
    rows = stored_stage_outputs(catalog, "r")
    assert [(r["kind"], r["fingerprint"], r["status"]) for r in rows] == [
        ("verdicts", "b" * 32, "completed")]
    assert set(rows[0]) == {"round", "stage", "kind", "path", "fingerprint", "status",
                            "started_at"}
    assert stored_stage_outputs(catalog, "other") == []


def test_gate_connections_share_a_database_but_each_sees_its_own_dataset(tmp_path):
    import threading

    verdicts = _write("verdicts", VERDICTS, tmp_path / "v.parquet")
    problems = _write("problems", [_problem("a", "1+1", 1)], tmp_path / "p.parquet")
    with gate_connection() as first, gate_connection() as second:
        assert attach_dataset(first, verdicts) == 4
        assert attach_dataset(second, problems) == 1  # no clash with the first one's `data`
        assert gate_frame(first, "rows")["rollout_id"].tolist() == ["a-0", "a-1", "a-2", "b-0"]
    counts = []

    def gate(path: str) -> None:
        with gate_connection() as con:
            counts.append(attach_dataset(con, path))

    threads = [threading.Thread(target=gate, args=(p,)) for p in (verdicts, problems) * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counts) == [1] * 4 + [4] * 4
    with gate_connection() as con:  # nothing attached before is left behind
        with pytest.raises(duckdb.CatalogException):
            con.sql("SELECT * FROM data")
