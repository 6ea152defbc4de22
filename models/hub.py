"""`model.path` as a Hugging Face hub id: which folder a run loads.

`model.path` is a local model folder or a hub id (`Qwen/Qwen2.5-0.5B-Instruct`), as every
Hugging Face tool takes it. A hub id is looked up in the local hub cache (`$HF_HUB_CACHE`, else
`$HF_HOME/hub`, else `~/.cache/huggingface/hub`: huggingface_hub's own order, read when the
lookup is made), at the snapshot `model.revision` names (a commit hash, branch or tag; unset =
`refs/main`):

    <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/refs/main            "a1b2c3..."
    <cache>/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/a1b2c3.../ config.json, ...

    locate_model("Qwen/Qwen2.5-0.5B-Instruct")
    -> ModelSource(path="Qwen/Qwen2.5-0.5B-Instruct", folder=Path("<cache>/.../a1b2c3..."),
                   revision="a1b2c3...")

With `HF_HUB_OFFLINE=1` (a run's default, flows/environment.py) nothing is downloaded: a hub id
missing from the cache is one line naming the cache folder and the command that fills it on a
machine with network. With `HF_HUB_OFFLINE=0` a missing snapshot is downloaded into the cache.

The run resolves the id once, before it starts (the CLI's preflight, models/preflight.py), and
records the snapshot's commit hash as `model.revision` in the run's config, so a resume loads
the same snapshot even after `refs/main` moved; the stages' fingerprints hash the id as
written (configs/settings.py DomainSettings) and the files of the snapshot
(tasks/incumbent.py), never the cache's location on one machine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# A hub repo id: NAME or ORG/NAME of letters, digits, '-', '_' and '.' (huggingface_hub's rule),
# no leading '.', '-' or '_' and no '--' or '..' (which the cache folder names cannot hold).
HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")


class ModelNotCached(ValueError):
    """A hub id that is not in the local hub cache (nor downloadable); the message names the
    cache and the command that fills it."""


@dataclass(frozen=True)
class ModelSource:
    """Where `model.path` loads from: `folder`, and for a hub id the snapshot's commit hash
    (`revision`; None for a local folder)."""

    path: str
    folder: Path
    revision: str | None


def is_hub_id(path: str) -> bool:
    """Whether `model.path` names a hub repo rather than a local folder: it has a repo id's
    form and no such file or folder exists (a local folder always wins)."""
    return (bool(HUB_ID.fullmatch(path)) and "--" not in path and ".." not in path
            and not Path(path).expanduser().exists())


def hub_cache() -> Path:
    """The hub cache folder, from the environment as it is now (huggingface_hub reads it once,
    at import): `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Whether `HF_HUB_OFFLINE` forbids downloads (a run's default)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def locate_model(path: str, revision: str | None = None, *,
                 section: str = "model") -> ModelSource:
    """The folder `model.path` loads from: the folder itself, or a hub id's snapshot.

    Parameters
    ----------
    path
        `model.path`: a local folder or a hub id.
    revision
        `model.revision`: the hub snapshot (a commit hash, branch or tag); None = `main`.
    section
        The config section the two come from, which the messages name (`proposer.model` for a
        separate proposer).

    Returns
    -------
    ModelSource
        A hub id's `revision` is the snapshot's commit hash (its folder's name).

    Raises
    ------
    ModelNotCached
        A hub id without that snapshot in the cache (offline), or whose download failed.
    ValueError
        A revision given with a local folder.
    """
    if not is_hub_id(path):
        if revision is not None:
            msg = (f"{section}.revision = {revision!r} names a hub snapshot, but {section}.path = "
                   f"{path!r} is a local folder; unset {section}.revision")
            raise ValueError(msg)
        return ModelSource(path=path, folder=Path(path), revision=None)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    cache = hub_cache()
    at = "" if revision is None else f" at revision {revision!r}"
    try:
        folder = Path(snapshot_download(path, revision=revision, cache_dir=cache,
                                        local_files_only=offline()))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        download = f"hf download {path}" + ("" if revision is None else f" --revision {revision}")
        why = ("HF_HUB_OFFLINE=1: nothing is downloaded" if offline()
               else f"the download failed: {str(exc).splitlines()[0]}")
        msg = (f"{section}.path = {path!r}: not a local folder, and the Hugging Face cache "
               f"{cache} has no snapshot of that hub id{at} ({why}); fill it on a machine with "
               f"network: `{download}` (then copy the cache here, or point HF_HOME or "
               f"HF_HUB_CACHE at it), or set {section}.path to a local model folder")
        raise ModelNotCached(msg) from None
    return ModelSource(path=path, folder=folder, revision=folder.name)
