"""Trainer adapters over TRL. Every adapter reads a checkpoint folder and training rows and
writes a Hugging Face checkpoint folder, so every algorithm yields the same checkpoint format.

SFT trains on prompt/completion rows with the loss on the completion only (TRL's default for
prompt-completion data). Row `weight` is recorded for audit; SFT trains each row once per epoch
(rows of weight 0 are skipped). GRPO (models/grpo.py) and DPO (models/dpo.py)
share this module's training arguments, model loader, step reports and checkpoint writer.

Every adapter takes a `runtime` (models/runtime.py): the device and dtype, gradient
checkpointing, LoRA (models/lora.py) and the number of processes. The default, float32 on the
CPU with full fine-tuning in one process, is the tiny demo's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.chat_rows import training_examples
from models.runtime import TrainRuntime, precision_arguments, torch_dtype, weights_dtype

log = logging.getLogger(__name__)

TrainProgress = Callable[[int, int, float | None], None]


@dataclass(frozen=True)
class TrainResult:
    steps: int
    final_loss: float | None
    mean_loss: float | None
    trained_tokens: int
    # GRPO: mean verifier reward of each logged step's generations, in step order (else empty)
    rewards: tuple[float, ...] = ()
    # the training curve: per logged step {"step", "loss", "learning_rate", "grad_norm"} (the
    # keys the trainer logged), in step order, including the steps before a resume
    curve: tuple[dict[str, float], ...] = ()
    # SFT: rows longer than `max_length` tokens, cut to it (their ends, answers included, are not
    # trained), and rows the cut left with no completion token, dropped (`length_report`)
    rows_cut: int = 0
    rows_dropped: int = 0


def length_report(lengths: list[int], rows: int, max_length: int) -> tuple[int, int, str | None]:
    """(rows cut, rows dropped, a warning line or None) of an SFT dataset after TRL's truncation:
    `lengths` are its rows' token counts (a cut row has exactly `max_length`), `rows` the rows
    given before it dropped those left with no completion token."""
    cut, dropped = sum(n >= max_length for n in lengths), rows - len(lengths)
    if not cut and not dropped:
        return 0, 0, None
    line = (f"{cut + dropped} of {rows} training rows reach train.max_length = "
            f"{max_length} tokens: {cut} cut to it (their ends, answers included, are not "
            f"trained), {dropped} dropped (nothing of the completion left); raise "
            "train.max_length to train them whole")
    return cut, dropped, line


CURVE_KEYS = ("loss", "learning_rate", "grad_norm")
# `[train] report_to` -> the package its reporter imports
REPORTER_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
# The trackers Flywheel writes itself, one tracker run per flywheel run with steps counted across
# rounds (tasks/tracking.py). The Trainer reports to none: its own reporter would open one run per
# training pass with steps from 0 again.
FLYWHEEL_TRACKERS = ("tensorboard", "mlflow", "wandb")


def check_reporter(report_to: str) -> None:
    """Raise ValueError (one line naming the key and the package) when the reporter that
    `[train] report_to` names is not installed; `none` needs nothing."""
    import importlib.util

    package = REPORTER_PACKAGES.get(report_to)
    if package is not None and importlib.util.find_spec(package) is None:
        msg = (f"train.report_to = {report_to!r} needs the {package} package, which is not "
               f"installed: `pip install {package}`, or set train.report_to = \"none\"")
        raise ValueError(msg)


def curve_points(log_history: list[dict[str, Any]]) -> tuple[dict[str, float], ...]:
    """The training curve in a Trainer's `state.log_history`: one point per entry that logged
    a loss, with its step and whichever of `CURVE_KEYS` it logged (the closing summary entry,
    `train_loss` and runtimes, is not a step)."""
    return tuple(
        {"step": float(entry["step"]),
         **{key: float(entry[key]) for key in CURVE_KEYS if entry.get(key) is not None}}
        for entry in log_history if "loss" in entry and "step" in entry)


def planned_steps(rows: int, *, epochs: float, batch_size: int, max_steps: int) -> int:
    return min(max_steps, max(1, math.ceil(rows * epochs / batch_size)))


_CHECKPOINT_FILES = ("optimizer.pt", "scheduler.pt")
# a full model's weights, or a LoRA adapter's (the Trainer saves only the adapter of a peft model)
_WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors")
# `rng_state.pth` of one process, `rng_state_<rank>.pth` of each of several (models/launch.py)
_RNG_FILES = "rng_state*.pth"


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
            complete = (state.get("global_step") == step
                        and all((folder / name).is_file() for name in _CHECKPOINT_FILES)
                        and any((folder / name).is_file() for name in _WEIGHT_FILES)
                        and any(folder.glob(_RNG_FILES)))
        except (OSError, ValueError):
            complete = False
        if complete:
            return folder, incomplete
        incomplete.append(folder)
    return None, incomplete


def micro_batch_size(batch_size: int, gradient_accumulation_steps: int,
                     runtime: TrainRuntime) -> int:
    """Rows one process takes per forward pass, so that one optimizer step covers `batch_size`
    rows over `gradient_accumulation_steps` micro-batches of `runtime.num_processes` processes."""
    return batch_size // (gradient_accumulation_steps * runtime.num_processes)


def common_arguments(*, work_dir: Path, steps: int, micro_batch: int,
                     gradient_accumulation_steps: int, learning_rate: float, save_steps: int,
                     seed: int, logging_steps: int = 10,
                     runtime: TrainRuntime | None = None) -> dict[str, Any]:
    """TrainingArguments every adapter shares: the runtime's device and precision (default
    float32 on the CPU), cosine schedule, seeded data order, a resumable checkpoint every
    `save_steps` steps (0 = never) in `work_dir`, and no Trainer reporter (the run's tracker is
    written from the catalog: tasks/tracking.py)."""
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
        **precision_arguments(runtime or TrainRuntime()),
        # several processes (models/launch.py): every parameter gets a gradient every step
        **({"ddp_find_unused_parameters": False} if runtime and runtime.num_processes > 1
           else {}),
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


def load_policy(base: Path, runtime: TrainRuntime | None = None) -> tuple[Any, Any]:
    """Tokenizer and model of the checkpoint folder every adapter starts from: in the runtime's
    weights dtype (default float32), wrapped in a fresh LoRA adapter when `runtime.lora` is set.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    runtime = runtime or TrainRuntime()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype(weights_dtype(runtime)))
    if runtime.lora is not None:
        from models.lora import with_adapter

        model = with_adapter(model, runtime.lora)
    return AutoTokenizer.from_pretrained(base), model


