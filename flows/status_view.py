"""What `flywheel status RUN_ID` says about a run that stopped, and the status it exits with.

A run that did not finish names the stage that stopped it, that stage's recorded error and the
command that continues it, in one line after the stage table:

    run demo: failed at stage verify (round 1): OSError: [Errno 28] No space left on device;
    traceback in flywheel-data/logs/demo.log; `flywheel resume demo` continues once the cause
    is fixed                                                                  (exit 4)
    run g: gate failed at stage curate (round 0): round 0 curate: data gate failed: ...; fix
    the thresholds under [gates] in a config file, then `flywheel resume g --config FILE` ...
                                                                              (exit 1)
    run x: interrupted during rollout (round 2); `flywheel resume x` continues from the last
    finished stage                                                            (exit 130)
    run t: terminated by SIGTERM during train (round 1); `flywheel resume t` continues from
    the last finished stage                                                   (exit 143)

For a domain of several tasks (reasoning_gym) a table follows: held-out accuracy per task and
level, for the base model and each round's candidate (`task_accuracy_lines`):

    held-out accuracy per task and level
      task              level   base      0      1
      spell_backward        1  0.000  0.080  0.160
      spell_backward      all  0.000  0.060  0.160

With `[evaluate] benchmarks` a block per benchmark file follows (`benchmark_lines`): the base
model's and each round's candidate's pass@1 accuracy, its 95 % interval, the largest pass@k and
how many benchmark questions were found whole in the round's training rows:

    benchmarks (accuracy = pass@1, 95% interval; in training = questions in the train rows)
      gsm8k  round  accuracy  interval        pass@k          in training
              base     0.100  [0.052, 0.184]  -                         -
                 1     0.150  [0.091, 0.236]  pass@4 0.310              0

Exit statuses: flows/exit_codes.py (`STATUS_EXIT`). Light: no torch, no Prefect.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows import exit_codes

_ERROR_CHARS = 300


@dataclass(frozen=True)
class StoppedAt:
    """The stage row that stopped a run: its round, stage, status and one-line error."""

    round: int
    stage: str
    status: str
    error: str


def one_line(text: str | None, limit: int = _ERROR_CHARS) -> str:
    """`text` with its whitespace (line breaks too) collapsed, cut to `limit` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def stopped_at(stages: list[dict[str, Any]]) -> StoppedAt | None:
    """The stage that stopped the run: the newest stage row, when it did not complete.

    Parameters
    ----------
    stages
        The run's stage rows, oldest first (`Catalog.stage_rows`).

    Returns
    -------
    StoppedAt or None
        None when the newest row completed (the run stopped between stages) or there is none.
    """
    if not stages or stages[-1]["status"] not in ("failed", "gate_failed"):
        return None
    last = stages[-1]
    return StoppedAt(last["round"], last["stage"], last["status"], one_line(last["error"]))


def effective_status(run_status: str, last_stage_status: str | None, *, live: bool) -> str:
    """The run's status as `status` and `runs` report it: a `running` run without a live lock
    holder is `interrupted` (it was killed), and a `failed` run whose newest stage row failed its
    gate is `gate_failed` (the flow records any stop as `failed`).

    Parameters
    ----------
    run_status
        The status the catalog records.
    last_stage_status
        The status of the run's newest stage row (None without one).
    live
        Whether a live process holds the run's lock.
    """
    if run_status == "running" and not live:
        return "interrupted"
    if run_status == "failed" and last_stage_status == "gate_failed":
        return "gate_failed"
    return run_status


def stop_line(run_id: str, run_status: str, stages: list[dict[str, Any]],
              log: Path) -> tuple[str | None, int]:
    """(the line naming what stopped the run, or None for a completed or running one; the exit
    status `flywheel status` reports).

    Parameters
    ----------
    run_id
        The run.
    run_status
        Its status as `effective_status` reports it ("interrupted" for a killed run too,
        "terminated" for one stopped by SIGTERM: storage/interruption.py `stop_status`).
    stages
        Its stage rows, oldest first.
    log
        The run's log file (flows/execution.py `log_path`).
    """
    code = exit_codes.STATUS_EXIT.get(run_status, exit_codes.STAGE_FAILED)
    if code == exit_codes.OK:
        return None, code
    where = stopped_at(stages)
    at = f"stage {where.stage} (round {where.round})" if where else None
    resume = f"`flywheel resume {run_id}`"
    if run_status in ("interrupted", "terminated"):
        how = "terminated by SIGTERM" if run_status == "terminated" else "interrupted"
        during = f"during {where.stage} (round {where.round})" if where else "between stages"
        return (f"run {run_id}: {how} {during}; {resume} continues from the last "
                "finished stage", code)
    if run_status == "gate_failed":
        return (f"run {run_id}: gate failed at {at}: {where.error}; fix the thresholds under "
                f"[gates] in a config file, then `flywheel resume {run_id} --config FILE` "
                f"(`flywheel validate {run_id}` shows the failed checks)", code)
    cause = f"at {at}: {where.error}" if where else "outside a stage"
    details = f"traceback in {log}" if log.exists() else "no log file"
    return (f"run {run_id}: {run_status} {cause}; {details}; {resume} continues once the cause "
            "is fixed", code)


