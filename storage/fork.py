"""A new run that starts with another run's finished stages, so that runs sharing their first
stages (a benchmark's arms, all warmed up alike) compute them once:

    fork_stages(data_root, source="learning-bandit-s4", target="learning-uniform-s4",
                fingerprints=set(stage_fingerprints(uniform_config, rounds=0).values()))

Of `source`'s completed stages, those whose fingerprint is in `fingerprints` become `target`'s:
each dataset is copied under `runs/<target>/` with its `run_id` column set to `target` (so the
target's data gates, views and audit hold as for a stage it computed itself; the rows' ids and
contents are the source's), each checkpoint folder is hard-linked (its model card still names
the run that trained it), and the catalog gets their stage, gate and metric rows and the
promotion decision of a shared promote stage, in one transaction after every file is in
place. `target` then runs as a resume: a stage whose fingerprint was shared is found done, any
other computes. Pass the fingerprints the target's own config gives its stages
(tasks/fingerprints.py `stage_fingerprints`), so that only stages it would compute alike are
shared.

The target must be new: no catalog row and no folder (`ForkError` otherwise, nothing written).
A source file that no longer matches its recorded checksum is refused the same way; a fork that
fails part-way removes the target's folder and records nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage.catalog import Catalog
from storage.datasets import WrittenDataset, read_table, round_dir, write_atomic
from storage.fingerprint import checkpoint_checksum, file_checksum
from storage.paths import check_run_id, run_folder

RUN_ID_COLUMN = "run_id"


class ForkError(ValueError):
    """A fork that cannot be made; the message is one line naming the run or file."""


def fork_stages(data_root: Path, *, source: str, target: str,
                fingerprints: Collection[str]) -> list[tuple[int, str, str]]:
    """Give the new run `target` the completed stages of `source` among `fingerprints`.

    Parameters
    ----------
    data_root
        The data root holding `source`.
    source
        The run whose stages are shared.
    target
        The new run.
    fingerprints
        The stages to share (those of them `source` completed are).

    Returns
    -------
    (round, stage, fingerprint) of every stage shared, in the order `source` finished them.

    Raises
    ------
    ForkError
        `target` has catalog rows or a folder, or a shared file does not match its checksum.
    """
    check_run_id(source)
    check_run_id(target)
    catalog = Catalog(data_root)
    folder = run_folder(data_root, target)
    if catalog.has_rows(target) or os.path.lexists(folder):
        raise ForkError(f"run {target!r} already exists in {data_root} (catalog rows or"
                        f" {folder}): a fork starts a new run; pick another run id")
    shared = catalog.completed_stage_rows(source, set(fingerprints))
    if not shared:
        return []
    folder.mkdir(parents=True)
    try:
        outputs = [(fingerprint, _copy(data_root, target, round_index, kind, dataset))
                   for round_index, _, fingerprint in shared
                   for kind, dataset in catalog.completed_datasets(source, fingerprint).items()]
        catalog.record_fork(source=source, target=target,
                            fingerprints=[fingerprint for *_, fingerprint in shared],
                            outputs=outputs)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return shared


def _copy(data_root: Path, target: str, round_index: int, kind: str,
          dataset: dict[str, Any]) -> WrittenDataset:
    """One shared output written under `target`'s round folder, checked against its record."""
    path = Path(dataset["path"])
    destination = round_dir(data_root, target, round_index) / path.name
    if kind == "checkpoint":
        if not path.is_dir() or checkpoint_checksum(path) != dataset["checksum"]:
            raise ForkError(f"{path}: the checkpoint is missing or changed since it was recorded;"
                            " resume its run first")
        temp = destination.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.copytree(path, temp, copy_function=_link)
        os.replace(temp, destination)
        return WrittenDataset(kind, destination, dataset["rows"], checkpoint_checksum(destination))
    if not path.is_file() or file_checksum(path) != dataset["checksum"]:
        raise ForkError(f"{path}: the file is missing or changed since it was recorded;"
                        " resume its run first")
    table = read_table(path)
    if RUN_ID_COLUMN in table.column_names:
        index = table.column_names.index(RUN_ID_COLUMN)
        column = pa.array([target] * table.num_rows, table.schema.field(index).type)
        table = table.set_column(index, RUN_ID_COLUMN, column)
    return write_atomic(kind, table, destination)


def _link(source: str, destination: str) -> None:
    """Hard-link a file, or copy it where links cannot be made (another file system)."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
