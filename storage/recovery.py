"""Crash recovery: find what a killed run left half written, report it, discard it.

A run killed at any instant (kill -9, power loss, pre-emption) can leave, in its round folders:

    .problems-1a2b3c4d5e6f.parquet.tmp-4242   a temporary file `write_atomic` never renamed
    rollouts-1a2b3c4d5e6f.parquet             a file whose catalog row was never written
    checkpoint-1a2b3c4d5e6f/                  a checkpoint folder without its catalog row
    .base-k2j3h4/                             the scratch folder of an unfinished base model
    .train-1a2b3c4d5e6f/                      the trainer's scratch folder (kept: training
                                              resumes from its last checkpoint-N inside)

and a recorded file can later be damaged (truncated, deleted, edited). Each finding is reported
in one line naming the file, the file is removed, and the stage that owns it is recomputed:

    flywheel: discarded runs/r/round-000/rollouts-1a2b3c4d5e6f.parquet: Parquet file without a
    completed catalog row (left by an interrupted stage); it will be recomputed

A damaged recorded output also discards, one line each, every completed stage that read it
(`discard_dependents`), so no stale downstream survives its recomputation.

`sweep_run` runs once at the start of `flywheel run`/`resume`, while the run lock is held (so no
other process is writing into the run's folders), and never in a data root whose catalog is in
another data root format (`guarded_run` refuses it before taking the lock). `check_recorded`
runs in `run_stage` before a stage is skipped. A file is *recorded* when a `completed` stage
row lists it; files of a stage whose gate failed (`gate_failed`) are kept for audit.

`pause_point` is a test hook for the crash tests (tests/flows/test_resume.py, bench/chaos.py):
with FLYWHEEL_TEST_PAUSE_AT=<point> in the environment, the process writes <point> into the file
named by FLYWHEEL_TEST_PAUSE_FILE when it reaches <point>, then sleeps FLYWHEEL_TEST_PAUSE_SECONDS
(default: until killed). Points: `<stage>:<round>:start` (before computing),
`<stage>:<round>:wrote-<kind>` (a file written, its catalog row not yet), `<stage>:<round>:done`
(catalog row written: between two stages), `train:<round>:step-<n>` (after optimizer step n),
`run:recorded` (the run's config recorded, before its catalog row and Prefect server).
Unset, it costs one dictionary lookup.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.catalog import Catalog
from storage.lock import RunLock
from storage.paths import link_target, run_folder
from storage.train_stages import TRAIN_STAGES

log = logging.getLogger("flywheel.recovery")

TEMP_FILE = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")
DATASET_FILE = re.compile(r"^(?P<kind>[a-z_]+)-(?P<fp>[0-9a-f]{12})\.parquet$")
CHECKPOINT_DIR = re.compile(r"^checkpoint-(?P<fp>[0-9a-f]{12})$")
BASE_SCRATCH = re.compile(r"^\.base-")
TRAIN_SCRATCH = re.compile(  # a train stage's work folder: `.train-<fp12>`, `.train-proposer-...`
    rf"^\.(?:{'|'.join(map(re.escape, TRAIN_STAGES))})-(?P<fp>[0-9a-f]{{12}})$")
KEPT_STATUSES = ("completed", "gate_failed")


@dataclass(frozen=True)
class Discarded:
    """One piece of half-written or damaged state, already removed from disk."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"flywheel: discarded {self.path}: {self.reason}; it will be recomputed"


def notice(line: str) -> None:
    """A one-line recovery notice for the user (the CLI prints these logger lines unwrapped)."""
    log.warning("%s", line)


def remove(path: Path) -> None:
    """Delete a file, a symlink or a whole folder; a path that is already gone is no error.

    Parameters
    ----------
    path
        What to delete. A folder's contents go with it (errors ignored); a symlink is
        removed, never followed.
    """
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _discard(path: Path, reason: str, found: list[Discarded], *, recomputed: bool = True) -> None:
    remove(path)
    item = Discarded(path, reason)
    notice(str(item) if recomputed else f"flywheel: removed {path}: {reason}")
    found.append(item)


