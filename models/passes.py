"""The train stage's trainer passes: which passes run on which rows, how they run one after
another into one checkpoint, and how an out-of-memory training is retried.

A plan is a list of passes, each a trainer kind and its rows:

    [("dpo", [{"prompt": "<solve>37+5=", "completion": "42", "rejected": "41", ...}, ...]),
     ("proposer-grpo", [{"role": "proposer", "prompt": "<propose level=3>", ...}, ...]),
     ("sft", [{"role": "solver", "completion": "42", "rejected": None, ...}, ...])]

Round 0, the warm-up, is one SFT pass on the seed references: the untrained model samples no
right answers, so GRPO would get no reward and DPO no chosen answer. Each pass starts from the
model the pass before it wrote; the last one writes `<scratch>/model`, the stage's checkpoint.

Crash safety: the first pass saves resumable trainer checkpoints in `<scratch>/trainer` and
resumes from the last complete one; a later pass that finished is renamed to
`<scratch>/model-<kind>` and skipped after a crash, one that had not restarts from the pass
before it (later passes are short). The micro-batch a training started with is recorded in
`<scratch>/plan.json`, so a resumed training continues with it.

The functions take the trainer of one pass, the progress bar and the row split as arguments:
they bind the run's config and domain (tasks/train.py), which this package does not import.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.lora import ADAPTER_DIR
from models.trainer import TrainProgress, TrainResult, last_checkpoint, planned_steps
from storage.recovery import Discarded, notice, pause_point, remove

Rows = list[dict[str, Any]]
Passes = list[tuple[str, Rows]]
# split(algorithm, rows) -> (rows the algorithm's trainer takes, rows an SFT pass takes after it)
RowSplit = Callable[[str, Rows], tuple[Rows, Rows]]
# train_pass(kind, *, base, rows, out_dir, work_dir, epochs, max_steps, seed, progress,
#            save_steps, gradient_accumulation_steps, resume_from) -> TrainResult
PassTrainer = Callable[..., TrainResult]
# progress_bar(description, total) yields advance(n, note)
ProgressBar = Callable[[str, int], AbstractContextManager[Callable[..., None]]]

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class TrainPlan:
    """The passes of one train stage and the step settings they share."""

    passes: Passes
    warmup: bool
    epochs: float
    max_steps: int
    steps: int  # planned optimizer steps of all passes together: the progress bar's total

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.passes]


@dataclass(frozen=True)
class TrainJob:
    """Where and with what the passes of a plan run (everything but the plan itself)."""

    train_pass: PassTrainer
    base: Path  # the model the first pass starts from
    scratch: Path  # the stage's work folder; it survives a crash
    seed: int
    save_steps: int
    label: str  # names the training in notices and on the progress bar
    pause_prefix: str  # of the crash tests' pause points, `<prefix>:step-<n>`
    progress_bar: ProgressBar


@dataclass(frozen=True)
class TrainOutcome:
    """The results of the passes that ran, in order, and the accumulation they ran with."""

    results: list[TrainResult]
    gradient_accumulation_steps: int


def plan_passes(algorithm: str, proposer_algorithm: str, rows: Rows, round_index: int, *,
                split: RowSplit) -> Passes:
    """The trainer passes of one train stage, in order, empty passes left out.

    The algorithm's own pass first, then the rows it does not take in a weighted SFT pass. With
    proposer GRPO a `proposer-grpo` pass comes between them: it takes the prompts of every
    proposer row, and the proposer rows leave the other passes, except that under SFT the
    replayed proposer rows of earlier rounds stay in the solver's pass, as its replayed rows do:
    without them 800 SFT steps on solver rows make the model forget how to write a problem at
    all (measured: 3469 of 4096 proposals empty one round later; GRPO cannot recover from
    rewards that are all 0). Under GRPO or DPO they would form an SFT pass of their own at the
    SFT learning rate, which cost the solver held-out accuracy (0.040 -> 0.015 and 0.060 -> 0.020
    on the absolute-zero and r-zero presets at full size), so there they go to GRPO only.

    Parameters
    ----------
    algorithm
        `train.algorithm` of this round: sft, grpo or dpo.
    proposer_algorithm
        `train.proposer.algorithm`: sft (proposer rows in the SFT pass) or grpo.
    rows
        The round's training rows, replayed rows included.
    round_index
        The round; rows of other rounds are replayed ones.
    split
        The split of rows between the algorithm's trainer and SFT (tasks/rows.py `split_for`).

    Returns
    -------
    list of (kind, rows)
        Kinds `sft`, `grpo`, `dpo` or `proposer-grpo`; only passes with a row of weight > 0,
        or one SFT pass on every row when none has one.
    """
    proposer = [r for r in rows if r["role"] == "proposer"] if proposer_algorithm == "grpo" else []

    def stays_in_solver_sft(row: dict[str, Any]) -> bool:
        """A replayed proposer row under an SFT solver: it keeps the problem format."""
        return algorithm == "sft" and row["round"] != round_index

    kept = ([r for r in rows if r["role"] != "proposer" or stays_in_solver_sft(r)] if proposer
            else rows)
    takes, rest = split(algorithm, kept)
    passes = [(algorithm, takes), ("proposer-grpo", proposer), ("sft", rest)]
    return ([(kind, part) for kind, part in passes if any(r["weight"] > 0 for r in part)]
            or [("sft", rows)])


def plan_training(train: Any, rows: Rows, round_index: int, *, split: RowSplit
                  ) -> TrainPlan:
    """The plan of one train stage: `[train.warmup]`'s SFT settings in round 0, the round's after.

    Parameters
    ----------
    train
        The train stage's settings (configs/settings.py `TrainSettings`, `WarmupTrainSettings`
        in round 0) or a `[train]` section: what it reads is named alike in both.
    rows
        The round's training rows, replayed rows included.
    round_index
        The round; 0 is the warm-up.
    split
        The split of rows between the algorithm's trainer and SFT (tasks/rows.py `split_for`).

    Returns
    -------
    TrainPlan
        Its `steps` count completions for the GRPO passes (`grpo.num_generations` per prompt)
        and cap the proposer's GRPO pass at `proposer.max_steps`, as its trainer does.
    """
    warmup = round_index == 0
    epochs = train.warmup.epochs if warmup else train.epochs
    max_steps = train.warmup.max_steps if warmup else train.max_steps
    passes = plan_passes("sft" if warmup else train.algorithm,
                         "sft" if warmup else train.proposer.algorithm, rows, round_index,
                         split=split)
    # the warm-up's settings (configs/settings.py WarmupTrainSettings) have no GRPO sections
    per_step = {} if warmup else {"grpo": train.grpo.num_generations,
                                  "proposer-grpo": train.grpo.num_generations}
    cap = {} if warmup else {"proposer-grpo": train.proposer.max_steps}
    steps = sum(planned_steps(sum(r["weight"] > 0 for r in part) * per_step.get(kind, 1),
                              epochs=epochs, batch_size=train.batch_size,
                              max_steps=cap.get(kind, max_steps))
                for kind, part in passes)
    return TrainPlan(passes=passes, warmup=warmup, epochs=epochs, max_steps=max_steps,
                     steps=steps)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is CUDA's OutOfMemoryError, a CPU allocator failure, or MemoryError.

    Parameters
    ----------
    exc
        An exception a training raised.

    Returns
    -------
    bool
    """
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text
                                              or "can't allocate memory" in text)


