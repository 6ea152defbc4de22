"""Parquet datasets: the schemas of every stage output and their atomic writer.

Every file lives at `<data-root>/runs/<run_id>/round-<NNN>/<kind>-<fingerprint12>.parquet`, is
written once to a temporary file in the same folder, flushed, fsynced and renamed, and never
changed afterwards. Every row carries `run_id`, `round` and the ids of the rows it came from.

A sample record per kind (columns beyond these are allowed only by adding them here):

    proposals   {"proposal_id": "9f..", "run_id": "demo", "round": 1, "prompt": "<propose>L2:",
                 "text": "37+5", "level": 2, "source": "proposer", "problem_id": "a1..",
                 "drop_reason": None,  # invalid | duplicate | near_duplicate | heldout | benchmark
                 "checkpoint": "5d..", "backend": "vllm"}  # what sampled a proposer row (else
                                # None, and null in files written without these columns)
    problems    {"problem_id": "a1..", "run_id": "demo", "round": 1, "text": "37+5",
                 "reference": "42", "level": 2, "source": "proposer", "proposal_id": "9f..",
                 "task": None, "payload": None}
                                # task: reasoning-gym's task, python_io's mode (else null);
                                # payload: JSON the verifier reads besides text and reference
                                # (reasoning-gym's question and metadata, a program and its
                                # mode: domains/base.py), null when there is none
    rollouts    {"rollout_id": "c3..", "run_id": "demo", "round": 1, "problem_id": "a1..",
                 "sample_index": 0, "prompt": "<solve>37+5=", "completion": "42",
                 "completion_tokens": 3, "checkpoint": "5d.."}
    verdicts    {"rollout_id": "c3..", "run_id": "demo", "round": 1, "problem_id": "a1..",
                 "answer": "42", "reward": 1.0, "method": "reference",  # reward None: cannot judge
                 "label": "42", "agreement": 0.75, "outcome": None,
                 "verifier": "arithmetic/integer@1", "score": None}
                                # label: what the reward compared against (method reference:
                                # the reference; majority: the problem's majority answer);
                                # agreement: share of the problem's samples giving its majority
                                # answer (both modes); outcome: how the sandbox run of the
                                # answer ended (ok, timeout, crash, ...: domains/sandbox) where
                                # the domain ran it, else null; null in files written without
                                # these columns; verifier: the id of the verifier that
                                # judged it (`Domain.verifier`: domain, method, version);
                                # score: a reward model's raw score (its logit; reward =
                                # sigmoid(score): domains/reward_model.py), null for every
                                # other verifier and in files written without the column
    curriculum  {"problem_id": "a1..", "run_id": "demo", "round": 1, "level": 2, "samples": 8,
                 "judged": 8, "passed": 2, "pass_rate": 0.25, "reward_std": 0.43,
                 "reward_mad": 0.375, "kept": True, "drop_reason": None}
                                # drop_reason: too_easy | too_hard | zero_variance | unjudged;
                                # passed: judged samples with the full reward (1.0);
                                # reward_mad: mean |reward - pass_rate|, the bandit's reward
    train_rows  {"train_row_id": "e7..", "run_id": "demo", "round": 1, "role": "solver",
                 "prompt": "<solve>37+5=", "completion": "42", "rejected": None, "weight": 1.0,
                 "problem_id": "a1..", "rollout_id": "c3..", "proposal_id": "9f..",
                 "problem": '{"text":"37+5","reference":"42","level":2,"task":null,...}'}
                               # rejected: DPO pairs' wrong answer (completion = chosen); else None
                               # problem: a solver row's problem as its verifier judges it (JSON
                               # of the problem row, `reference` = the label: a majority vote
                               # under majority labels), which the GRPO reward judges against;
                               # null on proposer rows
    evals       {"run_id": "demo", "round": 1, "checkpoint": "5d..", "item_id": "h0..",
                 "level": 2, "prompt": "<solve>37+5=", "completion": "42", "answer": "42",
                 "reference": "42", "correct": True, "reward": 1.0, "method": "reference",
                 "sample": 0}
                               # reward null: cannot judge, `method` says why (not correct);
                               # sample: the answer's index among the item's evaluate.samples
                               # (one row per item and sample), null in files written without it
    judgements  {"judgement_id": "4b..", "run_id": "demo", "round": 1, "rollout_id": "c3..",
                 "problem_id": "a1..", "judge": "judge[/models/judge:1-10:9f..]@1",
                 "question": "37+5", "rubric": None, "prompt": "Rate the answer ...",
                 "reply": " 9", "prompt_swapped": None, "reply_swapped": None,
                 "position_consistent": None, "reward": 0.889, "reason": None}
                               # an LLM judge's call per judged rollout (tasks/judgements.py):
                               # judgement_id hashes (judge, prompt); reward null: unparseable;
                               # rubric: the question's criteria the judge wrote (rubrics = true);
                               # pairwise: prompt_swapped, reply_swapped, position_consistent
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.fingerprint import file_checksum
from storage.paths import run_folder

STRING = pa.string()
INT64 = pa.int64()
FLOAT64 = pa.float64()
BOOL = pa.bool_()

SCHEMAS: dict[str, pa.Schema] = {
    "proposals": pa.schema(
        [("proposal_id", STRING), ("run_id", STRING), ("round", INT64), ("prompt", STRING),
         ("text", STRING), ("level", INT64), ("source", STRING), ("problem_id", STRING),
         ("drop_reason", STRING), ("checkpoint", STRING), ("backend", STRING)]
    ),
    "problems": pa.schema(
        [("problem_id", STRING), ("run_id", STRING), ("round", INT64), ("text", STRING),
         ("reference", STRING), ("level", INT64), ("source", STRING), ("proposal_id", STRING),
         ("task", STRING), ("payload", STRING)]
    ),
    "rollouts": pa.schema(
        [("rollout_id", STRING), ("run_id", STRING), ("round", INT64), ("problem_id", STRING),
         ("sample_index", INT64), ("prompt", STRING), ("completion", STRING),
         ("completion_tokens", INT64), ("checkpoint", STRING)]
    ),
    "verdicts": pa.schema(
        [("rollout_id", STRING), ("run_id", STRING), ("round", INT64), ("problem_id", STRING),
         ("answer", STRING), ("reward", FLOAT64), ("method", STRING), ("label", STRING),
         ("agreement", FLOAT64), ("outcome", STRING), ("verifier", STRING),
         ("score", FLOAT64)]
    ),
    "curriculum": pa.schema(
        [("problem_id", STRING), ("run_id", STRING), ("round", INT64), ("level", INT64),
         ("samples", INT64), ("judged", INT64), ("passed", INT64), ("pass_rate", FLOAT64),
         ("reward_std", FLOAT64), ("reward_mad", FLOAT64), ("kept", BOOL),
         ("drop_reason", STRING)]
    ),
    "train_rows": pa.schema(
        [("train_row_id", STRING), ("run_id", STRING), ("round", INT64), ("role", STRING),
         ("prompt", STRING), ("completion", STRING), ("rejected", STRING), ("weight", FLOAT64),
         ("problem_id", STRING), ("rollout_id", STRING), ("proposal_id", STRING),
         ("problem", STRING)]
    ),
    "evals": pa.schema(
        [("run_id", STRING), ("round", INT64), ("checkpoint", STRING), ("item_id", STRING),
         ("level", INT64), ("prompt", STRING), ("completion", STRING), ("answer", STRING),
         ("reference", STRING), ("correct", BOOL), ("reward", FLOAT64), ("method", STRING),
         ("sample", INT64)]
    ),
    "judgements": pa.schema(
        [("judgement_id", STRING), ("run_id", STRING), ("round", INT64), ("rollout_id", STRING),
         ("problem_id", STRING), ("judge", STRING), ("question", STRING), ("rubric", STRING),
         ("prompt", STRING), ("reply", STRING), ("prompt_swapped", STRING),
         ("reply_swapped", STRING), ("position_consistent", BOOL), ("reward", FLOAT64),
         ("reason", STRING)]
    ),
}

KINDS = tuple(SCHEMAS)
# Columns a row may leave out (they are null then): proposals are sampled by a checkpoint on a
# backend only when the proposer wrote them, not the domain's generator; verdicts have a sandbox
# outcome only where the sandbox ran the answer (python_io), a raw score only where a reward
# model judged it; a problem has a task and a payload
# only in the domains whose verifier reads them; proposer training rows have no problem; eval
# rows of files written before several samples per item existed have no sample index.
OPTIONAL: dict[str, frozenset[str]] = {"proposals": frozenset({"checkpoint", "backend"}),
                                       "verdicts": frozenset({"outcome", "verifier", "score"}),
                                       "problems": frozenset({"task", "payload"}),
                                       "train_rows": frozenset({"problem"}),
                                       "evals": frozenset({"reward", "method", "sample"})}


FRAME_SLICE_ROWS = 65536  # rows of a large polars frame converted and written at once
ROW_GROUP_BYTES = 64 << 20  # a row group holds about this much data, decoded (long texts)
ROW_GROUP_ROWS = 1 << 20  # and at most this many rows (pyarrow's default)


class DatasetError(ValueError):
    """Rows do not match the documented schema of their kind."""


@dataclass(frozen=True)
class WrittenDataset:
    """A file `write_atomic` wrote: what its catalog row records (kind, path, rows, sha256)."""

    kind: str
    path: Path
    rows: int
    checksum: str


def round_dir(data_root: Path, run_id: str, round_index: int) -> Path:
    """The folder of one round of a run, which holds every file its stages write.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run.
    round_index
        The round (0 is the warm-up).

    Returns
    -------
    `<data-root>/runs/<run_id>/round-<NNN>` (not created here).
    """
    return run_folder(data_root, run_id) / f"round-{round_index:03d}"


def dataset_path(
    data_root: Path, run_id: str, round_index: int, kind: str, fingerprint: str
) -> Path:
    """Where a stage's dataset of `kind` lives.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run.
    round_index
        The round the stage belongs to.
    kind
        The dataset kind, one of `KINDS`.
    fingerprint
        The stage's fingerprint; its first 12 characters name the file.

    Returns
    -------
    `<data-root>/runs/<run_id>/round-<NNN>/<kind>-<fingerprint12>.parquet`
    """
    return round_dir(data_root, run_id, round_index) / f"{kind}-{fingerprint[:12]}.parquet"


def to_table(kind: str, rows: Any) -> pa.Table:
    """Rows -> a table with exactly the documented columns of `kind`, in order.

    Parameters
    ----------
    kind
        The dataset kind, one of `KINDS`.
    rows
        One dict per row, keyed by exactly the columns of `SCHEMAS[kind]` (those of
        `OPTIONAL[kind]` may be left out: null); or a table: a pyarrow Table or anything with
        `to_arrow()` (a polars DataFrame) with exactly those columns, in any order, cast to
        the documented types.

    Returns
    -------
    A pyarrow table with the schema `SCHEMAS[kind]`, one chunk per column.

    Raises
    ------
    DatasetError
        A row (or the table) lacks a documented column or has one that is not documented;
        the message names the row's index (or the table) and the columns.
    """
    schema = SCHEMAS[kind]
    expected, optional = set(schema.names), OPTIONAL.get(kind, frozenset())
    if hasattr(rows, "to_arrow") and not isinstance(rows, pa.Table):
        # One chunk first: polars' rechunk moves string views, not the texts, and then
        # `combine_chunks` below copies nothing (exporting the views copies the texts once).
        rows = (rows.rechunk() if hasattr(rows, "rechunk") else rows).to_arrow()
    if isinstance(rows, pa.Table):
        if set(rows.column_names) != expected or len(rows.column_names) != len(expected):
            missing = sorted(expected - set(rows.column_names))
            extra = sorted(set(rows.column_names) - expected)
            msg = f"{kind} table: missing columns {missing}, unexpected columns {extra}"
            raise DatasetError(msg)
        return rows.select(schema.names).cast(schema).combine_chunks()
    for index, row in enumerate(rows):
        if row.keys() == expected:  # every column: the common case, checked at a third the cost
            continue
        missing, extra = sorted(expected - optional - set(row)), sorted(set(row) - expected)
        if missing or extra:
            msg = f"{kind} row {index}: missing columns {missing}, unexpected columns {extra}"
            raise DatasetError(msg)
    return pa.Table.from_pylist(rows, schema=schema)


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group for `table`: about `ROW_GROUP_BYTES` of its data decoded, at most
    `ROW_GROUP_ROWS`, so a reader that decodes one row group at a time (curate reading the
    chosen rollouts' texts) holds a bounded share of a file of long completions."""
    if not table.num_rows:
        return ROW_GROUP_ROWS
    per_row = max(table.nbytes / table.num_rows, 1.0)
    return max(1, min(ROW_GROUP_ROWS, int(ROW_GROUP_BYTES / per_row)))


