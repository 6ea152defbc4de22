"""Evaluate: greedy answers to the domain's fixed held-out set, which the proposer never writes.

Each answer is judged by the domain's `judge` against the item's problem row, as verify judges
rollouts: `reward` is its reward, or null with the reason in `method` (no_answer, ...); an item
is `correct` at reward 1, and an unjudged item counts as not correct (every held-out item has a
reference, so the accuracy's denominator is the whole set)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from configs.settings import EvaluateSettings
from domains.base import Domain, Problem, problem_row
from models.backends import ProgressCallback, RolloutBackend, SamplingParams
from storage.datasets import read_rows
from storage.fingerprint import row_id
from tasks.context import Checkpoint, RunContext
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.stage import StageResult, run_stage

VERSION = 2  # 2: each answer judged by `Domain.judge` on its problem row; reward and method


def eval_rows(backend: RolloutBackend, domain: Domain, *, per_level: int, max_new_tokens: int,
              checkpoint: str, run_id: str, round_index: int,
              progress: ProgressCallback | None = None,
              items: list[Problem] | None = None) -> list[dict[str, Any]]:
    """Greedy answers to the held-out set (`items`, when the caller already drew it)."""
    items = domain.heldout(per_level) if items is None else items
    prompts = [domain.solver_prompt(p.text) for p in items]
    outputs = backend.generate(prompts, SamplingParams(n=1, temperature=1.0,
                                                       max_new_tokens=max_new_tokens,
                                                       seed=0, greedy=True), progress=progress)
    cut = domain.cut  # [prompt] stop strings
    completions = [cut(o[0].text) for o in outputs]
    judged = domain.judge(completions, [problem_row(p) for p in items])
    return [
        {"run_id": run_id, "round": round_index, "checkpoint": checkpoint,
         "item_id": row_id("heldout", domain.name, p.text), "level": p.level, "prompt": prompt,
         "completion": completion, "answer": domain.extract(completion), "reference": p.reference,
         "reward": j.reward, "method": "reference" if j.reward is not None else j.reason,
         "correct": j.reward == 1.0}
        for p, prompt, completion, j in zip(items, prompts, completions, judged, strict=True)
    ]


def heldout_tasks(domain: Domain, per_level: int,
                  items: list[Problem] | None = None) -> dict[str, str]:
    """Held-out item id -> its task, for the items of a domain of several tasks (`task_of`:
    reasoning_gym's tasks, python_io's modes). `items`: the held-out set, when already drawn."""
    tasks = {row_id("heldout", domain.name, p.text): domain.task_of(p.text)
             for p in (domain.heldout(per_level) if items is None else items)}
    return {item: task for item, task in tasks.items() if task is not None}


def accuracy(rows: list[dict[str, Any]], tasks: dict[str, str] | None = None) -> dict[str, float]:
    """Overall and per-level held-out accuracy: {"accuracy": .., "accuracy_level_1": .., ...}.

    With `tasks` (item id -> task) also per task and per task and level:
    "accuracy_task_<task>" and "accuracy_task_<task>_level_<N>"."""
    by_level: dict[int, list[bool]] = defaultdict(list)
    by_task: dict[str, list[bool]] = defaultdict(list)
    by_task_level: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for r in rows:
        by_level[r["level"]].append(r["correct"])
        task = (tasks or {}).get(r["item_id"])
        if task is not None:
            by_task[task].append(r["correct"])
            by_task_level[(task, r["level"])].append(r["correct"])
    out = {"accuracy": sum(r["correct"] for r in rows) / len(rows)}
    for level, marks in sorted(by_level.items()):
        out[f"accuracy_level_{level}"] = sum(marks) / len(marks)
    for task, marks in sorted(by_task.items()):
        out[f"accuracy_task_{task}"] = sum(marks) / len(marks)
    for (task, level), marks in sorted(by_task_level.items()):
        out[f"accuracy_task_{task}_level_{level}"] = sum(marks) / len(marks)
    return out


def read_accuracy(path: Path, tasks: dict[str, str] | None = None) -> dict[str, float]:
    return accuracy(read_rows(path), tasks)


@dataclass(frozen=True)
class Evaluation:
    """A checkpoint's held-out result: accuracy dict, its `evals` file and the stage fingerprint.

    Indexing reads the accuracy dict (`evaluate(...)["accuracy"]`), as callers did before the
    eval file was needed too (promotion compares items: tasks/promote.py)."""

    accuracy: dict[str, float]
    path: Path
    fingerprint: str

    def __getitem__(self, key: str) -> float:
        return self.accuracy[key]


def evaluate_checkpoint(ctx: RunContext, settings: EvaluateSettings, round_index: int,
                        checkpoint: Checkpoint, items: list[Problem], tasks: dict[str, str], *,
                        stage: str) -> StageResult:
    """The evaluate stage's computation: greedy answers to the drawn held-out `items`."""
    from models.backends import backend_for

    backend = backend_for(settings.backend, checkpoint.path)
    try:
        with progress_bar(f"round {round_index} {stage}", len(items)) as advance:
            rows = eval_rows(backend, ctx.domain,
                             per_level=settings.domain.domain.heldout_per_level,
                             max_new_tokens=settings.max_new_tokens,
                             checkpoint=checkpoint.fingerprint, run_id=ctx.run_id,
                             round_index=round_index, progress=advance, items=items)
    finally:
        backend.close()
    return StageResult(datasets={"evals": rows}, metrics=accuracy(rows, tasks))


@task(name="evaluate", cache_policy=NONE, persist_result=False, **TRANSIENT)
def evaluate(ctx: RunContext, round_index: int, checkpoint: Checkpoint, *,
             stage: str = "evaluate") -> Evaluation:
    settings = EvaluateSettings.from_config(ctx.config)
    per_level = settings.domain.domain.heldout_per_level
    items = ctx.domain.heldout(per_level)  # drawn once for the whole stage
    tasks = heldout_tasks(ctx.domain, per_level, items)
    out = run_stage(
        ctx, stage=stage, version=VERSION, round_index=round_index, settings=settings,
        inputs={"checkpoint": checkpoint.fingerprint},
        compute=lambda _fingerprint: evaluate_checkpoint(ctx, settings, round_index, checkpoint,
                                                         items, tasks, stage=stage),
    )
    return Evaluation(read_accuracy(out.path("evals"), tasks), out.path("evals"), out.fingerprint)
