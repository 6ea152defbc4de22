"""GPU check for a lent accelerator machine: can this machine train and sample a model of
Qwen2.5-0.5B's shape in bfloat16, and how fast?

Self-contained: it needs torch, transformers, tokenizers and (for the LoRA row) peft, which
that machine has, and vLLM only where it is importable; it imports nothing of this project (no
TRL, Prefect, DuckDB, polars there), downloads nothing and reads no registry. It builds, offline,
a byte-level BPE tokenizer trained on a generated corpus and a randomly initialised Qwen2 model
of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV heads, vocab 151936, tied
embeddings: 494 M parameters), saves both as a Hugging Face folder, then measures

    sft         bf16 full fine-tuning steps (AdamW, next-token loss on every token): trained
                tokens/s and peak GPU memory; a plain torch loop (the project trains through TRL,
                which that machine lacks; the loop does what its SFTTrainer step does)
    sft_lora    the same with a peft LoRA adapter (rank 16, every linear layer), then merged
    hf_generate sampled rollouts with `model.generate`: generated tokens/s
    vllm        (where importable) sampled rollouts with `vllm.LLM`: generated tokens/s, and a
                weight swap (`collective_rpc("reload_weights")`, as models/vllm_backend.py does)
                to a perturbed copy of the checkpoint: its seconds and whether greedy outputs
                changed

prints one table and writes JSON (default bench/results/gpu_check.json). Sized to finish in
under 8 minutes on one H200 (about 2 minutes of measuring; vLLM's start is most of the rest).
A section that fails is reported as its error and the exit status is 1.

    python bench/gpu_check.py                         # on the GPU machine
    python bench/gpu_check.py --device cpu --small    # smoke mode: a tiny model on the CPU
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parents[1]
# Qwen2.5-0.5B's config.json, less the fields that do not change the compute
QWEN_0_5B = {"vocab_size": 151_936, "hidden_size": 896, "intermediate_size": 4864,
             "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "max_position_embeddings": 32_768, "rope_theta": 1_000_000.0,
             "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
SMALL = {**QWEN_0_5B, "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 512}
# (batch, sequence length, timed steps) of training; (prompts, new tokens) of sampling
FULL_SIZES = {"train": (16, 1024, 30), "hf_generate": (128, 256), "vllm": (1024, 256)}
SMALL_SIZES = {"train": (4, 32, 3), "hf_generate": (4, 8), "vllm": (8, 8)}
WARMUP_STEPS = 3
TOKENIZER_VOCAB = 8192  # the BPE's vocabulary; the model's embedding keeps Qwen's 151936 rows
WORDS = ("the model writes problems answers them checks and trains on what it got right "
         "sum difference product level round proposer solver verifier reward").split()


def corpus(lines: int, seed: int = 0) -> list[str]:
    """Generated text: arithmetic problems and sentences of `WORDS` (for the tokenizer)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        a, b = rng.randint(0, 9999), rng.randint(0, 9999)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
        out.append(f"Q: {a}{rng.choice('+-*')}{b}= {words}.")
    return out