def write_atomic(kind: str, rows: Any, path: Path) -> WrittenDataset:
    """Write rows as Parquet to `path` via a temp file + fsync + rename; never a partial file.

    The temporary file `.<name>.tmp-<pid>` sits in the same folder (so the rename is atomic)
    and is removed if writing fails; `path`'s folder is created when missing.

    Parameters
    ----------
    kind
        The dataset kind, one of `KINDS`.
    rows
        The rows or a table, checked by `to_table`. A polars frame of more than
        `FRAME_SLICE_ROWS` rows is converted and written a slice (one row group) at a time, so
        its texts are not held twice (polars' strings are copied on the way to Arrow).
    path
        The destination, usually from `dataset_path`.

    Returns
    -------
    The written file's kind, path, row count and sha256, for its catalog row.

    Raises
    ------
    DatasetError
        A row does not match the schema of `kind` (see `to_table`); nothing is written.
    """
    if hasattr(rows, "slice") and hasattr(rows, "to_arrow") and len(rows) > FRAME_SLICE_ROWS:
        with DatasetWriter(kind, path) as writer:  # a large polars frame: one slice at a time
            for start in range(0, len(rows), FRAME_SLICE_ROWS):
                writer.write(rows.slice(start, FRAME_SLICE_ROWS))
        return writer.written
    table = to_table(kind, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, temp, compression="zstd", row_group_size=row_group_rows(table))
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return WrittenDataset(kind=kind, path=path, rows=table.num_rows, checksum=file_checksum(path))


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a Parquet dataset as a dict.

    Parameters
    ----------
    path
        The Parquet file.

    Returns
    -------
    One dict per row, keyed by column name, in file order.
    """
    return read_table(path).to_pylist()


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A Parquet dataset as a pyarrow table.

    Read through `pq.ParquetFile`, not `pq.read_table`: the latter imports pyarrow.dataset and
    with it pandas, 0.7 s that a resumed run, which reads an evals file per evaluate stage and
    no frame, would pay only for that.

    Parameters
    ----------
    path
        The Parquet file.
    columns
        The columns to read (default all).

    Returns
    -------
    The whole file, `columns` or all of them.
    """
    with pq.ParquetFile(path) as file:
        return file.read(columns=columns)


