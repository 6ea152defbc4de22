import os

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.datasets import SCHEMAS, DatasetError, dataset_path, write_atomic
from storage.fingerprint import file_checksum, row_id, stable_hash, stage_fingerprint


def _problem(i):
    return {"problem_id": f"p{i}", "run_id": "r", "round": 1, "text": f"{i}+1",
            "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}",
            "task": None, "payload": None}


def test_write_atomic_roundtrip_and_checksum(tmp_path):
    path = dataset_path(tmp_path, "r", 1, "problems", "abcdef0123456789")
    written = write_atomic("problems", [_problem(i) for i in range(5)], path)
    assert path.name == "problems-abcdef012345.parquet"
    assert path.parent.name == "round-001"
    assert written.rows == 5 and written.checksum == file_checksum(path)
    assert pq.read_schema(path).names == SCHEMAS["problems"].names
    assert pl.read_parquet(path)["text"].to_list() == [f"{i}+1" for i in range(5)]
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_large_frame_is_written_a_slice_at_a_time_with_the_same_rows(tmp_path, monkeypatch):
    from storage import datasets

    monkeypatch.setattr(datasets, "FRAME_SLICE_ROWS", 4)
    rows = [_problem(i) for i in range(10)]
    written = write_atomic("problems", pl.DataFrame(rows), tmp_path / "sliced.parquet")
    assert written.rows == 10 and written.checksum == file_checksum(written.path)
    assert pq.ParquetFile(written.path).metadata.num_row_groups == 3  # 4 + 4 + 2
    assert pq.read_table(written.path).to_pylist() == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sliced.parquet"]


def test_regrouped_parts_give_the_same_file_however_the_rows_arrive(tmp_path):
    from storage.datasets import DatasetWriter

    rows = [_problem(i) for i in range(23)]
    sums = set()
    for name, cuts in [("whole", [0, 23]), ("chunks", [0, 5, 6, 17, 23]), ("ones", range(24))]:
        with DatasetWriter("problems", tmp_path / f"{name}.parquet", group_rows=8) as writer:
            for start, end in zip(list(cuts)[:-1], list(cuts)[1:], strict=True):
                writer.write(rows[start:end])
        metadata = pq.ParquetFile(writer.written.path).metadata
        assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == [
            8, 8, 7]
        assert writer.written.rows == 23
        assert pq.read_table(writer.written.path).to_pylist() == rows
        sums.add(writer.written.checksum)
    assert len(sums) == 1


def test_a_large_table_is_cut_into_row_groups_of_bounded_bytes(tmp_path, monkeypatch):
    from storage import datasets

    monkeypatch.setattr(datasets, "ROW_GROUP_BYTES", 4096)
    rows = [{**_problem(i), "text": "x" * 500} for i in range(40)]
    written = write_atomic("problems", rows, tmp_path / "long.parquet")
    metadata = pq.ParquetFile(written.path).metadata
    assert metadata.num_row_groups > 1
    assert all(metadata.row_group(g).num_rows <= 8 for g in range(metadata.num_row_groups))
    assert pq.read_table(written.path).to_pylist() == rows


def test_wrong_columns_are_rejected_before_anything_is_written(tmp_path):
    path = tmp_path / "x.parquet"
    bad = _problem(0) | {"extra": 1}
    del bad["level"]
    with pytest.raises(DatasetError, match=r"problems row 0: missing columns \['level'\],"
                                           r" unexpected columns \['extra'\]"):
        write_atomic("problems", [bad], path)
    assert not path.exists() and os.listdir(tmp_path) == []


def test_failed_write_leaves_no_temp_file(tmp_path):
    path = tmp_path / "p.parquet"
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        write_atomic("problems", [_problem(0) | {"round": "not-an-int"}], path)
    assert os.listdir(tmp_path) == []


def test_hashes_are_stable_and_sensitive():
    assert row_id("problem", "arithmetic", "2+3") == row_id("problem", "arithmetic", "2+3")
    assert row_id("problem", "arithmetic", "2+3") != row_id("problem", "arithmetic", "3+2")
    assert stable_hash({"a": 1, "b": 2}) == stable_hash({"b": 2, "a": 1})
    base = stage_fingerprint("rollout", 1, {"k": 8}, 0, {"problems": "x"})
    assert base == stage_fingerprint("rollout", 1, {"k": 8}, 0, {"problems": "x"})
    assert base != stage_fingerprint("rollout", 1, {"k": 4}, 0, {"problems": "x"})
    assert base != stage_fingerprint("rollout", 1, {"k": 8}, 0, {"problems": "y"})
    assert base != stage_fingerprint("rollout", 2, {"k": 8}, 0, {"problems": "x"})


def test_row_ids_keep_their_values():
    """Ids are content hashes shared by every run and data root: the hash of the compact,
    key-sorted JSON must never change (the values were computed with `json.dumps`)."""
    assert row_id("problem", "arithmetic", "2+3") == "da333613c0345caa"
    assert stable_hash(["rollout", "demo", 1, "3f2a9c1b0d4e5f60", 0, "ü+½", 2.5, None,
                        {"b": 1, "a": [True]}]) == "766a358e92e29dc8"