def build_tokenizer(folder: Path, vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on `corpus`, saved to `folder` as a HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(corpus(20_000), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>", padding_side="left")
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_model(folder: Path, shape: dict[str, Any], dtype: Any, seed: int = 0) -> Path:
    """A randomly initialised Qwen2 causal LM of `shape`, saved to `folder` in `dtype`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(folder, vocab_size=min(TOKENIZER_VOCAB, shape["vocab_size"]))
    config = Qwen2Config(**shape, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config.eos_token_id = None  # random weights: sample to the full length
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    return folder


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def peak_memory_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def reset_memory(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def measure_training(folder: Path, device: str, dtype: Any, sizes: tuple[int, int, int], *,
                     lora: bool, gradient_checkpointing: bool) -> dict[str, Any]:
    """Trained tokens/s of full (or LoRA) fine-tuning steps on random token batches."""
    import torch
    from transformers import AutoModelForCausalLM

    batch, length, steps = sizes
    reset_memory(device)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                 target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    vocab = min(TOKENIZER_VOCAB, model.config.vocab_size)  # ids the tokenizer can produce
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    generator = torch.Generator().manual_seed(0)
    losses, started = [], 0.0
    model.train()
    for step in range(WARMUP_STEPS + steps):
        if step == WARMUP_STEPS:
            synchronize(device)
            started = time.perf_counter()
        ids = torch.randint(0, vocab, (batch, length), generator=generator).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    synchronize(device)
    seconds = time.perf_counter() - started
    result = {"tokens_per_s": batch * length * steps / seconds, "seconds": seconds,
              "steps": steps, "batch": batch, "seq_len": length,
              "peak_memory_gib": peak_memory_gib(device), "final_loss": losses[-1],
              "trainable_parameters": sum(p.numel() for p in trainable)}
    if lora:
        began = time.perf_counter()
        model.merge_and_unload()
        result["merge_seconds"] = time.perf_counter() - began
    if not all(loss == loss for loss in losses):  # NaN
        msg = f"training loss became NaN: {losses}"
        raise RuntimeError(msg)
    return result


def prompts(count: int) -> list[str]:
    return [line.split("=")[0] + "=" for line in corpus(count, seed=1)]


def measure_hf_generate(folder: Path, device: str, dtype: Any, sizes: tuple[int, int]
                        ) -> dict[str, Any]:
    """Generated tokens/s of sampled `model.generate` over one batch of prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    count, new_tokens = sizes
    reset_memory(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    batch = tokenizer(prompts(count), return_tensors="pt", padding=True).to(device)
    settings = {"do_sample": True, "temperature": 1.0, "max_new_tokens": new_tokens,
                "min_new_tokens": new_tokens, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        model.generate(**tokenizer(prompts(2), return_tensors="pt", padding=True).to(device),
                       **{**settings, "max_new_tokens": 2, "min_new_tokens": 2})
        synchronize(device)
        started = time.perf_counter()
        out = model.generate(**batch, **settings)
        synchronize(device)
    seconds = time.perf_counter() - started
    generated = int((out[:, batch.input_ids.shape[1]:] != tokenizer.pad_token_id).sum())
    return {"tokens_per_s": generated / seconds, "seconds": seconds, "sequences": count,
            "generated_tokens": generated, "peak_memory_gib": peak_memory_gib(device)}


def perturbed_copy(folder: Path, out: Path, dtype: Any) -> Path:
    """`folder`'s checkpoint with every weight scaled by 1.5: a different model, same shape."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(folder, out)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)
    model.save_pretrained(out)
    return out


def measure_vllm(folder: Path, swapped: Path, sizes: tuple[int, int]) -> dict[str, Any]:
    """vLLM: engine start, generated tokens/s of sampled rollouts, and a weight swap."""
    from vllm import LLM, SamplingParams

    count, new_tokens = sizes
    started = time.perf_counter()
    llm = LLM(model=str(folder), dtype="bfloat16", seed=0, gpu_memory_utilization=0.5,
              enforce_eager=False, disable_log_stats=True)
    start_seconds = time.perf_counter() - started
    sampled = SamplingParams(n=1, temperature=1.0, max_tokens=new_tokens, min_tokens=new_tokens,
                             ignore_eos=True, seed=0)
    llm.generate(prompts(8), sampled, use_tqdm=False)
    began = time.perf_counter()
    outputs = llm.generate(prompts(count), sampled, use_tqdm=False)
    seconds = time.perf_counter() - began
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    before = [o.outputs[0].token_ids for o in llm.generate(prompts(4), greedy, use_tqdm=False)]
    began = time.perf_counter()
    llm.collective_rpc("reload_weights", kwargs={"weights_path": str(swapped)})
    llm.reset_prefix_cache()
    swap_seconds = time.perf_counter() - began
    after = [o.outputs[0].token_ids for o in llm.generate(prompts(4), greedy, use_tqdm=False)]
    return {"tokens_per_s": generated / seconds, "seconds": seconds, "sequences": count,
            "generated_tokens": generated, "engine_start_seconds": start_seconds,
            "swap_seconds": swap_seconds, "swap_changed_outputs": before != after}


def environment(device: str) -> dict[str, Any]:
    """Versions and the device, for the JSON record."""
    import torch
    import transformers

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__}
    for name in ("peft", "accelerate", "vllm"):
        if importlib.util.find_spec(name) is not None:
            versions[name] = __import__(name).__version__
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    return {"date": datetime.date.today().isoformat(), "device": device, "gpu": gpu,
            "cuda": torch.version.cuda, **versions}


def run_sections(folder: Path, args: argparse.Namespace, dtype: Any) -> dict[str, Any]:
    """Every measurement; a failing one is recorded as its error and the rest still run."""
    sizes = SMALL_SIZES if args.small else FULL_SIZES
    sections = {
        "sft": lambda: measure_training(folder, args.device, dtype, sizes["train"], lora=False,
                                        gradient_checkpointing=args.gradient_checkpointing),
        "sft_lora": lambda: measure_training(folder, args.device, dtype, sizes["train"],
                                             lora=True,
                                             gradient_checkpointing=args.gradient_checkpointing),
        "hf_generate": lambda: measure_hf_generate(folder, args.device, dtype,
                                                   sizes["hf_generate"]),
        "vllm": lambda: vllm_section(folder, args, dtype, sizes["vllm"]),
    }
    results: dict[str, Any] = {}
    for name, measure in sections.items():
        began = time.perf_counter()
        try:
            results[name] = measure()
        except Exception as exc:  # recorded in the table and the JSON; exit status 1
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["wall_seconds"] = time.perf_counter() - began
        print(f"gpu_check: {name} done in {results[name]['wall_seconds']:.1f} s", flush=True)
    return results


def vllm_section(folder: Path, args: argparse.Namespace, dtype: Any, sizes: tuple[int, int]
                 ) -> dict[str, Any]:
    if args.no_vllm or importlib.util.find_spec("vllm") is None:
        return {"skipped": "vLLM is not importable" if not args.no_vllm else "--no-vllm"}
    if args.device != "cuda":
        return {"skipped": "vLLM is measured on cuda only"}
    reset_memory(args.device)
    swapped = perturbed_copy(folder, folder.parent / "swapped", dtype)
    return measure_vllm(folder, swapped, sizes)


def table(results: dict[str, Any]) -> str:
    """One row per section: tokens/s, seconds, peak memory, and its notes."""
    rows = [f"{'section':<12} {'tokens/s':>12} {'seconds':>9} {'peak GiB':>9}  notes"]
    for name, r in results.items():
        if "error" in r or "skipped" in r:
            rows.append(f"{name:<12} {'-':>12} {'-':>9} {'-':>9}  "
                        f"{r.get('error') or 'skipped: ' + r['skipped']}")
            continue
        peak = r.get("peak_memory_gib")
        notes = {k: v for k, v in r.items() if k in (
            "batch", "seq_len", "sequences", "engine_start_seconds", "swap_seconds",
            "swap_changed_outputs", "merge_seconds", "trainable_parameters")}
        shown = ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in notes.items())
        rows.append(f"{name:<12} {r['tokens_per_s']:>12,.0f} {r['seconds']:>9.2f} "
                    f"{'-' if peak is None else f'{peak:.2f}':>9}  {shown}")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (the check) or cpu (with --small: the smoke test)")
    parser.add_argument("--small", action="store_true",
                        help="a tiny model and batches instead of Qwen2.5-0.5B's shape")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="auto: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="train with activation recomputation")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM even if importable")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_check.json",
                        help="where the JSON goes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; use --device cpu --small for the smoke test",
              file=sys.stderr)
        return 2
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(
        args.dtype, torch.bfloat16 if args.device == "cuda" else torch.float32)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        folder = build_model(Path(scratch) / "model", SMALL if args.small else QWEN_0_5B, dtype)
        build_seconds = time.perf_counter() - began
        results = run_sections(folder, args, dtype)
    record = {"environment": environment(args.device), "small": args.small,
              "dtype": str(dtype).removeprefix("torch."), "build_seconds": build_seconds,
              "total_seconds": time.perf_counter() - began, "results": results}
    print(table(results))
    print(f"gpu_check: {record['total_seconds']:.0f} s in all; JSON in {args.out}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
