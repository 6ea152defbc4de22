"""A pretrained-format chat model built offline for tests: a randomly initialised tiny Qwen2, a
byte-level BPE tokenizer trained by `tokenizers` on generated text, and a ChatML Jinja template
(system / user / assistant), both saved with `save_pretrained` like a model from a hub."""

from __future__ import annotations

import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def question_lines(count: int, seed: int) -> list[dict[str, str]]:
    """`count` distinct arithmetic questions and answers, as a dataset file's rows."""
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < count:
        a, b = rng.randrange(100), rng.randrange(100)
        question = f"What is {a} plus {b}?"
        if question not in seen:
            seen.add(question)
            rows.append({"question": question, "answer": str(a + b)})
    return rows


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", padding_side="left",
                                        model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def chat_tokenizer(seed: int = 0):
    """The tests' chat tokenizer, trained on generated questions and the prompts' words."""
    texts = [f"{r['question']} The answer is {r['answer']}." for r in question_lines(300, seed)]
    texts += ["Write one new problem of difficulty level 1. Reply with the problem only.",
              "system user assistant Be brief. Put your final answer in \\boxed{}."]
    return build_tokenizer(texts)


def tiny_qwen2_config(tokenizer, **extra):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       max_position_embeddings=256, tie_word_embeddings=True,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=None, **extra)


def build_reward_model(out_dir: Path, *, seed: int = 0, num_labels: int = 1,
                       pad_token: str | None = "<|endoftext|>") -> Path:
    """Save a tiny random Qwen2ForSequenceClassification (`num_labels` outputs; its config's
    `pad_token_id` that of `pad_token`, None: unset) and the chat tokenizer (padding with
    <|endoftext|>) to `out_dir`."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    tokenizer = chat_tokenizer(seed)
    config = tiny_qwen2_config(tokenizer, num_labels=num_labels)
    config.pad_token_id = None if pad_token is None else tokenizer.convert_tokens_to_ids(pad_token)
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():  # scores of a few units, so rewards spread over (0, 1)
        model.score.weight.mul_(20.0)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def build_chat_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Save a tiny Qwen2 chat model (about 60 k parameters) and its tokenizer to `out_dir`."""
    import torch
    from transformers import Qwen2ForCausalLM

    tokenizer = chat_tokenizer(seed)
    config = tiny_qwen2_config(tokenizer)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
