"""What a data gate reads: a stage output's frames and aggregates, and the stored outputs of a run.

A gate opens a connection (a cursor of the process's in-memory DuckDB database: a new
database costs ~18 ms, a cursor nothing), attaches the Parquet file as its temporary view `data`
(seen by that connection only), and asks for the frames its suites check, by name:

    rows          every row as stored (SELECT * FROM data)
    per_problem   verdicts grouped by problem:
                  {"problem_id": "9f..", "samples": 8, "judged": 8, "pass_rate": 0.375,
                   "distinct_answers": 3, "answer_spread": 0.2857}
    lengths       problems with their text length:
                  {"problem_id": "9f..", "text": "12+7", "text_length": 4, "level": 1}

    with gate_connection() as con:
        attach_dataset(con, "runs/demo/round-001/verdicts-5d1e2f3a4b5c.parquet")  # -> 800 rows
        gate_frame(con, "per_problem")                                            # pandas frame

Frames come back as pandas frames, the input Great Expectations' pandas source takes. DuckDB is
imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

    from storage.catalog import Catalog

# The frames a gate suite may run on, each a query over the view `data`.
FRAME_SQL = {
    "rows": "SELECT * FROM data",
    "per_problem": """
SELECT problem_id,
       count(*) AS samples,
       count(reward) AS judged,
       avg(reward) AS pass_rate,
       count(DISTINCT answer) + (count(answer) < count(*))::INTEGER AS distinct_answers,
       CASE WHEN count(*) > 1 THEN
            (count(DISTINCT answer) + (count(answer) < count(*))::INTEGER - 1) / (count(*) - 1)
       END AS answer_spread
FROM data GROUP BY problem_id ORDER BY problem_id
""",
    "lengths": "SELECT problem_id, text, length(text) AS text_length, level FROM data",
}
FRAMES = tuple(FRAME_SQL)
# The column types a frame converted through Arrow may have (gate_frame): the datasets' four
ARROW_TYPES = {"VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN"}

_ROW_COUNT_SQL = "SELECT count(*) FROM data"
_MAX_SAMPLES_PER_PROBLEM_SQL = (
    "SELECT max(n) FROM (SELECT count(*) AS n FROM data GROUP BY problem_id)")
_PROBLEM_MEANS_SQL = (
    "SELECT avg(length(text)) AS text_length, avg(level) AS level FROM data")
_STORED_OUTPUTS_SQL = """
    SELECT d.round, d.stage, d.kind, d.path, d.fingerprint, s.status, s.started_at
    FROM datasets d JOIN stages s ON d.run_id = s.run_id AND d.fingerprint = s.fingerprint
    WHERE d.run_id = ? AND s.status IN ('completed', 'gate_failed') AND d.kind != 'checkpoint'
    QUALIFY row_number() OVER (PARTITION BY d.round, d.stage, d.kind
                               ORDER BY s.finished_at DESC) = 1
"""


def _quoted(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _create_data_view(con: duckdb.DuckDBPyConnection, path: Path | str) -> None:
    con.execute(f"CREATE TEMP VIEW data AS SELECT * FROM read_parquet({_quoted(str(path))})")


_memory = threading.Lock()
_database: dict[int, duckdb.DuckDBPyConnection] = {}  # pid -> the in-memory database


def _memory_database() -> duckdb.DuckDBPyConnection:
    """This process's in-memory DuckDB database (a forked child makes its own)."""
    import duckdb

    pid = os.getpid()
    if pid not in _database:
        _database.clear()
        _database[pid] = duckdb.connect()
    return _database[pid]


