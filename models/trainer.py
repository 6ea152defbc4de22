"""Trainer adapters over TRL. Every adapter reads a checkpoint folder and training rows and
writes a Hugging Face checkpoint folder, so every algorithm yields the same checkpoint format.

SFT trains on prompt/completion rows with the loss on the completion only (TRL's default for
prompt-completion data). Row `weight` is recorded for audit; SFT trains each row once per epoch
(rows of weight 0 are skipped). GRPO (models/grpo.py) and DPO (models/dpo.py)
share this module's training arguments, step reports and checkpoint writer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TrainProgress = Callable[[int, int, float | None], None]


@dataclass(frozen=True)
class TrainResult:
    steps: int
    final_loss: float | None
    mean_loss: float | None
    trained_tokens: int
    # GRPO: mean verifier reward of each logged step's generations, in step order (else empty)
    rewards: tuple[float, ...] = ()


def planned_steps(rows: int, *, epochs: float, batch_size: int, max_steps: int) -> int:
    return min(max_steps, max(1, math.ceil(rows * epochs / batch_size)))


_CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth")


def last_checkpoint(work_dir: Path) -> tuple[Path | None, list[Path]]:
    """The newest complete trainer checkpoint (`checkpoint-N`) in `work_dir`, and the
    incomplete ones found on the way (newer than it; the caller discards them).

    The Trainer writes a checkpoint's files in place and `trainer_state.json` last, so a
    checkpoint is complete when that file parses and names step N, and the weights, optimizer,
    scheduler and RNG states are there.
    """
    import json

    steps = []
    for folder in Path(work_dir).glob("checkpoint-*"):
        suffix = folder.name.removeprefix("checkpoint-")
        if folder.is_dir() and suffix.isdigit():
            steps.append((int(suffix), folder))
    incomplete: list[Path] = []
    for step, folder in sorted(steps, reverse=True):
        try:
            state = json.loads((folder / "trainer_state.json").read_text())
            complete = state.get("global_step") == step and all(
                (folder / name).is_file() for name in _CHECKPOINT_FILES)
        except (OSError, ValueError):
            complete = False
        if complete:
            return folder, incomplete
        incomplete.append(folder)
    return None, incomplete


def common_arguments(*, work_dir: Path, steps: int, micro_batch: int,
                     gradient_accumulation_steps: int, learning_rate: float, save_steps: int,
                     seed: int, logging_steps: int = 10) -> dict[str, Any]:
    """TrainingArguments every adapter shares: float32 on CPU, cosine schedule, seeded data
    order, a resumable checkpoint every `save_steps` steps (0 = never) in `work_dir`."""
    return {
        "output_dir": str(work_dir),
        "max_steps": steps,
        "per_device_train_batch_size": micro_batch,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "learning_rate": learning_rate,
        "lr_scheduler_type": "cosine",
        "warmup_steps": min(20, steps // 10),
        "weight_decay": 0.0,
        "logging_steps": logging_steps,
        "save_strategy": "steps" if save_steps else "no",
        "save_steps": save_steps or 500,
        "save_total_limit": 1,
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,
        "seed": seed,
        "data_seed": seed,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "log_level": "error",
    }


def report_callback(progress: TrainProgress | None, steps: int):
    """A TrainerCallback that calls `progress(step, steps, last logged loss)` after every step."""
    from transformers import TrainerCallback

    losses: list[float] = []

    class _Report(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

        def on_step_end(self, args, state, control, **kwargs):
            if progress is not None:
                progress(state.global_step, steps, losses[-1] if losses else None)

    return _Report()


def logged(trainer: Any, key: str) -> list[float]:
    """Every value of `key` the trainer logged, in step order (including steps before a resume)."""
    return [float(entry[key]) for entry in trainer.state.log_history if key in entry]


def load_policy(base: Path) -> tuple[Any, Any]:
    """Tokenizer and float32 model of the checkpoint folder every adapter starts from."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoTokenizer.from_pretrained(base),
            AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32))


def fit(trainer: Any, resume_from: Path | None) -> Any:
    """Run a TRL trainer without its console printer, from `resume_from` when given."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def finish(trainer: Any, output: Any, tokenizer: Any, out_dir: Path, *, trained_tokens: float,
           rewards: tuple[float, ...] = ()) -> TrainResult:
    """Write the checkpoint format every adapter writes (`save_pretrained` model + tokenizer)
    and summarise the training; losses include the steps before a resume."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    losses = logged(trainer, "loss")
    return TrainResult(steps=output.global_step, final_loss=losses[-1] if losses else None,
                       mean_loss=float(output.training_loss), trained_tokens=int(trained_tokens),
                       rewards=rewards)


def train_sft(
    *,
    base: Path,
    rows: list[dict[str, Any]],
    out_dir: Path,
    learning_rate: float,
    batch_size: int,
    epochs: float,
    max_steps: int,
    max_length: int,
    seed: int,
    work_dir: Path,
    progress: TrainProgress | None = None,
    save_steps: int = 0,
    gradient_accumulation_steps: int = 1,
    resume_from: Path | None = None,
) -> TrainResult:
    """Fine-tune `base` on prompt/completion `rows` with TRL's SFTTrainer; save to `out_dir`.

    `batch_size` rows per optimizer step, in `gradient_accumulation_steps` micro-batches.
    Every `save_steps` steps (0 = never) a resumable checkpoint goes to `work_dir`;
    `resume_from` (one such checkpoint) continues from its step with its optimizer, scheduler
    and RNG states, so the steps are the same ones an uninterrupted run takes.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [r for r in rows if r["weight"] > 0]
    if not rows:
        msg = "no training rows with weight > 0; nothing to train"
        raise ValueError(msg)
    steps = planned_steps(len(rows), epochs=epochs, batch_size=batch_size, max_steps=max_steps)
    micro_batch = batch_size // gradient_accumulation_steps
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]}
                                 for r in rows])
    tokenizer, model = load_policy(base)
    config = SFTConfig(
        **common_arguments(work_dir=work_dir, steps=steps, micro_batch=micro_batch,
                           gradient_accumulation_steps=gradient_accumulation_steps,
                           learning_rate=learning_rate, save_steps=save_steps, seed=seed),
        max_length=max_length,
        packing=False,
        completion_only_loss=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[report_callback(progress, steps)],
    )
    output = fit(trainer, resume_from)
    tokens_per_row = sum(len(x) for x in trainer.train_dataset["input_ids"]) / len(rows)
    return finish(trainer, output, tokenizer, out_dir,
                  trained_tokens=tokens_per_row * steps * batch_size)
