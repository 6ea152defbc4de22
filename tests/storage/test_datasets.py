import os

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.datasets import SCHEMAS, DatasetError, dataset_path, write_atomic
from storage.fingerprint import file_checksum, row_id, stable_hash, stage_fingerprint


def _problem(i):
    return {"problem_id": f"p{i}", "run_id": "r", "round": 1, "text": f"{i}+1",
            "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}"}


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