_TASK_METRIC = re.compile(r"^accuracy_task_(.+?)(?:_level_(\d+))?$")


def task_accuracy_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The per-task table of `flywheel status` (module docstring); empty without task metrics.

    Parameters
    ----------
    rows
        The run's `accuracy_task_*` metrics (storage/audit/round_metrics.py `task_accuracy`): the
        baseline stage's are the base model's, each evaluate stage's its round's candidate's.
    """
    table: dict[tuple[str, int | None], dict[str, float]] = {}
    columns: list[str] = []
    for r in rows:
        match = _TASK_METRIC.match(r["name"])
        if match is None:
            continue
        column = "base" if r["stage"] == "baseline" else str(r["round"])
        if column not in columns:
            columns.append(column)
        level = int(match.group(2)) if match.group(2) else None
        table.setdefault((match.group(1), level), {})[column] = r["value"]
    if not table:
        return []
    width = max(len("task"), *(len(task) for task, _ in table))
    lines = ["held-out accuracy per task and level",
             f"  {'task':<{width}}  level" + "".join(f"  {c:>5}" for c in columns)]
    for (task, level) in sorted(table, key=lambda k: (k[0], k[1] is None, k[1] or 0)):
        cells = "".join(f"  {table[(task, level)][c]:.3f}" if c in table[(task, level)]
                        else f"  {'-':>5}" for c in columns)
        lines.append(f"  {task:<{width}}  {'all' if level is None else level:>5}{cells}")
    return lines


def print_task_accuracy(catalog: Any, run_id: str, echo: Callable[[str], Any]) -> None:
    """Print the run's per-task held-out table with `echo` (nothing for a one-task domain)."""
    from storage.audit.queries import task_accuracy

    for line in task_accuracy_lines(task_accuracy(catalog, run_id)):
        echo(line)


_BENCHMARK_METRIC = re.compile(r"^benchmark/([^/]+)/(.+)$")


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def benchmark_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The benchmark block of `flywheel status` (module docstring); empty without benchmarks.

    Parameters
    ----------
    rows
        The run's `benchmark/<name>/<figure>` metrics (round, stage, name, value): the baseline
        stage's are the base model's, each evaluate stage's its round's candidate's.
    """
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for r in rows:
        match = _BENCHMARK_METRIC.match(r["name"])
        if match is None:
            continue
        column = "base" if r["stage"] == "baseline" else str(r["round"])
        table.setdefault(match.group(1), {}).setdefault(column, {})[match.group(2)] = r["value"]
    if not table:
        return []
    lines = ["benchmarks (accuracy = pass@1, 95% interval; in training = questions in the "
             "train rows)"]
    for name, columns in sorted(table.items()):
        lines.append(f"  {name}  round  accuracy  interval        pass@k          in training")
        for column, figures in columns.items():
            ks = sorted(int(key.removeprefix("pass_at_")) for key in figures
                        if re.fullmatch(r"pass_at_\d+", key))
            best = f"pass@{ks[-1]} {_figure(figures[f'pass_at_{ks[-1]}'])}" if ks else "-"
            low, high = figures.get("accuracy_low"), figures.get("accuracy_high")
            interval = "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"
            leaked = figures.get("in_training")
            lines.append(f"  {'':<{len(name)}}  {column:>5}  {_figure(figures.get('accuracy')):>8}"
                         f"  {interval:<14}  {best:<14}  "
                         f"{'-' if leaked is None else int(leaked):>11}")
    return lines


def print_benchmarks(catalog: Any, run_id: str, echo: Callable[[str], Any]) -> None:
    """Print the run's benchmark block with `echo` (nothing without `[evaluate] benchmarks`)."""
    from storage.audit.round_metrics import benchmark_figures

    for line in benchmark_lines(benchmark_figures(catalog, run_id)):
        echo(line)


def print_round_lines(catalog: Any, run_id: str, echo: Callable[[str], Any]) -> None:
    """Print the lines under the round table with `echo`: pass@k and maj@k (evaluate.samples >
    1), the verifier's error rates (verify.canary, majority labels) and what an LLM judge cost
    (storage/audit/round_summary.py); nothing where the run has none of them."""
    from storage.audit.round_summary import (
        at_k_lines,
        judge_cost_lines,
        round_summary,
        verifier_rate_lines,
    )

    summary = round_summary(catalog, run_id)
    for line in [*at_k_lines(summary), *verifier_rate_lines(summary), *judge_cost_lines(summary)]:
        echo(line)
