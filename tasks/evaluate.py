"""Evaluate: answers to the domain's fixed held-out set, which the proposer never writes.

Each answer is judged by the domain's `judge` against the item's problem row, as verify judges
rollouts: `reward` is its reward, or null with the reason in `method` (no_answer, ...); an
answer is `correct` at a reward of `[evaluate] correct_threshold` or more (`is_correct`; default
1: only a fully right answer, which is all an exact, math or program check gives; a graded
verifier's runs set it lower, e.g. 0.75 for a 1-10 judge's 8 and up), and an unjudged answer
counts as not correct (the accuracy's denominator is the whole set). Every held-out item has a
reference, except a prompt without an answer in a dataset file whose answers a judge scores
(domains/dataset.py): its `reference` is null and the judge's reward decides.

By default (`[evaluate] samples = 1`, `temperature = 0`) each item gets one greedy answer, the
same on every run. With `samples = n > 1` at `temperature > 0` each item gets n sampled answers,
one eval row per (item, sample) with its `sample` index, and the stage records besides the
accuracy (pass@1: the mean over all samples, so the promote rule reads the same key):

    pass_at_K     the unbiased pass@k estimator of Chen et al. (2021, "Evaluating Large
                  Language Models Trained on Code"): per item with c of n samples correct,
                  1 - C(n - c, k) / C(n, k), averaged over items; k = 1, 2, 4, ... below n, and n
    maj_at_K      the share of items whose majority answer over K samples is correct: the
                  answers the verifier judged vote (`domain.extract`'s answer, the project's one
                  majority rule: tasks/curriculum/votes.py, ties to the smallest string); the
                  winning answer is correct when its samples were judged correct. K = 2, 4, ...
                  below n, and n: per item the mean over its K-subsets of samples (every subset
                  when there are at most `MAJ_SUBSETS`, else that many drawn with a fixed seed;
                  K = n is the one vote of all n samples), so like pass@k it estimates what K
                  fresh samples would give
    maj_at_N_unjudged  answers left out of the votes because their reward is None (N = n)
    maj_at_N_no_vote   items without a judged answer among all n: counted as not correct

and for every figure, accuracy too (also with one sample), a 95 % interval over the items
(`<name>_low`, `<name>_high`: storage/audit/round_metrics.py `item_interval`, Wilson for
pass/fail items, a fixed-seed bootstrap over items for fractional ones):

    {"accuracy": 0.55, "accuracy_low": 0.48, "accuracy_high": 0.62, "samples": 4.0,
     "pass_at_1": 0.55, "pass_at_2": 0.66, ..., "pass_at_4": 0.74, "maj_at_2": 0.52,
     "maj_at_4": 0.6, ...}

With `[evaluate] benchmarks` the same backend then answers each benchmark file the same way
(`benchmark_metrics`, tasks/benchmarks.py): metrics `benchmark/<name>/accuracy`, `_low`,
`_high`, `pass_at_K`, ... and `in_training` / `overlap` (the round's training rows); no rows.

Every checkpoint is sampled with the same seed (the run's evaluate seed of round 0), so the
candidate and the incumbent answer with the same random numbers: their paired difference
(tasks/promote.py, which averages an item's samples) then carries less sampling noise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from prefect import task
from prefect.cache_policies import NONE

from configs import DatasetConfig
from configs.settings import EvaluateSettings
from domains.base import Domain, Problem, problem_row
from domains.judge_rows import model_judge_of
from models.backends import ProgressCallback, RolloutBackend, SamplingParams
from storage.audit.round_metrics import item_interval
from storage.datasets import read_rows
from storage.fingerprint import row_id
from tasks.benchmarks import named, read_benchmark, training_leaks
from tasks.context import Checkpoint, RunContext
from tasks.curriculum.votes import majority_vote
from tasks.judgements import eval_judgements
from tasks.progress import progress_bar
from tasks.retry import TRANSIENT
from tasks.stage import StageResult, run_stage

VERSION = 3  # 3: [evaluate] samples and temperature; rows carry `sample`; intervals, pass@k, maj@k
MAJ_SUBSETS = 1000  # k-subsets of an item's samples that maj@k averages over (`majority_at_ks`)
MAJ_SEED = 0  # the subsets' draw when there are more than MAJ_SUBSETS


def sampling_params(*, samples: int, temperature: float, max_new_tokens: int,
                    seed: int) -> SamplingParams:
    """Greedy answers at temperature 0 (seed 0, as before `samples` existed: the same call and
    the same answers), else `samples` answers per item at `temperature` from `seed`."""
    if temperature == 0:
        return SamplingParams(n=samples, temperature=1.0, max_new_tokens=max_new_tokens, seed=0,
                              greedy=True)
    return SamplingParams(n=samples, temperature=temperature, max_new_tokens=max_new_tokens,
                          seed=seed)


def is_correct(reward: float | None, correct_threshold: float) -> bool:
    """Whether an answer of `reward` counts correct: judged, at `correct_threshold` or more (the one
    rule of evaluate, its benchmarks and reverify's re-judged evals)."""
    return reward is not None and reward >= correct_threshold


def eval_rows(backend: RolloutBackend, domain: Domain, *, per_level: int, max_new_tokens: int,
              checkpoint: str, run_id: str, round_index: int,
              progress: ProgressCallback | None = None,
              items: list[Problem] | None = None, samples: int = 1, temperature: float = 0.0,
              seed: int = 0, correct_threshold: float = 1.0) -> list[dict[str, Any]]:
    """Answers to the held-out set (`items`, when the caller already drew it): `samples` per
    item, greedy at temperature 0; one row per (item, sample), item-major, correct at a reward
    of `correct_threshold` or more."""
    items = domain.heldout(per_level) if items is None else items
    prompts = [domain.solver_prompt(p.text) for p in items]
    params = sampling_params(samples=samples, temperature=temperature,
                             max_new_tokens=max_new_tokens, seed=seed)
    outputs = backend.generate(prompts, params, progress=progress)
    cut = domain.cut  # [prompt] stop strings
    answered = [(p, prompt, k, cut(o.text)) for p, prompt, item_outputs
                in zip(items, prompts, outputs, strict=True) for k, o in enumerate(item_outputs)]
    judged = domain.judge([completion for *_, completion in answered],
                          [problem_row(p) for p, *_ in answered])
    return [
        {"run_id": run_id, "round": round_index, "checkpoint": checkpoint,
         "item_id": row_id("heldout", domain.name, p.text), "level": p.level, "prompt": prompt,
         "completion": completion, "answer": domain.extract(completion), "reference": p.reference,
         "reward": j.reward, "method": "reference" if j.reward is not None else j.reason,
         "correct": is_correct(j.reward, correct_threshold), "sample": k}
        for (p, prompt, k, completion), j in zip(answered, judged, strict=True)
    ]


def heldout_tasks(domain: Domain, per_level: int,
                  items: list[Problem] | None = None) -> dict[str, str]:
    """Held-out item id -> its task, for the items of a domain of several tasks (`task_of`:
    reasoning_gym's tasks, python_io's modes). `items`: the held-out set, when already drawn."""
    tasks = {row_id("heldout", domain.name, p.text): domain.task_of(p.text)
             for p in (domain.heldout(per_level) if items is None else items)}
    return {item: task for item, task in tasks.items() if task is not None}


def accuracy(rows: list[dict[str, Any]], tasks: dict[str, str] | None = None) -> dict[str, float]:
    """Overall and per-level held-out accuracy: {"accuracy": .., "accuracy_level_1": .., ...},
    the share of correct rows (with several samples per item: pass@1, the mean over samples).

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


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c are correct (Chen et al. 2021):
    1 - C(n - c, k) / C(n, k), the chance that k of the n samples drawn without replacement hold
    a correct one. Exact (integer binomials, no product approximation); k must be 1..n."""
    if not 1 <= k <= n or not 0 <= c <= n:
        msg = f"pass@{k} from {c} correct of {n} samples: need 1 <= k <= n and 0 <= c <= n"
        raise ValueError(msg)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_ks(samples: int) -> list[int]:
    """The k of the pass@k figures for `samples` answers per item: the powers of two below it,
    and `samples` itself (4 -> [1, 2, 4]; 6 -> [1, 2, 4, 6])."""
    return sorted({2**i for i in range(samples.bit_length()) if 2**i < samples} | {samples})


def majority_correct(answers: list[str | None], rewards: list[float | None],
                     corrects: list[bool]) -> bool | None:
    """Whether an item's majority answer is correct: the answers of the samples the verifier
    judged vote (`majority_vote`: an answer None votes for nothing, ties go to the smallest
    string); None when no judged sample has an answer (no vote)."""
    judged = [(a, c) for a, r, c in zip(answers, rewards, corrects, strict=True) if r is not None]
    label = majority_vote([a for a, _ in judged]).label
    if label is None:
        return None
    return next(c for a, c in judged if a == label)


def majority_at_ks(answers: list[str | None], rewards: list[float | None],
                   corrects: list[bool], ks: list[int]) -> dict[int, float]:
    """maj@k of one item from its n samples for each k of `ks` (each 1..n): the share of its
    k-subsets whose majority answer is correct, over every subset when there are at most
    `MAJ_SUBSETS`, else over `MAJ_SUBSETS` drawn with a fixed seed (the first k of each of
    `MAJ_SUBSETS` seeded permutations, shared by the ks). The vote is `majority_correct`'s:
    judged answers vote, ties go to the smallest string, no vote counts as not correct, and an
    answer is correct as its first judged sample was (with all n samples, exactly
    `majority_correct`)."""
    n = len(answers)
    if not all(1 <= k <= n for k in ks):
        raise ValueError(f"maj@k from {n} samples for k in {ks}: need 1 <= k <= n")
    voting = [a if r is not None else None for a, r in zip(answers, rewards, strict=True)]
    labels = sorted({a for a in voting if a is not None})  # code order = the tie order
    if not labels:
        return dict.fromkeys(ks, 0.0)
    code = {a: i for i, a in enumerate(labels)}
    right = np.zeros(len(labels), dtype=bool)
    for a, c in reversed(list(zip(voting, corrects, strict=True))):  # the first sample wins
        if a is not None:
            right[code[a]] = c
    codes = np.array([code.get(a, len(labels)) for a in voting])  # len(labels): no vote
    drawn = None
    out = {}
    for k in ks:
        if math.comb(n, k) <= MAJ_SUBSETS:
            subsets = np.array(list(combinations(range(n), k)))
        else:
            if drawn is None:
                draw = np.random.default_rng(MAJ_SEED)
                drawn = draw.permuted(np.tile(np.arange(n), (MAJ_SUBSETS, 1)), axis=1)
            subsets = drawn[:, :k]
        width = len(labels) + 1
        offsets = np.arange(len(subsets))[:, None] * width
        counts = np.bincount((codes[subsets] + offsets).ravel(),
                             minlength=len(subsets) * width).reshape(len(subsets), width)[:, :-1]
        wins = right[counts.argmax(axis=1)] & (counts.max(axis=1) > 0)  # argmax: first leader
        out[k] = float(wins.mean())
    return out


def _by_item(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows of each held-out item (its samples), in first-seen order."""
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_item[r["item_id"]].append(r)
    return by_item


def _with_interval(out: dict[str, float | None], name: str, scores: list[float]) -> None:
    """`name`: the mean of the items' scores; `name_low`, `name_high`: its 95 % interval."""
    out[name] = sum(scores) / len(scores)
    out[f"{name}_low"], out[f"{name}_high"] = item_interval(scores)


def sample_figures(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The accuracy's 95 % interval over items and, with several samples per item, pass@k,
    maj@n and their intervals and counts (module docstring). The accuracy itself is
    `accuracy`'s; items are told apart by `item_id`, their samples are their rows."""
    groups = list(_by_item(rows).values())
    if not groups:
        return {}
    out: dict[str, float | None] = {}
    out["accuracy_low"], out["accuracy_high"] = item_interval(
        [passed for _, passed in item_passes(rows).values()])
    samples = max(len(g) for g in groups)
    if samples == 1:
        return out
    if any(len(g) != samples for g in groups):
        msg = (f"evals: the held-out items have {sorted({len(g) for g in groups})} samples; "
               f"every item needs the same number (evaluate.samples = {samples})")
        raise ValueError(msg)
    out["samples"] = float(samples)
    for k in pass_at_ks(samples):
        _with_interval(out, f"pass_at_{k}",
                       [pass_at_k(samples, sum(r["correct"] for r in g), k) for g in groups])
    ks = pass_at_ks(samples)[1:]
    majorities = [majority_at_ks([r["answer"] for r in g], [r["reward"] for r in g],
                                 [r["correct"] for r in g], ks) for g in groups]
    for k in ks:
        _with_interval(out, f"maj_at_{k}", [m[k] for m in majorities])
    votes = [majority_correct([r["answer"] for r in g], [r["reward"] for r in g],
                              [r["correct"] for r in g]) for g in groups]
    out[f"maj_at_{samples}_unjudged"] = float(sum(r["reward"] is None for r in rows))
    out[f"maj_at_{samples}_no_vote"] = float(sum(v is None for v in votes))
    return out


def item_passes(rows: list[dict[str, Any]]) -> dict[str, tuple[int, float]]:
    """Per held-out item (`item_id`): its level and the share of its samples that are correct
    (1.0 or 0.0 with one sample). The paired promotion rules compare items, not samples: an
    item's samples answer one question, so they are one unit (tasks/promote.py)."""
    return {item: (g[0]["level"], sum(bool(r["correct"]) for r in g) / len(g))
            for item, g in _by_item(rows).items()}


def benchmark_metrics(backend: RolloutBackend, domain: Domain, benchmarks: dict[str, str],
                      limits: DatasetConfig, *, train_rows: pl.DataFrame | None,
                      max_new_tokens: int, samples: int, temperature: float, seed: int,
                      checkpoint: str, run_id: str, round_index: int,
                      correct_threshold: float = 1.0) -> dict[str, float | None]:
    """Every benchmark file (tasks/benchmarks.py) answered on `backend` as the held-out set is
    (`eval_rows`: the run's prompt, extraction, judge, samples and temperature), its figures
    under `benchmark/<name>/` (accuracy, interval, pass@k; no per-level split) and its leaks
    into `train_rows`, the round's training rows."""
    metrics: dict[str, float | None] = {}
    for name, path in sorted(benchmarks.items()):
        items = read_benchmark(path, limits)
        rows = eval_rows(backend, domain, per_level=0, max_new_tokens=max_new_tokens,
                         checkpoint=checkpoint, run_id=run_id, round_index=round_index,
                         items=items, samples=samples, temperature=temperature, seed=seed,
                         correct_threshold=correct_threshold)
        metrics |= named(name, {"accuracy": accuracy(rows)["accuracy"], **sample_figures(rows)})
        metrics |= training_leaks(name, items, train_rows)
    return metrics


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
                        stage: str, train_rows: Path | None = None) -> StageResult:
    """The evaluate stage's computation: `settings.samples` answers to each of the drawn
    held-out `items` (greedy at temperature 0), their accuracy and figures; then the same for
    each of `settings.benchmarks` (tasks/benchmarks.py), checked against `train_rows`, the
    round's training rows (None for the base model)."""
    from models.backends import backend_for

    backend = backend_for(settings.backend, checkpoint.path)
    seed = ctx.stage_seed("evaluate", 0)  # one seed for every checkpoint
    judge = model_judge_of(ctx.domain)
    spent_before = replace(judge.cost) if judge is not None else None
    try:
        with progress_bar(f"round {round_index} {stage}",
                          len(items) * settings.samples) as advance:
            rows = eval_rows(backend, ctx.domain,
                             per_level=settings.domain.domain.heldout_per_level,
                             max_new_tokens=settings.max_new_tokens,
                             checkpoint=checkpoint.fingerprint, run_id=ctx.run_id,
                             round_index=round_index, progress=advance, items=items,
                             samples=settings.samples, temperature=settings.temperature,
                             seed=seed, correct_threshold=settings.correct_threshold)
        benchmarks = benchmark_metrics(
            backend, ctx.domain, settings.benchmarks, settings.domain.domain.dataset,
            train_rows=None if train_rows is None else pl.read_parquet(train_rows),
            max_new_tokens=settings.max_new_tokens, samples=settings.samples,
            temperature=settings.temperature, seed=seed, checkpoint=checkpoint.fingerprint,
            run_id=ctx.run_id, round_index=round_index,
            correct_threshold=settings.correct_threshold) if settings.benchmarks else {}
    finally:
        backend.close()
    if benchmarks and stage == "evaluate":  # the run's own checkpoint: its card lists them
        from tasks.model_card import add_benchmarks

        add_benchmarks(checkpoint.path, benchmarks)
    datasets: dict[str, Any] = {"evals": rows}
    metrics = {**accuracy(rows, tasks), **sample_figures(rows), **benchmarks}
    if judge is not None and spent_before is not None:  # the judge's calls are data too
        datasets["judgements"] = eval_judgements(judge, ctx.domain, rows, items)
        metrics.update(judge.cost.since(spent_before))
    return StageResult(datasets=datasets, metrics=metrics)


@task(name="evaluate", cache_policy=NONE, persist_result=False, **TRANSIENT)
def evaluate(ctx: RunContext, round_index: int, checkpoint: Checkpoint, *,
             stage: str = "evaluate") -> Evaluation:
    settings = EvaluateSettings.from_config(ctx.config)
    per_level = settings.domain.domain.heldout_per_level
    items = ctx.domain.heldout(per_level)  # drawn once for the whole stage
    tasks = heldout_tasks(ctx.domain, per_level, items)
    trained = (ctx.catalog.latest_dataset(ctx.run_id, round_index, "train_rows")
               if settings.benchmarks and stage == "evaluate" else None)  # the leak check's
    out = run_stage(
        ctx, stage=stage, version=VERSION, round_index=round_index, settings=settings,
        inputs={"checkpoint": checkpoint.fingerprint},
        compute=lambda _fingerprint: evaluate_checkpoint(
            ctx, settings, round_index, checkpoint, items, tasks, stage=stage,
            train_rows=None if trained is None else Path(trained)),
    )
    return Evaluation(read_accuracy(out.path("evals"), tasks), out.path("evals"), out.fingerprint)