def save_checkpoint(model: Any, tokenizer: Any, out_dir: Path, runtime: TrainRuntime) -> None:
    """Write a full Hugging Face checkpoint in the training dtype: a LoRA model's adapter goes
    to `out_dir/adapter` and the weights with it merged to `out_dir` (models/lora.py)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if runtime.lora is not None:
        from models.lora import merged

        model = merged(model, out_dir)
    dtype = torch_dtype(runtime.precision.dtype)
    if model.dtype != dtype:  # float16 trained on float32 master weights
        model = model.to(dtype)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def fit(trainer: Any, resume_from: Path | None) -> Any:
    """Run a TRL trainer without its console printer, from `resume_from` when given."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def finish(trainer: Any, output: Any, tokenizer: Any, out_dir: Path, *, trained_tokens: float,
           rewards: tuple[float, ...] = (), runtime: TrainRuntime | None = None,
           rows_cut: int = 0, rows_dropped: int = 0) -> TrainResult:
    """Write the checkpoint format every adapter writes (`save_checkpoint`; in a multi-process
    training the main process writes it) and summarise the training; losses include the steps
    before a resume."""
    if trainer.is_world_process_zero():
        save_checkpoint(trainer.model, tokenizer, out_dir, runtime or TrainRuntime())
    losses = logged(trainer, "loss")
    return TrainResult(steps=output.global_step, final_loss=losses[-1] if losses else None,
                       mean_loss=float(output.training_loss), trained_tokens=int(trained_tokens),
                       rewards=rewards, curve=curve_points(trainer.state.log_history),
                       rows_cut=rows_cut, rows_dropped=rows_dropped)


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
    runtime: TrainRuntime | None = None,
) -> TrainResult:
    """Fine-tune `base` on prompt/completion `rows` with TRL's SFTTrainer; save to `out_dir`.

    `batch_size` rows per optimizer step, in `gradient_accumulation_steps` micro-batches (of
    each of `runtime.num_processes` processes). Every `save_steps` steps (0 = never) a resumable
    checkpoint goes to `work_dir`; `resume_from` (one such checkpoint) continues from its step
    with its optimizer, scheduler and RNG states, so the steps are the same ones an
    uninterrupted run takes. `runtime` (default: float32 on the CPU) sets the device, dtype,
    gradient checkpointing and LoRA.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [r for r in rows if r["weight"] > 0]
    if not rows:
        msg = "no training rows with weight > 0; nothing to train"
        raise ValueError(msg)
    steps = planned_steps(len(rows), epochs=epochs, batch_size=batch_size, max_steps=max_steps)
    runtime = runtime or TrainRuntime()
    micro_batch = micro_batch_size(batch_size, gradient_accumulation_steps, runtime)
    tokenizer, model = load_policy(base, runtime)
    # a chat model's rows in TRL's conversational form (models/chat_rows.py)
    dataset = Dataset.from_list(training_examples(tokenizer, rows, {"completion": "completion"}))
    config = SFTConfig(
        **common_arguments(work_dir=work_dir, steps=steps, micro_batch=micro_batch,
                           gradient_accumulation_steps=gradient_accumulation_steps,
                           learning_rate=learning_rate, save_steps=save_steps, seed=seed,
                           runtime=runtime),
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
    lengths = [len(x) for x in trainer.train_dataset["input_ids"]]
    cut, dropped, warning = length_report(lengths, len(rows), max_length)
    if warning:
        log.warning(warning)
    output = fit(trainer, resume_from)
    tokens_per_row = sum(lengths) / max(len(lengths), 1)
    return finish(trainer, output, tokenizer, out_dir, runtime=runtime,
                  trained_tokens=tokens_per_row * steps * batch_size, rows_cut=cut,
                  rows_dropped=dropped)
