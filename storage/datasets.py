"""Parquet datasets: the schemas of every stage output and their atomic writer.

Every file lives at `<data-root>/runs/<run_id>/round-<NNN>/<kind>-<fingerprint12>.parquet`, is
written once to a temporary file in the same folder, flushed, fsynced and renamed, and never
changed afterwards. Every row carries `run_id`, `round` and the ids of the rows it came from.

A sample record per kind (columns beyond these are allowed only by adding them here):

    proposals   {"proposal_id": "9f..", "run_id": "demo", "round": 1, "prompt": "<propose>L2:",
                 "text": "37+5", "level": 2, "source": "proposer", "problem_id": "a1..",
                 "drop_reason": None}          # invalid | duplicate | near_duplicate | heldout | None
    problems    {"problem_id": "a1..", "run_id": "demo", "round": 1, "text": "37+5",
                 "reference": "42", "level": 2, "source": "proposer", "proposal_id": "9f.."}
    rollouts    {"rollout_id": "c3..", "run_id": "demo", "round": 1, "problem_id": "a1..",
                 "sample_index": 0, "prompt": "<solve>37+5=", "completion": "42",
                 "completion_tokens": 3, "checkpoint": "5d.."}
    verdicts    {"rollout_id": "c3..", "run_id": "demo", "round": 1, "problem_id": "a1..",
                 "answer": "42", "reward": 1.0, "method": "reference",  # reward None: cannot judge
                 "label": "42", "agreement": 0.75}  # label: what the reward compared against
                                # (method reference: the reference; majority: the problem's
                                # majority answer); agreement: share of the problem's samples
                                # giving its majority answer (both modes); null in older files
    curriculum  {"problem_id": "a1..", "run_id": "demo", "round": 1, "level": 2, "samples": 8,
                 "judged": 8, "pass_rate": 0.25, "reward_std": 0.43, "kept": True,
                 "drop_reason": None}          # too_easy | too_hard | zero_variance | unjudged
    train_rows  {"train_row_id": "e7..", "run_id": "demo", "round": 1, "role": "solver",
                 "prompt": "<solve>37+5=", "completion": "42", "rejected": None, "weight": 1.0,
                 "problem_id": "a1..", "rollout_id": "c3..", "proposal_id": "9f.."}
                               # rejected: DPO pairs' wrong answer (completion = chosen); else None
    evals       {"run_id": "demo", "round": 1, "checkpoint": "5d..", "item_id": "h0..",
                 "level": 2, "prompt": "<solve>37+5=", "completion": "42", "answer": "42",
                 "reference": "42", "correct": True}
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.fingerprint import file_checksum

_S = pa.string()
_I = pa.int64()
_F = pa.float64()
_B = pa.bool_()

SCHEMAS: dict[str, pa.Schema] = {
    "proposals": pa.schema(
        [("proposal_id", _S), ("run_id", _S), ("round", _I), ("prompt", _S), ("text", _S),
         ("level", _I), ("source", _S), ("problem_id", _S), ("drop_reason", _S)]
    ),
    "problems": pa.schema(
        [("problem_id", _S), ("run_id", _S), ("round", _I), ("text", _S), ("reference", _S),
         ("level", _I), ("source", _S), ("proposal_id", _S)]
    ),
    "rollouts": pa.schema(
        [("rollout_id", _S), ("run_id", _S), ("round", _I), ("problem_id", _S),
         ("sample_index", _I), ("prompt", _S), ("completion", _S), ("completion_tokens", _I),
         ("checkpoint", _S)]
    ),
    "verdicts": pa.schema(
        [("rollout_id", _S), ("run_id", _S), ("round", _I), ("problem_id", _S), ("answer", _S),
         ("reward", _F), ("method", _S), ("label", _S), ("agreement", _F)]
    ),
    "curriculum": pa.schema(
        [("problem_id", _S), ("run_id", _S), ("round", _I), ("level", _I), ("samples", _I),
         ("judged", _I), ("pass_rate", _F), ("reward_std", _F), ("kept", _B),
         ("drop_reason", _S)]
    ),
    "train_rows": pa.schema(
        [("train_row_id", _S), ("run_id", _S), ("round", _I), ("role", _S), ("prompt", _S),
         ("completion", _S), ("rejected", _S), ("weight", _F), ("problem_id", _S),
         ("rollout_id", _S), ("proposal_id", _S)]
    ),
    "evals": pa.schema(
        [("run_id", _S), ("round", _I), ("checkpoint", _S), ("item_id", _S), ("level", _I),
         ("prompt", _S), ("completion", _S), ("answer", _S), ("reference", _S),
         ("correct", _B)]
    ),
}

KINDS = tuple(SCHEMAS)


class DatasetError(ValueError):
    """Rows do not match the documented schema of their kind."""


@dataclass(frozen=True)
class WrittenDataset:
    kind: str
    path: Path
    rows: int
    checksum: str


def round_dir(data_root: Path, run_id: str, round_index: int) -> Path:
    return Path(data_root) / "runs" / run_id / f"round-{round_index:03d}"


def dataset_path(data_root: Path, run_id: str, round_index: int, kind: str, fingerprint: str) -> Path:
    return round_dir(data_root, run_id, round_index) / f"{kind}-{fingerprint[:12]}.parquet"


def to_table(kind: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts) -> a table with exactly the documented columns of `kind`, in order."""
    schema = SCHEMAS[kind]
    expected = set(schema.names)
    for index, row in enumerate(rows):
        if set(row) != expected:
            missing, extra = sorted(expected - set(row)), sorted(set(row) - expected)
            msg = f"{kind} row {index}: missing columns {missing}, unexpected columns {extra}"
            raise DatasetError(msg)
    return pa.Table.from_pylist(rows, schema=schema)


def write_atomic(kind: str, rows: list[dict[str, Any]], path: Path) -> WrittenDataset:
    """Write rows as Parquet to `path` via a temp file + fsync + rename; never a partial file."""
    table = to_table(kind, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, temp, compression="zstd")
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return WrittenDataset(kind=kind, path=path, rows=table.num_rows, checksum=file_checksum(path))


def read_rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def read_table(path: Path) -> pa.Table:
    return pq.read_table(path)