def sweep_run(run_dir: Path, recorded_paths: set[str], kept_fingerprints: set[str],
              finished_train_fingerprints: set[str]) -> list[Discarded]:
    """Remove what an interrupted run left half written in `run_dir`'s round folders.

    Each removal is reported in one line (`notice`). Entries that match none of the patterns
    of the module docstring are left alone.

    Parameters
    ----------
    run_dir
        `<data-root>/runs/<run_id>`; nothing happens when it does not exist.
    recorded_paths
        Resolved paths (every link followed) that a completed stage row lists (kept); an
        entry is compared resolved too, so a run folder reached through a link keeps them.
    kept_fingerprints
        12-character fingerprints whose outputs are kept whatever their catalog rows (stages
        whose gate failed keep their data for audit).
    finished_train_fingerprints
        12-character fingerprints of completed train stages; their `.train-*` scratch
        folders are leftovers. Other scratch folders are kept so that training resumes from
        its last saved step.

    Returns
    -------
    What was removed, in folder order, each with the reason.
    """
    found: list[Discarded] = []
    if not run_dir.is_dir():
        return found
    for entry in sorted(run_dir.iterdir()):  # the run's config record (storage/run_record.py)
        if entry.is_file() and TEMP_FILE.match(entry.name):
            _discard(entry, "temporary file never renamed into place", found, recomputed=False)
    for round_folder in sorted(run_dir.glob("round-*")):
        for entry in sorted(round_folder.iterdir()):
            name = entry.name
            if match := TEMP_FILE.match(name):
                _discard(entry, f"temporary file never renamed into place (writer pid "
                                f"{match['pid']} was interrupted)", found)
            elif BASE_SCRATCH.match(name):
                _discard(entry, "scratch folder of an interrupted base-model build", found)
            elif match := TRAIN_SCRATCH.match(name):
                if match["fp"] in finished_train_fingerprints:
                    _discard(entry, "training scratch folder of a finished train stage", found,
                             recomputed=False)
            elif match := DATASET_FILE.match(name) or CHECKPOINT_DIR.match(name):
                if str(entry.resolve()) in recorded_paths or match["fp"] in kept_fingerprints:
                    continue
                what = "checkpoint folder" if entry.is_dir() else "Parquet file"
                _discard(entry, f"{what} without a completed catalog row (left by an "
                                "interrupted stage)", found)
    return found


@contextmanager
def guarded_run(data_root: Path, run_id: str) -> Iterator[list[Discarded]]:
    """Check the data root's format, hold the run's lock, say so when a dead holder's lock is
    taken over, sweep what an interrupted run left, and yield the findings.

    When the body finishes without an exception, the run's remaining `.train-*` scratch
    folders are removed as well; the lock is released either way.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run to lock and sweep.

    Yields
    ------
    What `recover_run` removed.

    Raises
    ------
    DataRootFormatError
        The catalog is in another data root format; nothing was written (no lock, no sweep).
    RunLocked
        A live process holds the run's lock.
    """
    Catalog(data_root).check_format()  # before the lock file: a refused root stays untouched
    with RunLock(data_root, run_id) as lock:
        if lock.taken_over is not None:
            notice(f"flywheel: run {run_id} was interrupted: its last process "
                   f"({lock.taken_over.describe()}) died holding the lock; lock taken over")
        if (target := link_target(data_root, run_id)) is not None:
            notice(f"flywheel: run {run_id}: its folder {run_folder(data_root, run_id)} is a link "
                   f"to {target}, outside the data root; followed (its files are the run's own)")
        yield recover_run(Catalog(data_root), run_id)
        # The run finished: training scratch folders still here belong to fingerprints it no
        # longer needs (a config changed after a crash); they would never be cleaned otherwise.
        for scratch in sorted(run_folder(data_root, run_id).glob("round-*/.train-*")):
            _discard(scratch, "training scratch folder no finished stage needs", [],
                     recomputed=False)


