"""Column helpers of the columnar data plane: frames from either files or rows, row ids over
whole columns.

Stages hand each other Parquet files; curate and verify read them with `pl.scan_parquet`
(lazy, only the columns a step needs). The pure functions also take rows (lists of dicts, as
the unit tests write them): `lazy_frame` turns either into a LazyFrame with the columns asked
for, a missing column read as nulls of its type.

    lazy_frame([{"problem_id": "a", "reward": 1.0}], {"problem_id": pl.String,
               "reward": pl.Float64, "label": pl.String})
    # LazyFrame problem_id | reward | label   ->   "a" | 1.0 | null
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import polars_hash  # noqa: F401 - registers the `chash` expressions (sha256 over a column)
import pyarrow as pa

_JSON_UNSAFE = r'[^ !#-\[\]-~]'  # all but printable ASCII other than " and \ (json.dumps escapes)


def lazy_frame(source: Any, columns: Mapping[str, pl.DataType | type[pl.DataType]]
               ) -> pl.LazyFrame:
    """`columns` of a Parquet file (scanned lazily), a frame, or a list of row dicts.

    Parameters
    ----------
    source
        A Parquet path, a polars DataFrame or LazyFrame, a pyarrow Table, or rows (dicts).
    columns
        Column name -> polars dtype; a column the source lacks is read as nulls of that type.

    Returns
    -------
    pl.LazyFrame
        Exactly `columns`, in that order, in the source's row order.
    """
    if isinstance(source, str | Path):
        source = pl.scan_parquet(source)
    if isinstance(source, pa.Table):
        source = pl.from_arrow(source)
    if isinstance(source, pl.DataFrame | pl.LazyFrame):
        frame = source.lazy()
        have = frame.collect_schema().names()
        return frame.select([pl.col(name).cast(dtype) if name in have
                             else pl.lit(None, dtype=dtype).alias(name)
                             for name, dtype in columns.items()])
    data = {name: [row.get(name) for row in source] for name in columns}
    return pl.DataFrame(data, schema=dict(columns)).lazy()


def json_strings(values: pl.Series) -> pl.Series:
    """Each string as `json.dumps` writes it ("null" for a null): vectorised where no character
    needs escaping, per value otherwise."""
    if values.dtype == pl.String and values.str.contains(_JSON_UNSAFE).any():
        return pl.Series(values.name, [json.dumps(v) for v in values.to_list()], dtype=pl.String)
    return pl.select(plain_json(pl.lit(values), values.dtype)).to_series().alias(values.name)


def plain_json(column: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """`column` as `json.dumps` writes it where no string needs escaping: strings quoted,
    numbers as they print, nulls "null"."""
    if dtype == pl.String:
        return pl.concat_str([pl.lit('"'), column, pl.lit('"')]).fill_null("null")
    return column.cast(pl.String).fill_null("null")


def row_ids(kind: str, parts: Sequence[pl.Series], length: int = 16) -> pl.Series:
    """`storage.fingerprint.row_id(kind, *parts)` for every row of the columns `parts`: the
    compact JSON of the list is built over whole columns (`json_pieces`), then hashed over the
    column (sha256 of its UTF-8 bytes by the polars-hash plugin, `length` hex characters). The
    plugin hashes a column on one thread, so the rows are cut into one slice per polars thread,
    built and hashed at once."""
    if not parts:
        return pl.Series([], dtype=pl.String)
    frame = pl.DataFrame({f"part{i}": part for i, part in enumerate(parts)})
    digest = pl.concat_str(json_pieces(kind, frame)).chash.sha2_256().str.slice(0, length)
    slices = max(1, min(pl.thread_pool_size(), len(frame) // 65536))
    bounds = [len(frame) * k // slices for k in range(slices + 1)]
    hashed = pl.collect_all([frame.lazy().slice(start, end - start).select(digest)
                             for start, end in zip(bounds[:-1], bounds[1:], strict=True)])
    return pl.concat([part.to_series() for part in hashed])


def json_pieces(kind: str, frame: pl.DataFrame) -> list[pl.Expr]:
    """Expressions whose concatenation is the compact JSON list [kind, *row] of every row: a
    column without nulls is put between literal quotes and commas as it is, a column with
    nulls as `plain_json`, a string column with characters to escape as `json_strings`."""
    strings = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    escaped = frame.select(pl.col(strings).str.contains(_JSON_UNSAFE).any()).row(
        0, named=True) if strings else {}
    nulls = frame.null_count().row(0, named=True)
    pieces, text = [], f"[{json.dumps(kind)}"
    for name, dtype in frame.schema.items():
        text += ","
        if escaped.get(name):
            pieces += [pl.lit(text), pl.lit(json_strings(frame[name]))]
            text = ""
        elif nulls[name]:
            pieces += [pl.lit(text), plain_json(pl.col(name), dtype)]
            text = ""
        elif dtype == pl.String:
            pieces += [pl.lit(text + '"'), pl.col(name)]
            text = '"'
        else:
            pieces += [pl.lit(text), pl.col(name).cast(pl.String)]
            text = ""
    return [*pieces, pl.lit(text + "]")]
