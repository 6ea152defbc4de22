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

The target must be new: no catalog row and no folder (`RunExists` otherwise, nothing written).
A shared output that is not as recorded (`storage/recovery.py check_recorded`, the rule resume
applies) is refused with `ForkError` before anything is written; a fork that fails part-way
removes the target's folder and records nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage.catalog import Catalog
from storage.datasets import WrittenDataset, read_table, write_atomic
from storage.paths import check_run_id, run_folder
from storage.recovery import check_recorded

RUN_ID_COLUMN = "run_id"


class ForkError(ValueError):
    """A fork that cannot be made; the message is one line naming the run or file."""


class RunExists(ForkError):
    """The target run already has catalog rows or a folder."""


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
    RunExists
        `target` has catalog rows or a folder.
    ForkError
        A shared output is not as recorded (storage/recovery.py `check_recorded`).
    """
    check_run_id(source)
    check_run_id(target)
    catalog = Catalog(data_root)
    folder = run_folder(data_root, target)
    if catalog.has_rows(target) or os.path.lexists(folder):
        raise RunExists(f"run {target!r} already exists in {data_root} (catalog rows or"
                        f" {folder}): a fork starts a new run; pick another run id")
    wanted = set(fingerprints)
    shared = {fingerprint: recorded.datasets
              for fingerprint, recorded in catalog.recorded_stages(source).items()
              if fingerprint in wanted and recorded.status == "completed"}
    for datasets in shared.values():
        if (damage := check_recorded(datasets)) is not None:
            path, why = damage
            raise ForkError(f"{path}: changed since it was recorded ({why}); resume run"
                            f" {source!r} to recompute it, then fork")
    if not shared:
        return []
    folder.mkdir(parents=True)
    try:
        outputs = [(fingerprint, _copy(Path(info["path"]), folder, target, kind, info))
                   for fingerprint, datasets in shared.items()
                   for kind, info in datasets.items()]
        return catalog.record_fork(source=source, target=target, fingerprints=list(shared),
                                   outputs=outputs)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _copy(path: Path, folder: Path, target: str, kind: str,
          info: dict[str, Any]) -> WrittenDataset:
    """One shared output at the same place under `target`'s folder (`round-NNN/<name>`)."""
    destination = folder / path.parent.name / path.name
    if kind == "checkpoint":
        temp = destination.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.copytree(path, temp, copy_function=_link)
        os.replace(temp, destination)
        return WrittenDataset(kind, destination, info["rows"], info["checksum"])
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