@contextmanager
def gate_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one gate, closed when the block ends: a cursor of the process's
    in-memory database, so what it attaches (a temporary view) no other connection sees.

    Returns
    -------
    Iterator[duckdb.DuckDBPyConnection]
        The connection (used as a context manager: ``with gate_connection() as con``).
    """
    with _memory:
        con = _memory_database().cursor()
    try:
        yield con
    finally:
        con.close()


def attach_dataset(con: duckdb.DuckDBPyConnection, path: Path | str) -> int:
    """Attach a Parquet file as the view `data` of `con` and count its rows.

    Parameters
    ----------
    con
        A connection from `gate_connection`.
    path
        The stage output, one Parquet file.

    Returns
    -------
    int
        The number of rows in the file. Raises DuckDB's error when the file cannot be read.
    """
    _create_data_view(con, path)
    return con.sql(_ROW_COUNT_SQL).fetchall()[0][0]


def gate_frame(con: duckdb.DuckDBPyConnection, frame: str, limit: int | None = None) -> Any:
    """One named frame of the attached dataset, as a pandas frame.

    int64/bool columns have numpy dtypes without nulls and nullable Int64/boolean with them,
    text columns (an all-null one too) pandas' `str`. A frame whose columns are all of the four
    types the datasets use (VARCHAR, BIGINT, DOUBLE, BOOLEAN) is converted through Arrow, about
    five times faster than DuckDB's own conversion (`relation.df()`) on text; any other column
    type takes DuckDB's, so an odd file reaches the gate as DuckDB gives it.
    tests/storage/test_gate_data.py checks that both give the same frame.

    Parameters
    ----------
    con
        A connection with a dataset attached (`attach_dataset`).
    frame
        One of `FRAMES`: ``"rows"``, ``"per_problem"`` (verdicts) or ``"lengths"`` (problems).
    limit
        At most this many rows, the first ones in the frame's order (None: every row).

    Returns
    -------
    pandas.DataFrame
        The frame's rows. Raises KeyError for an unknown frame, DuckDB's error when the dataset
        lacks a column the frame needs.
    """
    if frame not in FRAME_SQL:
        msg = f"no gate frame {frame!r} (known: {', '.join(FRAMES)})"
        raise KeyError(msg)
    sql = FRAME_SQL[frame] if limit is None else f"{FRAME_SQL[frame]} LIMIT {int(limit)}"
    relation = con.sql(sql)
    if {str(t) for t in relation.types} <= ARROW_TYPES:
        return arrow_frame(relation.to_arrow_table())
    return duckdb_frame(relation)



def arrow_frame(table: Any) -> Any:
    """An Arrow table of `ARROW_TYPES` columns as `duckdb_frame` gives it: int64 and bool
    columns nullable (Int64, boolean) only where they hold a null."""
    import pandas as pd
    import pyarrow as pa

    nullable = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    df = table.to_pandas(types_mapper=nullable.get)
    for name, column in zip(table.column_names, table.columns, strict=True):
        if column.type in nullable and column.null_count == 0:
            df[name] = df[name].to_numpy(dtype=nullable[column.type].numpy_dtype)
    return df


def duckdb_frame(relation: Any) -> Any:
    """A relation as DuckDB converts it; an all-null text column (object) made `str` like
    every other text column."""
    df = relation.df()
    for column, duck_type in zip(relation.columns, relation.types, strict=True):
        if (str(df[column].dtype) == "object" and str(duck_type) == "VARCHAR"
                and df[column].isna().all()):
            df[column] = df[column].astype("str")
    return df


def max_samples_per_problem(con: duckdb.DuckDBPyConnection) -> int | None:
    """The most rows of one `problem_id` in the attached dataset (verdicts: samples per problem).

    Parameters
    ----------
    con
        A connection with a dataset attached (`attach_dataset`).

    Returns
    -------
    int or None
        The largest group size; None for an empty dataset. Raises DuckDB's error when the
        dataset has no `problem_id` column.
    """
    return con.sql(_MAX_SAMPLES_PER_PROBLEM_SQL).fetchall()[0][0]


def problem_means(path: Path | str) -> tuple[float | None, float | None]:
    """Mean text length and mean level of a problems file (a drift baseline).

    Parameters
    ----------
    path
        A problems dataset, one Parquet file.

    Returns
    -------
    tuple[float | None, float | None]
        ``(mean text length, mean level)``; each None when the file has no rows (or no non-null
        values). Raises DuckDB's error when the file cannot be read.
    """
    with gate_connection() as con:
        _create_data_view(con, path)
        length, level = con.sql(_PROBLEM_MEANS_SQL).fetchall()[0]
    return length, level


def stored_stage_outputs(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """The newest recorded dataset per (round, stage, kind) of a run, checkpoints excluded.

    A dataset counts when its stage attempt is ``completed`` or ``gate_failed`` (the data a
    failed gate left in place for audit); of several attempts, the one that finished last.

    Parameters
    ----------
    catalog
        The run's catalog.
    run_id
        The run.

    Returns
    -------
    list[dict[str, Any]]
        Rows with ``round, stage, kind, path, fingerprint, status, started_at``, in no
        particular order.
    """
    return [{**row, "path": catalog.resolve(row["path"])}
            for row in catalog.query(_STORED_OUTPUTS_SQL, [run_id])]
