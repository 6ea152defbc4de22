"""Content hashes: row ids, stage fingerprints and file checksums (a checkpoint's: its weights').

Ids are hashes of content, so the same problem text has the same `problem_id` in every round
and every run. A stage fingerprint hashes everything the stage's output depends on (stage name
and version, config slice, seed, input fingerprints, checkpoint), so equal fingerprints mean
equal outputs and a changed input changes every fingerprint downstream of it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The compact, key-sorted JSON every hash reads; built once (json.dumps with these options builds
# an encoder per call, a third of the time of a row id)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def stable_hash(value: Any, length: int = 16) -> str:
    """Hex sha256 of a JSON-serialisable value with sorted keys (stable across processes).

    Parameters
    ----------
    value
        Any value `json.dumps` accepts; other objects are serialised with `str`.
    length
        How many leading hex characters to keep.

    Returns
    -------
    The first `length` hex characters of the sha256 of the compact, key-sorted JSON of
    `value`.
    """
    return hashlib.sha256(_CANONICAL.encode(value).encode()).hexdigest()[:length]


def row_id(kind: str, *parts: Any) -> str:
    """Id of a row of `kind` derived from its content, e.g. row_id("problem", "arith", "2+3").

    Parameters
    ----------
    kind
        The row's kind; part of the hash, so equal content of two kinds gets two ids.
    *parts
        The content the id is derived from (JSON-serialisable).

    Returns
    -------
    16 hex characters: `stable_hash([kind, *parts])`.
    """
    return stable_hash([kind, *parts])


def stage_fingerprint(
    stage: str,
    version: int,
    config: dict[str, Any],
    seed: int,
    inputs: dict[str, str],
) -> str:
    """Fingerprint of one stage execution.

    Parameters
    ----------
    stage
        The stage's name.
    version
        The stage's version; bumping it changes every fingerprint of the stage.
    config
        The slice of the run config the stage's output depends on.
    seed
        The stage's seed.
    inputs
        Input names mapped to their fingerprints.

    Returns
    -------
    32 hex characters hashing all of the above.
    """
    return stable_hash(
        {"stage": stage, "version": version, "config": config, "seed": seed, "inputs": inputs},
        length=32,
    )


def file_checksum(path: Any, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks so a large file never sits in memory.

    Parameters
    ----------
    path
        The file (anything `open` accepts).
    chunk
        Bytes read at a time.

    Returns
    -------
    The 64 hex characters of the file's sha256.

    Raises
    ------
    OSError
        The file cannot be opened or read (for example, it does not exist).
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


SINGLE_WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"


def weight_files(folder: Any) -> list[Any]:
    """The weight files of a checkpoint folder as `save_pretrained` writes them: one
    `model.safetensors`, or (with `max_shard_size`) `model.safetensors.index.json` and every
    shard `model-00001-of-0000N.safetensors` ... it names, shards in name order after the index.

    Parameters
    ----------
    folder
        The checkpoint folder (a path).

    Returns
    -------
    The paths; `[folder / "model.safetensors"]` for a whole save.

    Raises
    ------
    FileNotFoundError
        No weights, or a shard the index names is missing; the message names the file.
    ValueError
        The index is not JSON with a `weight_map` object (the message names it).
    """
    from pathlib import Path

    folder = Path(folder)
    if (folder / SINGLE_WEIGHTS).is_file():
        return [folder / SINGLE_WEIGHTS]
    index = folder / SHARD_INDEX
    if not index.is_file():
        msg = f"{folder}: no {SINGLE_WEIGHTS} and no {SHARD_INDEX}"
        raise FileNotFoundError(msg)
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        msg = f"{index}: not a safetensors index ({type(exc).__name__}: {exc})"
        raise ValueError(msg) from None
    for name in shards:
        if not (folder / name).is_file():
            msg = f"{folder}: weights shard {name} named in {SHARD_INDEX} is missing"
            raise FileNotFoundError(msg)
    return [index, *(folder / name for name in shards)]


def checkpoint_checksum(folder: Any) -> str:
    """Hex sha256 of a checkpoint folder's weights, every shard of a sharded save included.

    One `model.safetensors`: that file's `file_checksum`. Sharded: the sha256 of the index's
    checksum and each shard's name and checksum, shards in name order (`weight_files`).

    Parameters
    ----------
    folder
        The checkpoint folder (a path).

    Returns
    -------
    64 hex characters.

    Raises
    ------
    FileNotFoundError
        No weights, or a shard the index names is missing; the message names the file.
    ValueError
        The index cannot be read.
    """
    files = weight_files(folder)
    if files[0].name == SINGLE_WEIGHTS:
        return file_checksum(files[0])
    index, *shards = files
    digest = hashlib.sha256(file_checksum(index).encode())
    for shard in shards:
        digest.update(f"{shard.name}:{file_checksum(shard)}".encode())
    return digest.hexdigest()
