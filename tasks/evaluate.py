"""Evaluate: greedy answers to the domain's fixed held-out set, which the proposer never writes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from domains.base import Domain, Problem
from domains.chat import completion_cutter
from models.backends import ProgressCallback, RolloutBackend, SamplingParams
from storage.datasets import read_rows
from storage.fingerprint import row_id
from tasks.context import Checkpoint, RunContext
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.stage import StageResult, run_stage

VERSION = 1


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
    cut = completion_cutter(domain)  # [prompt] stop strings
    completions = [cut(o[0].text) for o in outputs]
    references = [p.reference for p in items]
    if hasattr(domain, "judge"):  # the free-form domains score each item by its task
        scores = [j.reward for j in domain.judge(completions, references, [p.text for p in items])]
    else:
        scores = domain.score(completions, references)
    return [
        {"run_id": run_id, "round": round_index, "checkpoint": checkpoint,
         "item_id": row_id("heldout", domain.name, p.text), "level": p.level, "prompt": prompt,
         "completion": completion, "answer": domain.extract(completion), "reference": p.reference,
         "correct": score == 1.0}
        for p, prompt, completion, score in zip(items, prompts, completions, scores, strict=True)
    ]


def heldout_tasks(domain: Domain, per_level: int,
                  items: list[Problem] | None = None) -> dict[str, str]:
    """Held-out item id -> its task, for a domain of several tasks (one with `task_of`, e.g.
    reasoning_gym); empty for the others. `items`: the held-out set, when already drawn."""
    task_of = getattr(domain, "task_of", None)
    if task_of is None:
        return {}
    return {row_id("heldout", domain.name, p.text): task_of(p.text)
            for p in (domain.heldout(per_level) if items is None else items)}


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


@task(name="evaluate", cache_policy=NONE, persist_result=False, **TRANSIENT)
def evaluate(ctx: RunContext, round_index: int, checkpoint: Checkpoint, *,
             stage: str = "evaluate") -> Evaluation:
    from models.backends import backend_for

    cfg = ctx.config

    def compute(fingerprint: str) -> StageResult:
        backend = backend_for(cfg.rollout, checkpoint.path)
        try:
            with progress_bar(f"round {round_index} {stage}", len(items)) as advance:
                rows = eval_rows(backend, ctx.domain, per_level=cfg.domain.heldout_per_level,
                                 max_new_tokens=cfg.evaluate.max_new_tokens,
                                 checkpoint=checkpoint.fingerprint, run_id=ctx.run_id,
                                 round_index=round_index, progress=advance, items=items)
        finally:
            backend.close()
        return StageResult(datasets={"evals": rows}, metrics=accuracy(rows, tasks))

    items = ctx.domain.heldout(cfg.domain.heldout_per_level)  # drawn once for the whole stage
    tasks = heldout_tasks(ctx.domain, cfg.domain.heldout_per_level, items)
    out = run_stage(
        ctx, stage=stage, version=VERSION, round_index=round_index,
        config={"evaluate": cfg.evaluate.model_dump(),
                "heldout_per_level": cfg.domain.heldout_per_level, "domain": cfg.domain.name,
                **cfg.heldout_slice(), **cfg.prompt_slice()},
        inputs={"checkpoint": checkpoint.fingerprint}, compute=compute,
    )
    return Evaluation(read_accuracy(out.path("evals"), tasks), out.path("evals"), out.fingerprint)