def recorded_accumulation(scratch: Path) -> int:
    """The gradient accumulation of the training whose checkpoints are in `scratch`.

    A resumed training continues with the micro-batch it was started with.

    Parameters
    ----------
    scratch
        The train stage's work folder.

    Returns
    -------
    int
        The accumulation steps in its plan file, 1 if it has none.
    """
    try:
        return int(json.loads((scratch / PLAN_FILE).read_text())["gradient_accumulation_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def resumable_training(scratch: Path, accumulation: int, label: str) -> Path | None:
    """Prepare `scratch` for a training run and find the trainer checkpoint to resume from.

    Incomplete trainer checkpoints (a crash during a save) and a half-saved final model are
    discarded with a one-line notice; a complete checkpoint is announced and resumed from.

    Parameters
    ----------
    scratch
        The train stage's work folder; created when missing.
    accumulation
        The gradient accumulation steps of this run, recorded in its plan file.
    label
        Names the training in the notices.

    Returns
    -------
    Path or None
        The newest complete checkpoint in `scratch/trainer`, None when there is none.
    """
    if (scratch / "model").exists():
        remove(scratch / "model")
    checkpoint, incomplete = last_checkpoint(scratch / "trainer")
    for folder in incomplete:
        remove(folder)
        notice(str(Discarded(folder, "incomplete trainer checkpoint (interrupted while saving)")))
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / PLAN_FILE).write_text(json.dumps({"gradient_accumulation_steps": accumulation}))
    if checkpoint is not None:
        notice(f"flywheel: {label}: resuming from the trainer's checkpoint at step "
               f"{checkpoint.name.removeprefix('checkpoint-')} ({checkpoint})")
    return checkpoint


def step_reporter(advance: Callable[..., None], pause_prefix: str) -> TrainProgress:
    """The trainers' progress callback: one step on the bar, then the crash tests' pause point.

    Parameters
    ----------
    advance
        `advance(n, note)` of the progress bar.
    pause_prefix
        The pause points are `<pause_prefix>:step-<n>` (storage/recovery.py `pause_point`).

    Returns
    -------
    Callable
        `progress(step, total, loss)` as the trainers call it.
    """

    def on_step(step: int, total: int, loss: float | None) -> None:
        advance(1, "" if loss is None else f"loss {loss:.3f}")
        pause_point(f"{pause_prefix}:step-{step}")

    return on_step


def run_passes(plan: TrainPlan, job: TrainJob, accumulation: int) -> list[TrainResult]:
    """One attempt at the plan's passes, each from the model the one before it wrote.

    Parameters
    ----------
    plan
        The passes and their step settings.
    job
        The trainer, folders, seed and progress bar of the stage.
    accumulation
        Gradient accumulation steps of every pass (the micro-batch is the batch over it).

    Returns
    -------
    list of TrainResult
        One per pass trained now, in order; passes that had finished before a crash are
        skipped and have none.
    """
    resume_from = resumable_training(job.scratch, accumulation, job.label)
    results = []
    with job.progress_bar(job.label, plan.steps) as advance:
        on_step = step_reporter(advance, job.pause_prefix)
        base = job.base
        for index, (kind, part) in enumerate(plan.passes):
            first, last = index == 0, index == len(plan.passes) - 1
            out = job.scratch / ("model" if last else f"model-{kind}")
            if not last and out.exists():  # it finished before a crash
                base = out
                continue
            # an unfinished pass writes beside its final name: a crash leaves no `model-<kind>`
            temp = out if last else job.scratch / f".model-{kind}.tmp"
            results.append(job.train_pass(
                kind, base=base, rows=part, out_dir=temp, epochs=plan.epochs,
                max_steps=plan.max_steps, seed=job.seed,
                work_dir=job.scratch / ("trainer" if first else f"trainer-{kind}"),
                progress=on_step, save_steps=job.save_steps if first else 0,
                gradient_accumulation_steps=accumulation,
                resume_from=resume_from if first else None))
            if not last:
                temp.rename(out)
            base = out
    keep_adapters(plan, job.scratch)
    return results


def keep_adapters(plan: TrainPlan, scratch: Path) -> None:
    """Copy the LoRA adapters of the passes before the last into the stage's checkpoint, as
    `adapter-<kind>/` beside the last pass's `adapter/` (models/lora.py); no-op without LoRA.

    Parameters
    ----------
    plan
        The passes that ran.
    scratch
        The train stage's work folder: `model-<kind>` of each earlier pass, `model` the last.
    """
    for kind in plan.kinds[:-1]:
        adapter = scratch / f"model-{kind}" / ADAPTER_DIR
        if adapter.is_dir():
            shutil.copytree(adapter, scratch / "model" / f"{ADAPTER_DIR}-{kind}",
                            dirs_exist_ok=True)


def train_passes(plan: TrainPlan, job: TrainJob, *, batch_size: int,
                 oom_retry_batch_size: int | None) -> TrainOutcome:
    """Run the plan's passes; retry once with a smaller micro-batch after running out of memory.

    The retry starts from step 0 (its scratch folder removed) with micro-batch
    `oom_retry_batch_size` and `batch_size // oom_retry_batch_size` accumulation steps, so each
    optimizer step still covers `batch_size` rows. A training resumed with accumulation already
    (it was retried before the crash) is not retried again.

    Parameters
    ----------
    plan
        The passes and their step settings.
    job
        The trainer, folders, seed and progress bar of the stage.
    batch_size
        `train.batch_size`: rows (GRPO: completions) per optimizer step.
    oom_retry_batch_size
        `train.oom_retry_batch_size`; None or 0 never retries.

    Returns
    -------
    TrainOutcome
    """
    accumulation = recorded_accumulation(job.scratch)
    try:
        return TrainOutcome(run_passes(plan, job, accumulation), accumulation)
    except Exception as exc:
        if not (is_out_of_memory(exc) and oom_retry_batch_size and accumulation == 1):
            raise
        accumulation = batch_size // oom_retry_batch_size
        notice(f"flywheel: {job.label}: out of memory at batch {batch_size}; retrying from "
               f"step 0 with batch {oom_retry_batch_size} x {accumulation} accumulation steps")
        shutil.rmtree(job.scratch, ignore_errors=True)
        return TrainOutcome(run_passes(plan, job, accumulation), accumulation)


def quarters(name: str, rewards: Sequence[float]) -> dict[str, float]:
    """Mean reward of the first and the last quarter of a pass's logged steps.

    Parameters
    ----------
    name
        Prefix of the two metric names.
    rewards
        The pass's mean reward per logged step, in step order.

    Returns
    -------
    dict
        `<name>_first_quarter` and `<name>_last_quarter`; empty when there are no rewards.
    """
    if not rewards:
        return {}
    quarter = max(1, len(rewards) // 4)
    return {f"{name}_first_quarter": sum(rewards[:quarter]) / quarter,
            f"{name}_last_quarter": sum(rewards[-quarter:]) / quarter}


def train_metrics(plan: TrainPlan, outcome: TrainOutcome, rows: Rows, round_index: int
                  ) -> dict[str, float]:
    """The train stage's metrics: steps, loss and tokens of all passes, rows per pass, rewards.

    Parameters
    ----------
    plan
        The passes that were planned.
    outcome
        What they returned.
    rows
        The round's training rows, replayed rows included.
    round_index
        The round; rows of other rounds count as replayed.

    Returns
    -------
    dict
        Per-pass rows and steps only when there is more than one pass; the GRPO passes' reward
        quarters (see `quarters`).
    """
    passes, kinds, results = plan.passes, plan.kinds, outcome.results
    main = results[0]
    rewards = list(main.rewards) if kinds[0] == "grpo" else []
    proposer = results[kinds.index("proposer-grpo")].rewards if "proposer-grpo" in kinds else ()
    return {"steps": sum(r.steps for r in results), "final_loss": main.final_loss or 0.0,
            "trained_tokens": sum(r.trained_tokens for r in results),
            "train_rows": len(rows),
            "rows_cut_at_max_length": sum(r.rows_cut for r in results),
            "rows_dropped_at_max_length": sum(r.rows_dropped for r in results),
            "replayed_rows": sum(r["round"] != round_index for r in rows),
            "gradient_accumulation_steps": outcome.gradient_accumulation_steps,
            **({f"{passes[0][0]}_rows": len(passes[0][1])} if len(passes) > 1 else {}),
            **({"sft_pass_rows": len(passes[-1][1]), "sft_pass_steps": results[-1].steps}
               if len(passes) > 1 and kinds[-1] == "sft" else {}),
            **({"proposer_grpo_rows": len(passes[kinds.index("proposer-grpo")][1]),
                "proposer_grpo_steps": results[kinds.index("proposer-grpo")].steps}
               if "proposer-grpo" in kinds else {}),
            **quarters("grpo_reward", rewards), **quarters("proposer_reward", proposer)}