class DatasetWriter:
    """Write a dataset in row groups as its parts arrive, under the atomic-write contract.

        with DatasetWriter("verdicts", path) as writer:
            for part in parts:          # rows (dicts) or tables, in the dataset's row order
                writer.write(part)
        writer.written                  # WrittenDataset(kind, path, rows, checksum)

    Parts go to the temporary file `.<name>.tmp-<pid>` beside `path` (one row group or more
    each), which is fsynced and renamed onto `path` when the block ends; if it ends by an
    exception (an interruption included) the temporary file is removed and `path` is untouched.
    Only the part being written is held in memory. With `group_rows`, the parts are regrouped
    into row groups of exactly that many rows (the last: the rest), so the file's bytes do not
    depend on how its rows arrived (in chunks of one process, or per shard from Ray); fewer
    than `group_rows` rows are held meanwhile.
    """

    def __init__(self, kind: str, path: Path, *, group_rows: int | None = None) -> None:
        self.kind, self.path = kind, Path(path)
        self.temp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.rows = 0
        self.written: WrittenDataset | None = None
        self._writer: pq.ParquetWriter | None = None
        self.group_rows = group_rows
        self._pending: list[pa.Table] = []

    def __enter__(self) -> DatasetWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.temp, SCHEMAS[self.kind], compression="zstd")
        return self

    def write(self, rows: Any) -> None:
        """Append rows (dicts) or a table (checked by `to_table`) as the next row group(s)."""
        table = to_table(self.kind, rows)
        if self.group_rows is None:
            self._write_groups(table)
            return
        self._pending.append(table)
        held = sum(part.num_rows for part in self._pending)
        if held >= self.group_rows:
            whole = pa.concat_tables(self._pending)
            cut = held - held % self.group_rows
            for start in range(0, cut, self.group_rows):
                self._write_groups(whole.slice(start, self.group_rows))
            self._pending = [whole.slice(cut)]

    def _write_groups(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table, row_group_size=row_group_rows(table))
            self.rows += table.num_rows

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None and self._pending:
                self._write_groups(pa.concat_tables(self._pending))
            self._pending = []
            self._writer.close()
            if exc_type is None:
                with open(self.temp, "rb") as handle:
                    os.fsync(handle.fileno())
                os.replace(self.temp, self.path)
                self.written = WrittenDataset(kind=self.kind, path=self.path, rows=self.rows,
                                              checksum=file_checksum(self.path))
        finally:
            self.temp.unlink(missing_ok=True)
