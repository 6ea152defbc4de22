"""Prompts rendered by a chat template are tokenized without the tokenizer's special tokens (the
template writes its BOS itself, Llama-3 style); raw prompts keep them (models/backends.py,
models/vllm_backend.py, domains/chat.py `special_tokens_for`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains.chat import render, role_messages, special_tokens_for
from models.backends import SamplingParams, TransformersBackend

BOS = "<|begin_of_text|>"
# Llama-3 style: the template opens with the BOS token, and the tokenizer adds one too
BOS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\n' + message['content'] + '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant\n' }}{% endif %}")
SPECIAL = ["<|pad|>", BOS, "<|start|>", "<|end|>"]


def build_bos_model(out_dir: Path) -> Path:
    """A tiny Qwen2 whose tokenizer adds a BOS (TemplateProcessing) and whose chat template
    writes one as well."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(["What is 2 plus 3? The answer is 5.", "user assistant system"],
                             trainer=trainer)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, core.token_to_id(BOS))])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token="<|end|>",
                                        pad_token="<|pad|>", padding_side="left")
    tokenizer.chat_template = BOS_TEMPLATE
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=128, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="module")
def bos_model(tmp_path_factory):
    return build_bos_model(tmp_path_factory.mktemp("bos-model"))


def _prompts(tokenizer):
    return [render(tokenizer, role_messages("", f"What is {a} plus 3?")) for a in (2, 7)]


def _recorded_inputs(backend, prompts):
    """The input ids the backend hands to `model.generate`, per prompt (padding removed)."""
    seen = []
    generate = backend.model.generate

    def recording(**kwargs):
        mask = kwargs["attention_mask"].bool()
        seen.extend(ids[m].tolist() for ids, m in zip(kwargs["input_ids"], mask, strict=True))
        return generate(**kwargs)

    backend.model.generate = recording
    backend.generate(prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0,
                                             greedy=True))
    return seen


def test_a_template_that_writes_its_bos_gets_one_bos(bos_model):
    backend = TransformersBackend(bos_model)
    tokenizer = backend.tokenizer
    prompts = _prompts(tokenizer)
    assert prompts[0].startswith(BOS)
    assert tokenizer(prompts[0])["input_ids"][:2] == [tokenizer.bos_token_id] * 2  # the bug
    for ids, prompt in zip(_recorded_inputs(backend, prompts), prompts, strict=True):
        assert ids.count(tokenizer.bos_token_id) == 1 and ids[0] == tokenizer.bos_token_id
        assert ids == tokenizer(prompt, add_special_tokens=False)["input_ids"]
    # a raw prompt on the same model keeps the tokenizer's BOS, as before
    raw = _recorded_inputs(backend, ["What is 2 plus 3?"])
    assert raw == [tokenizer("What is 2 plus 3?")["input_ids"]]
    assert raw[0][0] == tokenizer.bos_token_id


def test_the_decision_follows_the_prompts(bos_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bos_model)
    rendered = _prompts(tokenizer)
    assert special_tokens_for(tokenizer, rendered) is False
    assert special_tokens_for(tokenizer, ["What is 2 plus 3?"]) is True
    assert special_tokens_for(tokenizer, []) is True
    with pytest.raises(ValueError, match="1 of 3 prompts are not renderings") as error:
        special_tokens_for(tokenizer, [*rendered, "What is 2 plus 3?"])
    assert "\n" not in str(error.value)


def test_the_tiny_models_raw_prompts_keep_their_tokenization(tmp_path):
    from models.tiny import build_tiny_model

    checkpoint = tmp_path / "tiny"
    build_tiny_model(checkpoint, hidden_size=32, num_layers=1, head_dim=8, intermediate_size=32,
                     init_seed=0)
    backend = TransformersBackend(checkpoint)
    prompts = ["<solve>2+3=", "<solve>17*4=", "<propose>L2:"]
    assert special_tokens_for(backend.tokenizer, prompts) is True  # no chat template
    padded = backend.tokenizer(prompts, return_tensors="pt", padding=True)  # the earlier call
    expected = [ids[m.bool()].tolist() for ids, m in zip(padded["input_ids"],
                                                          padded["attention_mask"], strict=True)]
    assert _recorded_inputs(backend, prompts) == expected


class _FakeLLM:
    """Records what `VLLMBackend.generate` passes to `vllm.LLM.generate`."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, requests, **kwargs):
        self.calls.append(kwargs)
        return []


def test_vllm_is_told_not_to_add_special_tokens_to_renderings(bos_model, monkeypatch):
    pytest.importorskip("vllm")  # `make test-vllm`: .venv-vllm
    from transformers import AutoTokenizer

    from models import vllm_backend

    llm = _FakeLLM(AutoTokenizer.from_pretrained(bos_model))

    class Pool:
        def acquire(self, checkpoint, options):
            return type("Engine", (), {"llm": llm})()

        def release(self, engine, broken=False):
            pass

    backend = vllm_backend.VLLMBackend(bos_model, pool=Pool())
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0)
    backend.generate(_prompts(llm.tokenizer), params)
    backend.generate(["What is 2 plus 3?"], params)
    assert llm.calls[0]["tokenization_kwargs"] == {"add_special_tokens": False}
    assert "tokenization_kwargs" not in llm.calls[1]  # raw prompts: vLLM's default, as before


@pytest.mark.vllm
def test_vllm_engine_sees_one_bos_in_a_rendering(bos_model):
    from models.backends import make_backend

    backend = make_backend("vllm", bos_model)
    try:
        llm, seen = backend.llm, []
        generate = llm.generate

        def recording(*args, **kwargs):
            outputs = generate(*args, **kwargs)
            seen.extend(list(o.prompt_token_ids) for o in outputs)
            return outputs

        llm.generate = recording
        tokenizer = llm.get_tokenizer()
        rendered, raw = _prompts(tokenizer), ["What is 2 plus 3?"]
        params = SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0, greedy=True)
        backend.generate(rendered, params)
        backend.generate(raw, params)
        del llm.generate
    finally:
        backend.close()
    assert seen == [tokenizer(p, add_special_tokens=False)["input_ids"] for p in rendered] + [
        tokenizer(raw[0])["input_ids"]]
    assert [ids.count(tokenizer.bos_token_id) for ids in seen] == [1, 1, 1]
