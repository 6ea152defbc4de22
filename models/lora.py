"""LoRA through peft: a trainer pass trains a low-rank adapter on its base model and writes the
same full Hugging Face checkpoint a full fine-tuning writes (the adapter merged into the
weights), so rollout, vLLM, evaluation, lineage, resume and promotion read it unchanged. The
adapter itself is kept inside the checkpoint, in `adapter/` (peft's `adapter_config.json` and
`adapter_model.safetensors`), applicable to the pass's base with `PeftModel.from_pretrained`:

    round-001/checkpoint-3f2a9c0d1e4b/
        config.json  model.safetensors  tokenizer.json ...   # merged: base + adapter
        adapter/adapter_config.json  adapter/adapter_model.safetensors

With several passes in one train stage (say GRPO, then SFT on the proposer rows) each pass trains
its own adapter on the model the pass before wrote; `adapter/` is the last pass's, the earlier
ones are kept as `adapter-<kind>/` (models/passes.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.runtime import LoraSettings

ADAPTER_DIR = "adapter"


def with_adapter(model: Any, lora: LoraSettings) -> Any:
    """`model` wrapped in a fresh, trainable LoRA adapter (peft `get_peft_model`); the base
    weights are frozen, the adapter's B matrices start at zero (so it starts as the base)."""
    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules if isinstance(lora.target_modules, str) \
        else list(lora.target_modules)
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=targets, task_type="CAUSAL_LM", bias="none")
    return get_peft_model(model, config)


def merged(model: Any, out_dir: Path) -> Any:
    """Save the adapter of peft `model` to `out_dir/adapter`; return the base with it merged in
    (peft `merge_and_unload`), ready for `save_pretrained(out_dir)`."""
    model.save_pretrained(Path(out_dir) / ADAPTER_DIR)
    return model.merge_and_unload()
