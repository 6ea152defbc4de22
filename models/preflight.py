"""Checks of the model a run will load, made before anything is written (the CLI exits 2 with
one line): a `model.path` that is not a complete Hugging Face folder, and a built-in tiny
model too large to train in this machine's memory.

The memory check covers the tiny model only, which trains on the CPU: its training keeps the
fp32 weights, their gradients and Adam's two moments, 16 bytes a parameter, plus activations.
A real model's memory depends on its device, dtype and LoRA settings; it is not estimated here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

BYTES_PER_TRAINED_PARAMETER = 16  # fp32 weights, gradients, Adam's first and second moments
TINY_VOCABULARY = 100  # models/tiny.py: 5 special tokens and 95 printable characters
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class ModelUnfit(ValueError):
    """The configured model cannot be loaded or trained here; the message names the fix."""


def check_model_folder(path: str) -> None:
    """Check that `path` holds a Hugging Face checkpoint: config, weights and tokenizer.

    Parameters
    ----------
    path
        `model.path`.

    Raises
    ------
    ModelUnfit
        A part is missing, or config.json is not JSON.
    """
    folder = Path(path)
    hint = "(point model.path at a Hugging Face model folder saved with save_pretrained)"
    if not folder.is_dir():
        raise ModelUnfit(f"model.path = {path!r}: no such folder {hint}")
    config = folder / "config.json"
    if not config.is_file():
        raise ModelUnfit(f"model.path = {path!r}: no config.json there {hint}")
    try:
        json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelUnfit(f"model.path = {path!r}: config.json is not valid JSON ({exc})") from None
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise ModelUnfit(f"model.path = {path!r}: no weights (*.safetensors or "
                         f"pytorch_model*.bin) {hint}")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelUnfit(f"model.path = {path!r}: no tokenizer (tokenizer.json or "
                         f"tokenizer_config.json) {hint}")


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
                          memory: int | None = None) -> None:
    """Check that training the tiny model of this shape fits in memory.

    Parameters
    ----------
    hidden_size, num_layers, intermediate_size
        The `[model]` shape.
    memory
        Bytes available; None reads the machine's (`available_memory`).

    Raises
    ------
    ModelUnfit
        Its weights, gradients and optimizer state alone exceed the memory.
    """
    memory = available_memory() if memory is None else memory
    parameters = tiny_parameters(hidden_size, num_layers, intermediate_size)
    needed = parameters * BYTES_PER_TRAINED_PARAMETER
    if memory is not None and needed > memory:
        msg = (f"model: hidden_size {hidden_size} x num_layers {num_layers} (intermediate_size "
               f"{intermediate_size}) is {parameters / 1e9:.2f} B parameters; training it needs "
               f"about {needed / 2**30:.0f} GiB, this machine has {memory / 2**30:.0f} GiB "
               "available (make the model smaller)")
        raise ModelUnfit(msg)
