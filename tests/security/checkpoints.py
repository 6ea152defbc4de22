"""A checkpoint folder in miniature, for tests that record one without training a model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def save_checkpoint(folder: Path) -> None:
    """What `save_pretrained` of a model and its tokenizer leaves, in miniature: safetensors
    weights, config.json and tokenizer files, so storage/integrity.py finds it intact."""
    folder.mkdir(parents=True)
    save_file({"embed": np.arange(64, dtype=np.float32).reshape(8, 8)},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {}}}')
