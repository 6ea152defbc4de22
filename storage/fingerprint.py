"""Content hashes: row ids and stage fingerprints.

Ids are hashes of content, so the same problem text has the same `problem_id` in every round
and every run. A stage fingerprint hashes everything the stage's output depends on (stage name
and version, config slice, seed, input fingerprints, checkpoint), so equal fingerprints mean
equal outputs and a changed input changes every fingerprint downstream of it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(value: Any, length: int = 16) -> str:
    """Hex sha256 of a JSON-serialisable value with sorted keys (stable across processes)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def row_id(kind: str, *parts: Any) -> str:
    """Id of a row of `kind` derived from its content, e.g. row_id("problem", "arith", "2+3")."""
    return stable_hash([kind, *parts])


def stage_fingerprint(
    stage: str,
    version: int,
    config: dict[str, Any],
    seed: int,
    inputs: dict[str, str],
) -> str:
    """Fingerprint of one stage execution; `inputs` maps input names to their fingerprints."""
    return stable_hash(
        {"stage": stage, "version": version, "config": config, "seed": seed, "inputs": inputs},
        length=32,
    )


def file_checksum(path: Any, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
