"""Run ids and the folders they name: the one rule every command applies to a run id before it
reads or writes anything, and the folder of a run, which stays inside the data root.

    <data-root>/runs/<run_id>/          run_folder(data_root, run_id)

A run id is 1 to 100 ASCII characters: letters, digits, '.', '_' and '-', the first a letter or
a digit, matched in full (`re.fullmatch`, so no trailing newline slips through). It is thus one
path component that is never empty, `.`, `..`, absolute or holding a '/': `runs/<run_id>` is
always a folder directly under `<data-root>/runs/`. A bad id raises `InvalidRunId`, one line
naming the id and the rule (the CLI prints it and exits 2; nothing was read or written).

A run folder that is a symbolic link (to another disk, say) is followed on purpose:
`link_target` says where it leads, `flywheel run`/`resume` report it in one line, and the files
reached through it are the run's own: the catalog records them relative to the data root
(`CatalogFile.relative`) and the crash-recovery sweep compares resolved paths on both sides
(storage/recovery.py), so a recorded output is never mistaken for a leftover.
"""

from __future__ import annotations

import re
from pathlib import Path

RUN_ID_MAX_LENGTH = 100
# for re.fullmatch (no anchors: `$` would accept a trailing newline)
RUN_ID_PATTERN = rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{RUN_ID_MAX_LENGTH - 1}}}"
RUN_ID_RULE = (f"use 1 to {RUN_ID_MAX_LENGTH} letters, digits, '.', '_' or '-', starting with "
               "a letter or digit")
RUNS_FOLDER = "runs"
CATALOG_FILE = "catalog.duckdb"  # <data-root>/catalog.duckdb (storage/catalog/connection.py)


class InvalidRunId(ValueError):
    """A run id breaks the rule of the module docstring; the message is one line naming the id
    (an over-long one shortened) and the rule.

    Parameters
    ----------
    run_id
        The id as given.
    what
        How the user gave it, for the message: `run id`, `--run-id`, `schedule.run_id`.
    """

    def __init__(self, run_id: object, what: str = "run id"):
        self.run_id = run_id
        shown = repr(run_id)
        if isinstance(run_id, str) and len(run_id) > RUN_ID_MAX_LENGTH:
            shown = f"{run_id[:40]!r}... ({len(run_id)} characters)"
        super().__init__(f"{what} {shown}: not a run id; {RUN_ID_RULE}")


def is_run_id(run_id: object) -> bool:
    """Whether `run_id` keeps the rule of the module docstring."""
    return (isinstance(run_id, str) and 0 < len(run_id) <= RUN_ID_MAX_LENGTH
            and re.fullmatch(RUN_ID_PATTERN, run_id) is not None)


def check_run_id(run_id: object, what: str = "run id") -> str:
    """`run_id` when it keeps the rule; else `InvalidRunId`.

    Parameters
    ----------
    run_id
        The id to check.
    what
        How the user gave it (`InvalidRunId`).

    Returns
    -------
    `run_id`, unchanged.

    Raises
    ------
    InvalidRunId
        Empty, too long, or not a full match of `RUN_ID_PATTERN`.
    """
    if not is_run_id(run_id):
        raise InvalidRunId(run_id, what)
    return str(run_id)


def run_folder(data_root: Path | str, run_id: str) -> Path:
    """The folder of a run: `<data-root>/runs/<run_id>`, as given (a link is not resolved).

    Every path of a run's files is built on this one, so none leaves the data root by its name.

    Parameters
    ----------
    data_root
        The data root (holds catalog.duckdb and runs/).
    run_id
        The run; checked (`check_run_id`).

    Raises
    ------
    InvalidRunId
        `run_id` breaks the rule.
    """
    return Path(data_root) / RUNS_FOLDER / check_run_id(run_id)


def link_target(data_root: Path | str, run_id: str) -> Path | None:
    """Where a run's folder leads when it lies outside the data root: the resolved folder when
    `runs/<run_id>` (or `runs/` itself) is a link out of the data root; None when the folder is
    missing or lies inside the resolved data root.

    Parameters
    ----------
    data_root
        The data root.
    run_id
        The run; checked (`check_run_id`).
    """
    folder = run_folder(data_root, run_id)
    if not folder.exists():
        return None
    resolved = folder.resolve()
    return None if resolved.is_relative_to(Path(data_root).resolve()) else resolved


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name the same file or folder once every link is resolved."""
    return Path(a).resolve() == Path(b).resolve()
