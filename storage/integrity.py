"""Whether a run's recorded outputs are still what the catalog recorded: `flywheel validate`
compares every one, `flywheel status` those changed since.

A recorded output is a `datasets` row of a completed (or gate_failed) stage: a Parquet file with
its row count and sha256, or a checkpoint folder with the sha256 of its weights
(storage/fingerprint.py `checkpoint_checksum`). A gate checks what a file says; only this
catches a value changed within its range (a reward flipped from 1 to 0) or a checkpoint that
lost a file. Each output is checked in this order, and only its first problem is reported (the
later checks would only repeat it):

    problem             Parquet file                           checkpoint folder
    missing             the file is gone                       the folder is gone
    unreadable          no valid footer (truncated)            -
    row_count           rows differ from the recorded count    -
    no_weights          -                                      no model.safetensors, or its index
                                                               or a shard the index names
    weights_unreadable  -                                      a weights file is not safetensors
                                                               (a header that reads and whose
                                                               tensors end where the file does)
    config              -                                      config.json missing or not an object
    tokenizer           -                                      tokenizer_config.json or every
                                                               vocabulary file missing
    checksum            its sha256 differs                     its weights' sha256 differs

    Damage(round=1, stage="verify", kind="verdicts", problem="checksum",
           path="/data/runs/demo/round-001/verdicts-5d1e2f3a4b5c.parquet",
           detail="changed since it was recorded (sha256 7c6b5a4d3e2f..., recorded 3f2a...)")

Cheap on purpose: each file is read once for its sha256, streamed in 1 MiB blocks; a Parquet
file's footer and a weights file's header are read, never a tensor or a row. With
`checksums="modified"` (`flywheel status`) only the files modified after their stage's catalog
row was written are hashed: an edit after the run moves a file's modification time past it, so
it is caught for the cost of a `stat`; a file whose time was set back on purpose is left to
`flywheel validate`, which hashes every file. (A data root copied without its files' times,
`cp -r` rather than `cp -a`, is hashed whole by every `status`: slower, never wrong.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq

from storage import interruption
from storage.catalog import Catalog
from storage.fingerprint import checkpoint_checksum, file_checksum, weight_files

Checksums = Literal["all", "modified"]
TOKENIZER_CONFIG = "tokenizer_config.json"  # `save_pretrained` of every tokenizer writes it
# ... and one of these: a fast tokenizer's tokenizer.json, or a slow one's vocabulary
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                    "spiece.model")

# Every recorded output of a run, with when its stage's row was written (`recorded_at`)
_RECORDED_OUTPUTS_SQL = """
    SELECT d.round, d.stage, d.kind, d.path, d.rows, d.checksum,
           max(s.finished_at) AS recorded_at
    FROM datasets d JOIN stages s ON s.run_id = d.run_id AND s.fingerprint = d.fingerprint
         AND s.status IN ('completed', 'gate_failed')
    WHERE d.run_id = ?
    GROUP BY d.round, d.stage, d.kind, d.path, d.rows, d.checksum
    ORDER BY d.round, min(s.started_at), d.kind
