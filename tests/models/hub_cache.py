"""A Hugging Face hub cache laid out by hand, as `hf download` leaves one, for tests without a
network: `<cache>/models--ORG--NAME/blobs/<sha256>` holds each file, `snapshots/<commit>/<name>`
links to its blob and `refs/main` names the commit."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def repo_folder(cache: Path, repo_id: str) -> Path:
    """The cache's folder of `repo_id` (`models--ORG--NAME`)."""
    return cache / ("models--" + repo_id.replace("/", "--"))


def cache_snapshot(cache: Path, repo_id: str, model: Path, *, commit: str = "a" * 40,
                   ref: str | None = "main") -> Path:
    """Put the files of the model folder `model` into `cache` as `repo_id`'s snapshot `commit`
    (`ref` then names it; None leaves the refs as they are); returns the snapshot folder."""
    repo = repo_folder(cache, repo_id)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(model.iterdir()):
        if not file.is_file():
            continue
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(file, blob)
        link = snapshot / file.name
        link.unlink(missing_ok=True)
        os.symlink(os.path.relpath(blob, snapshot), link)
    if ref is not None:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot
