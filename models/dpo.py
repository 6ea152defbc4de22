"""DPO over TRL's DPOTrainer, on verified chosen/rejected pairs.

Rows are pairs stored as training rows (tasks/curriculum/selection.py builds them):
`completion` is the chosen answer (the verifier gave it reward 1), `rejected` a wrong answer
(reward 0) to the same prompt:

    {"prompt": "<solve>37+5=", "completion": "42", "rejected": "41", "weight": 1.0, ...}

The reference model is the incumbent the training starts from (TRL loads a frozen copy of
`base`); the sigmoid loss pushes the chosen answer's log-probability ratio over the rejected
one's, scaled by `beta`. The checkpoint written is the same Hugging Face folder SFT writes.
In the spirit of eva (creator/solver with preferences), which trains DPO on the solver's best
and worst responses; here "best" and "worst" are exact verdicts, not a reward model's scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.chat_rows import training_examples
from models.runtime import TrainRuntime
from models.trainer import (
    TrainProgress,
    TrainResult,
    common_arguments,
    finish,
    fit,
    load_policy,
    micro_batch_size,
    planned_steps,
    report_callback,
)


def dpo_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of weight > 0, each a pair; a row without a `rejected` completion, or no pair at
    all, raises: the caller routes unpaired rows elsewhere (tasks/rows.py `split_for`)."""
    rows = [r for r in rows if r["weight"] > 0]
    unpaired = [r for r in rows if r.get("rejected") is None]
    if unpaired:
        msg = (f"{len(unpaired)} DPO rows have no rejected completion (first: prompt "
               f"{unpaired[0]['prompt']!r}); DPO trains chosen/rejected pairs only")
        raise ValueError(msg)
    if not rows:
        msg = "no DPO pairs with weight > 0; nothing to train"
        raise ValueError(msg)
    return rows


def tokens_per_pair(tokenizer: Any, rows: list[dict[str, Any]]) -> float:
    """Mean tokens of a pair: the prompt with the chosen plus the prompt with the rejected."""
    return sum(len(tokenizer(r["prompt"] + r["completion"]).input_ids)
               + len(tokenizer(r["prompt"] + r["rejected"]).input_ids) for r in rows) / len(rows)


def train_dpo(
    *,
    base: Path,
    rows: list[dict[str, Any]],
    out_dir: Path,
    learning_rate: float,
    batch_size: int,
    epochs: float,
    max_steps: int,
    max_length: int,
    beta: float,
    seed: int,
    work_dir: Path,
    progress: TrainProgress | None = None,
    save_steps: int = 0,
    gradient_accumulation_steps: int = 1,
    resume_from: Path | None = None,
    logging_steps: int = 10,
    runtime: TrainRuntime | None = None,
) -> TrainResult:
    """Train `base` with DPO on (prompt, chosen = `completion`, `rejected`) rows; save to
    `out_dir`.

    `batch_size` pairs per optimizer step in `gradient_accumulation_steps` micro-batches;
    resumable from a trainer checkpoint like `train_sft`, on the device and in the precision
    of `runtime` (see `train_sft`; under LoRA the reference is the base with the adapter
    disabled, not a second copy). Rows with weight 0 are left out; a row of weight > 0 without
    a `rejected` completion is not a pair and raises (`dpo_pairs`).
    """
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    rows = dpo_pairs(rows)
    steps = planned_steps(len(rows), epochs=epochs, batch_size=batch_size, max_steps=max_steps)
    runtime = runtime or TrainRuntime()
    micro_batch = micro_batch_size(batch_size, gradient_accumulation_steps, runtime)
    tokenizer, model = load_policy(base, runtime)
    # a chat model's pairs in TRL's conversational form (models/chat_rows.py)
    dataset = Dataset.from_list(training_examples(tokenizer, rows, {"chosen": "completion",
                                                                    "rejected": "rejected"}))
    config = DPOConfig(
        **common_arguments(work_dir=work_dir, steps=steps, micro_batch=micro_batch,
                           gradient_accumulation_steps=gradient_accumulation_steps,
                           learning_rate=learning_rate, save_steps=save_steps, seed=seed,
                           logging_steps=logging_steps, runtime=runtime),
        max_length=max_length,
        beta=beta,
    )
    trainer = DPOTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[report_callback(progress, steps)],
    )
    output = fit(trainer, resume_from)
    return finish(trainer, output, tokenizer, out_dir, runtime=runtime,
                  trained_tokens=tokens_per_pair(tokenizer, rows) * output.global_step * batch_size)