"""


@dataclass(frozen=True)
class Damage:
    """One recorded output that is not as the catalog recorded it (module docstring)."""

    round: int
    stage: str
    kind: str
    path: str
    problem: str
    detail: str

    def __str__(self) -> str:
        return f"round {self.round} {self.stage}: {self.path}: {self.detail}"


@dataclass(frozen=True)
class IntegrityReport:
    """What `check_run` compared: how many recorded outputs, and those found damaged."""

    checked: int
    damaged: list[Damage]


def output_damage(kind: str, info: dict[str, Any], *,
                  modified_since: float | None = None) -> tuple[str, str] | None:
    """The first problem of one recorded output, or None when it is as recorded.

    Parameters
    ----------
    kind
        Its dataset kind; `checkpoint` for a checkpoint folder.
    info
        {"path", "rows", "checksum"} as the catalog records them (`Catalog.completed_datasets`).
    modified_since
        Hash only the files modified after this time (epoch seconds: when the stage's row was
        written); None hashes every file.

    Returns
    -------
    (problem, detail): a name of the module docstring's table and one line saying how it
    differs; None when the output is intact.
    """
    path = Path(info["path"])
    if not path.exists():
        return "missing", f"recorded {kind} output is missing"
    if kind == "checkpoint":
        return _checkpoint_damage(path, info, modified_since)
    try:
        rows = pq.read_metadata(path).num_rows
    except Exception:  # noqa: BLE001 - any unreadable footer means a damaged file
        interruption.check()  # unless the read was interrupted
        return "unreadable", "truncated or unreadable Parquet file (no valid footer)"
    if rows != info["rows"]:
        return "row_count", f"Parquet file has {rows} rows, the catalog recorded {info['rows']}"
    if _to_hash([path], modified_since) and (found := file_checksum(path)) != info["checksum"]:
        return "checksum", f"changed since it was recorded ({_sha(found, info['checksum'])})"
    return None


def _checkpoint_damage(folder: Path, info: dict[str, Any],
                       modified_since: float | None) -> tuple[str, str] | None:
    try:
        weights = weight_files(folder)
    except (FileNotFoundError, ValueError) as exc:
        return "no_weights", f"checkpoint folder lacks weights ({_without(folder, exc)})"
    for file in weights:
        if file.suffix == ".safetensors" and (why := _unreadable_safetensors(file)):
            return "weights_unreadable", f"{file.name} is not a readable safetensors file ({why})"
    config = folder / "config.json"
    if not config.is_file():
        return "config", "checkpoint folder has no config.json"
    try:
        readable = isinstance(json.loads(config.read_text()), dict)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        readable = False
    if not readable:
        return "config", "config.json is not a JSON object"
    if not (folder / TOKENIZER_CONFIG).is_file() or not any(
            (folder / name).is_file() for name in VOCABULARY_FILES):
        return "tokenizer", (f"tokenizer files are missing (it needs {TOKENIZER_CONFIG} and one "
                             f"of {', '.join(VOCABULARY_FILES)})")
    if _to_hash(weights, modified_since) and (
            found := checkpoint_checksum(folder)) != info["checksum"]:
        return "checksum", ("weights changed since they were recorded "
                            f"({_sha(found, info['checksum'])})")
    return None


def _unreadable_safetensors(file: Path) -> str | None:
    """Why `file` does not read as safetensors (its header, and tensors that end where the
    file does: a truncated or overwritten file fails), or None; no tensor is read."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="numpy") as weights:
            weights.keys()
    except (SafetensorError, OSError) as exc:
        return str(exc)
    return None


def _to_hash(files: list[Path], modified_since: float | None) -> bool:
    return modified_since is None or any(file.stat().st_mtime > modified_since for file in files)


def _without(folder: Path, exc: Exception) -> str:
    """The message of `exc` less its leading folder (the damage line names it already)."""
    return str(exc).removeprefix(f"{folder}: ")


def _sha(found: str, recorded: str | None) -> str:
    return f"sha256 {found[:12]}..., recorded {(recorded or '-')[:12]}..."


def check_run(catalog: Catalog, run_id: str, *, round_index: int | None = None,
              stage: str | None = None, checksums: Checksums = "all") -> IntegrityReport:
    """Compare every recorded output of a run (or of one round or stage) with the catalog.

    Parameters
    ----------
    catalog
        The data root's catalog (paths are resolved in its data root).
    run_id
        The run.
    round_index, stage
        Only this round, only this stage.
    checksums
        "all" (`flywheel validate`) or "modified" (`flywheel status`): see the module docstring.

    Returns
    -------
    How many outputs were compared, and one `Damage` per damaged one, in the order the stages
    ran.
    """
    damaged = []
    rows = [row for row in catalog.query(_RECORDED_OUTPUTS_SQL, [run_id])
            if (round_index is None or row["round"] == round_index)
            and (stage is None or row["stage"] == stage)]
    for row in rows:
        info = {**row, "path": catalog.resolve(row["path"])}
        since = row["recorded_at"] if checksums == "modified" else None
        try:
            found = output_damage(row["kind"], info, modified_since=since)
        except OSError as exc:  # a file this user may not read, an I/O error of the disk
            found = "unreadable", f"cannot be read ({exc.strerror or exc})"
        if found is not None:
            damaged.append(Damage(row["round"], row["stage"], row["kind"], info["path"], *found))
    return IntegrityReport(checked=len(rows), damaged=damaged)


def damaged_line(run_id: str, damaged: list[Damage]) -> str:
    """`flywheel status`'s first line for a completed run with damaged outputs."""
    more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
    return (f"run {run_id}: damaged: {damaged[0]}{more}; `flywheel validate {run_id}` names "
            f"every damaged file, `flywheel resume {run_id}` recomputes them")
