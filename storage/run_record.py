"""The run's config beside its data, `<data-root>/runs/<run_id>/config.json`.

It is written (to a temporary name, then renamed) as soon as a run holds its lock, before the
catalog row, the Prefect server or any stage: `flywheel resume` of a run killed before its
catalog row existed reads the config from here. Each `run`/`resume` rewrites it with the config
it runs, as the catalog's `runs` row does.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.paths import run_folder

CONFIG_NAME = "config.json"


def run_config_path(data_root: Path, run_id: str) -> Path:
    """Where a run's config record lives."""
    return run_folder(data_root, run_id) / CONFIG_NAME


def write_run_config(data_root: Path, run_id: str, config_json: str) -> Path:
    """Record the config a run is started with; returns the file's path.

    Parameters
    ----------
    data_root
        The data root.
    run_id
        The run (its folder is created when missing).
    config_json
        The run's config as JSON.
    """
    path = run_config_path(data_root, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{CONFIG_NAME}.tmp-{os.getpid()}")
    temp.write_text(config_json)
    os.replace(temp, path)
    return path


def read_run_config(data_root: Path, run_id: str) -> str | None:
    """The recorded config as JSON; None when the run never recorded one."""
    try:
        return run_config_path(data_root, run_id).read_text()
    except FileNotFoundError:
        return None
