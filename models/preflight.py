"""Checks of the model a run will load, made before anything is written (the CLI exits 2 with
one line): a `model.path` that is not a complete, well-formed Hugging Face folder (its JSON
files parse, its weight files' headers read as safetensors or torch.save) or a hub id missing
from the local hub cache (models/hub.py), and a built-in tiny model too large to train in this
machine's memory.

The memory check covers the tiny model only, which trains on the CPU: its training keeps the
fp32 weights, their gradients and Adam's two moments, 16 bytes a parameter, plus activations.
A real model's memory depends on its device, dtype and LoRA settings; it is not estimated here.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

from models.hub import ModelSource, locate_model

BYTES_PER_TRAINED_PARAMETER = 16  # fp32 weights, gradients, Adam's first and second moments
TINY_VOCABULARY = 100  # models/tiny.py: 5 special tokens and 95 printable characters
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# How a legacy (pre-zip) `torch.save` file starts: the pickled magic number torch writes first.
_LEGACY_TORCH_HEAD = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


class ModelUnfit(ValueError):
    """The configured model cannot be loaded or trained here; the message names the fix."""


def check_model_folder(path: str, revision: str | None = None, *,
                       section: str = "model") -> ModelSource:
    """Check that `path` holds a Hugging Face checkpoint: config, weights and tokenizer, each
    present and well formed, without loading a tensor (a few KiB read per file), so a
    truncated download or a file of random bytes fails before the run starts, naming
    `model.path` and the file, instead of when the model loads. A hub id is checked in its
    cached snapshot (models/hub.py), which is resolved here, once per run start.

    Parameters
    ----------
    path
        `model.path`: a local folder or a hub id.
    revision
        `model.revision`: a hub id's snapshot (None = `main`).
    section
        The config section `path` comes from, which every message names (`proposer.model` for
        a separate proposer).

    Returns
    -------
    ModelSource
        The folder checked, and a hub id's snapshot commit hash (the run records it).

    Raises
    ------
    ModelUnfit
        A hub id not in the cache; a part is missing; config.json is not a JSON object with a
        `model_type`; a weight file is not safetensors (its header and every tensor's bytes) or
        a `torch.save` archive; an index names a shard that is not there; a JSON tokenizer file
        is not a JSON object.
    """
    try:
        source = locate_model(path, revision, section=section)
    except ValueError as exc:  # models.hub.ModelNotCached, or a revision for a local folder
        raise ModelUnfit(str(exc)) from None
    _check_folder(path, source, f"{section}.path")
    return source


def _check_folder(path: str, source: ModelSource, key: str) -> None:
    """`check_model_folder`'s checks of the folder `source` locates for `path` (config `key`)."""
    folder = source.folder
    named = f"{key} = {path!r}"  # what each message starts with
    hint = (f"(point {key} at a Hugging Face model folder saved with save_pretrained)"
            if source.revision is None else
            f"(its cached snapshot {folder} is incomplete: `hf download {path}` again on a "
            "machine with network)")
    if not folder.is_dir():
        raise ModelUnfit(f"{named}: no such folder {hint}")
    if not (folder / "config.json").is_file():
        raise ModelUnfit(f"{named}: no config.json there {hint}")
    config = _json_object(named, folder / "config.json")
    weights = sorted({file for pattern in WEIGHT_FILES for file in folder.glob(pattern)})
    if not weights:
        raise ModelUnfit(f"{named}: no weights (*.safetensors or "
                         f"pytorch_model*.bin) {hint}")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelUnfit(f"{named}: no tokenizer (tokenizer.json or "
                         f"tokenizer_config.json) {hint}")
    if "model_type" not in config:
        raise ModelUnfit(f"{named}: config.json has no model_type {hint}")
    for file in weights:
        _check_weight_file(named, file)
    for name in TOKENIZER_FILES:
        if name.endswith(".json") and (folder / name).is_file():
            _json_object(named, folder / name)


def _json_object(named: str, file: Path) -> dict[str, Any]:
    """The JSON object in `file` of the model folder `named` (`<key> = '<path>'`), or
    ModelUnfit naming both."""
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ModelUnfit(f"{named}: {file.name} is not valid JSON ({exc}); "
                         "save the model again or download the file again") from None
    if not isinstance(data, dict):
        raise ModelUnfit(f"{named}: {file.name} is not valid JSON: not an object; "
                         "save the model again or download the file again")
    return data


def _check_weight_file(named: str, file: Path) -> None:
    """One weight file of the model folder `named` (`<key> = '<path>'`) read as its loader reads
    its head: a safetensors header that covers the whole file (safetensors' own check), a
    `torch.save` zip archive or legacy pickle (`pytorch_model*.bin`), an index whose shards are
    files of the folder."""
    redo = "save the model again or download the file again"
    if file.name.endswith(".index.json"):
        weight_map = _json_object(named, file).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelUnfit(f"{named}: {file.name} has no weight_map; {redo}")
        for shard in sorted(set(map(str, weight_map.values()))):
            if Path(shard).name != shard or not (file.parent / shard).is_file():
                raise ModelUnfit(f"{named}: {file.name} names the shard "
                                 f"{shard!r}, which is not a file of the folder; {redo}")
        return
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(file), framework="numpy") as weights:
                weights.keys()
        except (SafetensorError, OSError) as exc:
            raise ModelUnfit(f"{named}: {file.name} is not a safetensors file "
                             f"({exc}); {redo}") from None
        return
    try:
        with file.open("rb") as handle:
            usable = handle.read(len(_LEGACY_TORCH_HEAD)) == _LEGACY_TORCH_HEAD
        if not usable and zipfile.is_zipfile(file):
            with zipfile.ZipFile(file) as archive:
                usable = any(name.endswith("/data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelUnfit(f"{named}: {file.name} cannot be read ({exc}); "
                         f"{redo}") from None
    if not usable:
        raise ModelUnfit(f"{named}: {file.name} is not a torch.save checkpoint "
                         f"(neither a zip archive with data.pkl nor a legacy pickle); {redo}")


def tiny_parameters(hidden_size: int, num_layers: int, intermediate_size: int) -> int:
    """Parameters of the built-in tiny Llama: the embedding (tied to the output head), per
    layer four attention projections and three MLP matrices (norms are negligible)."""
    per_layer = 4 * hidden_size * hidden_size + 3 * hidden_size * intermediate_size
    return TINY_VOCABULARY * hidden_size + num_layers * per_layer


def available_memory() -> int | None:
    """Bytes of memory available to a new process (Linux MemAvailable), None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_tiny_model_fits(hidden_size: int, num_layers: int, intermediate_size: int, *,
                          memory: int | None = None, section: str = "model") -> None:
    """Check that training the tiny model of this shape fits in memory.

    Parameters
    ----------
    hidden_size, num_layers, intermediate_size
        The `[model]` shape.
    memory
        Bytes available; None reads the machine's (`available_memory`).
    section
        The section the shape comes from, for the message (`proposer.model` for the proposer).

    Raises
    ------
    ModelUnfit
        Its weights, gradients and optimizer state alone exceed the memory.
    """
    memory = available_memory() if memory is None else memory
    parameters = tiny_parameters(hidden_size, num_layers, intermediate_size)
    needed = parameters * BYTES_PER_TRAINED_PARAMETER
    if memory is not None and needed > memory:
        msg = (f"{section}: hidden_size {hidden_size} x num_layers {num_layers} (intermediate_size "
               f"{intermediate_size}) is {parameters / 1e9:.2f} B parameters; training it needs "
               f"about {needed / 2**30:.0f} GiB, this machine has {memory / 2**30:.0f} GiB "
               "available (make the model smaller)")
        raise ModelUnfit(msg)
