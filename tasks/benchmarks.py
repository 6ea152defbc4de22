"""Benchmark files: a researcher's fixed sets (GSM8K- or MATH-style JSONL), answered by every
checkpoint the evaluate stage sees, beside the domain's held-out set.

    [evaluate] benchmarks = {gsm8k = "data/gsm8k_test.jsonl"}
    file row   {"question": "Natalia sold clips to 48 ...", "answer": "72"}
    metrics    benchmark/gsm8k/accuracy 0.41  benchmark/gsm8k/accuracy_low 0.38  ..._high 0.44
               benchmark/gsm8k/pass_at_4 0.63 (with evaluate.samples = 4) ...
               benchmark/gsm8k/in_training 0  benchmark/gsm8k/overlap 0.02

The rows are read and checked by the dataset domain's reader (domains/dataset.py `load_rows`:
one-line errors naming file and line, `[domain.dataset]`'s length limits), answered with the
run's solver prompt, answer extraction and `Domain.judge`, and with `[evaluate]`'s samples and
temperature (tasks/evaluate.py `benchmark_metrics`, on the held-out set's backend), so the
figures are the held-out set's (`accuracy`, `sample_figures`) under another name. Their rows
are not written: they must never steer promotion, which reads the held-out `evals` file only.

Benchmark items are never trained on: a benchmark that is a training file is refused when the
config loads (configs `RunConfig`); synthesize drops every proposal, seed or generator problem
that is a benchmark question (case and spacing aside) as `drop_reason = "benchmark"`, as it
drops held-out items (the files' digests are its inputs, so editing one reruns it); and each
round's evaluate checks it, recording how much of every benchmark question is in that round's
training rows (tasks/alarms.py `leak_metrics`: `in_training` counts questions found whole,
`overlap` is the largest n-gram share), as curate records it for the held-out set. A benchmark
file's bytes enter the stage fingerprint (configs/settings.py `benchmark_digest`), so editing it
re-evaluates.
"""

from __future__ import annotations

import polars as pl

from configs import DatasetConfig
from domains.base import Problem
from domains.dataset import DatasetFileError, load_rows, normalise_question
from tasks.alarms import leak_metrics

PREFIX = "benchmark"


def read_benchmark(path: str, limits: DatasetConfig) -> list[Problem]:
    """A benchmark file's items as problems (level as the file gives it, else 1), read and
    checked as dataset files are; the columns are always `question` and `answer`."""
    cfg = DatasetConfig(max_question_chars=limits.max_question_chars,
                        max_answer_chars=limits.max_answer_chars)
    items, seen = [], set()
    for r in load_rows([path], cfg):
        key = normalise_question(r["question"])
        if key in seen:  # one item, two rows: its samples would be counted twice
            msg = (f"benchmark error: {path}: the question {r['question'][:60]!r} appears more "
                   "than once; keep one row per question")
            raise DatasetFileError(msg)
        seen.add(key)
        items.append(Problem(text=r["question"], reference=r["answer"], level=r["level"]))
    return items


def benchmark_questions(benchmarks: dict[str, str], limits: DatasetConfig) -> frozenset[str]:
    """Every question of the benchmark files (name -> path), normalised as the dataset domain
    matches questions (case and spacing aside): synthesize drops a proposal that is one."""
    return frozenset(normalise_question(item.text) for path in benchmarks.values()
                     for item in read_benchmark(path, limits))


def in_benchmark(text: str, questions: frozenset[str]) -> bool:
    """Whether a problem text is one of the `benchmark_questions`."""
    return bool(questions) and normalise_question(text) in questions


def named(name: str, figures: dict[str, float | None]) -> dict[str, float | None]:
    """One benchmark's figures (tasks/evaluate.py `accuracy`, `sample_figures`) as metrics
    `benchmark/<name>/<figure>`, apart from the held-out set's."""
    return {f"{PREFIX}/{name}/{key}": value for key, value in figures.items()}


def training_leaks(name: str, items: list[Problem], train_rows: pl.DataFrame | None
                   ) -> dict[str, float]:
    """`benchmark/<name>/in_training` and `.../overlap` of the round's training rows (none
    without them: the base model's baseline trained on nothing of the run's)."""
    if train_rows is None:
        return {}
    leaks = leak_metrics([p.text for p in items], train_rows)
    return {f"{PREFIX}/{name}/in_training": float(leaks["heldout_in_training"]),
            f"{PREFIX}/{name}/overlap": leaks["heldout_overlap"]}
