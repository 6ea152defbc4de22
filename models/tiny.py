"""The built-in tiny model: a character-level Llama-style causal LM built locally, no downloads.

One token per printable ASCII character plus the special tokens below, so any text the domains
write can be encoded. Head dim 32 keeps the model loadable by vLLM's CPU attention kernels.
Saved with `save_pretrained`, so transformers and vLLM load it like any Hugging Face model.
"""

from __future__ import annotations

import json
from pathlib import Path

from domains.base import PROPOSE_TAG, SOLVE_TAG

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>", PROPOSE_TAG, SOLVE_TAG]
CHARACTERS = [chr(code) for code in range(32, 127)]


def build_tokenizer():
    """A character-level `PreTrainedTokenizerFast` (the `tokenizers` BPE model with no merges)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.add_special_tokens(SPECIAL_TOKENS)
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=512,
    )


def build_tiny_model(
    out_dir: Path,
    *,
    hidden_size: int,
    num_layers: int,
    head_dim: int,
    intermediate_size: int,
    init_seed: int,
    max_position_embeddings: int = 256,
) -> Path:
    """Create and save a freshly initialised tiny model + tokenizer into `out_dir`
    (`max_position_embeddings`: the longest sequence it takes, prompt and answer)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    if hidden_size % head_dim:
        msg = f"model.hidden_size = {hidden_size} must be a multiple of model.head_dim = {head_dim}"
        raise ValueError(msg)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // head_dim,
        num_key_value_heads=hidden_size // head_dim,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(init_seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def parameter_count(checkpoint: Path) -> int:
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    hidden, inter, layers = (config["hidden_size"], config["intermediate_size"],
                             config["num_hidden_layers"])
    return config["vocab_size"] * hidden + layers * (4 * hidden * hidden + 3 * hidden * inter)
