"""The DuckDB catalog at `<data-root>/catalog.duckdb`: what ran, on what, with what result.

Tables `runs`, `stages`, `datasets`, `gates`, `metrics` and `rounds` (storage/catalog/schema.py
says what each row is and holds their migrations), and `flywheel_format`, the data root format:
a catalog of another format (one written before the current format) is refused with
`DataRootFormatError` before anything is written to it; a stage is *done* when a completed row
exists for (run_id, fingerprint) and every dataset it lists exists with its checksum.

Views `problems`, `rollouts`, `verdicts`, `curriculum`, `train_rows`, `evals`, `proposals`
read every Parquet file that a completed stage recorded, across rounds and runs.

The connection is opened per operation and closed at once, so another process (the `duckdb`
CLI, `flywheel audit`) can open the file between writes. Rows are written last: their presence
means the data they describe is complete.

Modules
    connection  opening the file (created atomically, retried while locked), recorded paths,
                read-only queries
    schema      the tables' DDL and migrations, the data root format
    errors      why a data root cannot be used (one-line messages the CLI prints)
    runs        runs and rounds
    stages      stage attempts, their datasets and metrics
    gates       gate results and the stage rows they decide
    views       the Parquet views over every completed stage's files
    forks       a run's finished stages given to a new run (storage/fork.py)
"""

from __future__ import annotations

from storage.catalog.connection import (
    LOCK_WAIT_SECONDS,
    STORAGE_CONFIG,
    CatalogFile,
    retry_while_locked,
)
from storage.catalog.errors import DataRootFormatError, DataRootUnusable
from storage.catalog.forks import ForkRecords
from storage.catalog.gates import GateRecords
from storage.catalog.runs import RunRecords
from storage.catalog.schema import FORMAT_VERSION, check_format
from storage.catalog.stages import StageRecords
from storage.catalog.views import create_parquet_view, readable_parquet

__all__ = ["FORMAT_VERSION", "LOCK_WAIT_SECONDS", "STORAGE_CONFIG", "Catalog", "CatalogFile",
           "DataRootFormatError", "DataRootUnusable", "check_format", "create_parquet_view",
           "readable_parquet", "retry_while_locked"]


class Catalog(RunRecords, StageRecords, GateRecords, ForkRecords):
    """The catalog of one data root; every method opens its own short-lived connection.

    Parameters
    ----------
    data_root
        The data root; the catalog is `<data-root>/catalog.duckdb`, created (with its
        tables) by the first writable `connect`.
    """