def plain_notices() -> None:
    """Print recovery notices as plain, unwrapped stderr lines (one finding = one line)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False


def recover_run(catalog: Catalog, run_id: str) -> list[Discarded]:
    """`sweep_run` over `<data-root>/runs/<run_id>` with what `catalog` records for the run.

    Call it only while holding the run's lock (storage.lock.RunLock).

    Parameters
    ----------
    catalog
        The catalog of the data root; when its file does not exist yet, nothing counts as
        recorded.
    run_id
        The run.

    Returns
    -------
    What was removed (see `sweep_run`); empty when the run has no folder.
    """
    run_dir = run_folder(catalog.data_root, run_id)
    if not run_dir.is_dir():
        return []
    recorded: set[str] = set()
    kept: set[str] = set()
    finished_train: set[str] = set()
    if catalog.path.exists():
        # resolved (links followed), as `sweep_run` resolves each entry: a run folder that
        # is a link to another disk must not make its recorded outputs look like leftovers
        recorded = {str(Path(catalog.resolve(r["path"])).resolve()) for r in catalog.query(
            "SELECT d.path FROM datasets d JOIN stages s ON d.run_id = s.run_id"
            " AND d.fingerprint = s.fingerprint WHERE d.run_id = ? AND s.status = 'completed'",
            [run_id])}
        for row in catalog.query(
                "SELECT DISTINCT stage, status, fingerprint FROM stages WHERE run_id = ?",
                [run_id]):
            if row["status"] in KEPT_STATUSES and row["status"] != "completed":
                kept.add(row["fingerprint"][:12])
            if row["status"] == "completed" and row["stage"] in TRAIN_STAGES:
                finished_train.add(row["fingerprint"][:12])
    return sweep_run(run_dir, recorded, kept, finished_train)


def discard_dependents(catalog: Catalog, run_id: str, fingerprint: str) -> list[str]:
    """Discard every completed stage that read the output of `fingerprint`, transitively.

    Called when a recorded output is found damaged and will be recomputed: the recomputed file
    is byte-identical on the same machine, but not guaranteed to be after a resume elsewhere
    (another CPU, other thread counts), so nothing that read the old bytes is trusted. Each
    dependent is reported in one line and recomputed when the flow reaches it. Dependents go
    first, so a crash halfway leaves the damaged stage to trigger this again.

    Parameters
    ----------
    catalog
        The catalog of the data root.
    run_id
        The run.
    fingerprint
        The stage whose recorded output is damaged; it is not discarded here.

    Returns
    -------
    The notice line of each discarded dependent, in the order they were discarded.
    """
    rows = catalog.query(
        "SELECT round, stage, fingerprint, inputs_json FROM stages WHERE run_id = ?"
        " AND status = 'completed'", [run_id])
    readers: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for source in json.loads(row["inputs_json"] or "{}").values():
            readers.setdefault(source, []).append(row)
    found, queue, seen = [], [fingerprint], {fingerprint}
    while queue:
        for row in readers.get(queue.pop(), []):
            if row["fingerprint"] in seen:
                continue
            seen.add(row["fingerprint"])
            queue.append(row["fingerprint"])
            recorded = catalog.completed_datasets(run_id, row["fingerprint"]) or {}
            discard_outputs(recorded)
            reason = f"it read the output of {fingerprint[:12]}, which is recomputed"
            catalog.discard_stage(run_id, row["fingerprint"], reason)
            files = ", ".join(sorted(info["path"] for info in recorded.values())) or "no files"
            line = (f"flywheel: discarded round {row['round']} {row['stage']} ({files}): {reason};"
                    " it will be recomputed")
            notice(line)
            found.append(line)
    return found


def check_recorded(datasets: dict[str, dict[str, Any]]) -> tuple[Path, str] | None:
    """None when every recorded output is intact, else (the damaged path, why) for one of them.

    Each output is checked by storage/integrity.py's `output_damage`, the rule `flywheel
    validate` and `status` apply: Parquet files for existence, a readable footer (a truncated
    file has none), the recorded row count and sha256; checkpoint folders for their weights
    (every shard, each a readable safetensors file), config.json, tokenizer files and checksum.

    Parameters
    ----------
    datasets
        Kind -> {"path", "rows", "checksum"}, as `Catalog.completed_datasets` returns them;
        checked in order of kind.

    Returns
    -------
    None when every output is intact, else the first damaged path and a one-line reason.
    """
    from storage.integrity import output_damage

    for kind, info in sorted(datasets.items()):
        if (found := output_damage(kind, info)) is not None:
            return Path(info["path"]), found[1]
    return None


def discard_outputs(datasets: dict[str, dict[str, Any]]) -> None:
    """Delete every recorded output file or checkpoint folder from disk (see `remove`).

    Parameters
    ----------
    datasets
        Kind -> {"path", ...}, as `Catalog.completed_datasets` returns them.
    """
    for info in datasets.values():
        remove(Path(info["path"]))


def pause_point(point: str) -> None:
    """Test hook (see the module docstring); does nothing unless FLYWHEEL_TEST_PAUSE_AT == point.

    Parameters
    ----------
    point
        The point this code has reached, e.g. `"train:1:step-3"`.
    """
    if os.environ.get("FLYWHEEL_TEST_PAUSE_AT") != point:
        return
    marker = os.environ.get("FLYWHEEL_TEST_PAUSE_FILE")
    if marker:
        Path(marker).write_text(point)
    seconds = os.environ.get("FLYWHEEL_TEST_PAUSE_SECONDS")
    time.sleep(float(seconds) if seconds else 1e9)
