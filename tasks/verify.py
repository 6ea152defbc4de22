"""Verify: score every rollout against a label, the domain's reference or a majority vote.

`verify.labels` chooses the label a reward compares against:

    reference  the problem's executed reference (the default); reward null when there is none
    majority   the most common answer among the problem's k samples (TTRL / R-Zero style
               pseudo-labels, tasks/curriculum/votes.py); reward null when no sample had an
               extractable answer

`reward` is in [0, 1], or null when the verifier cannot judge; nulls are kept and counted, never
silently turned into 0. `method` says how the reward was obtained (reference | majority), or
why there is none: `none` (no label), or in the free-form domains (reasoning_gym, dataset, whose
answers are extracted and compared by domains/checking.py) `no_answer` (no extractor of
`verify.extract` found one), `verifier_timeout` or `verifier_error` (math-verify could not
decide); the verify metrics count each as `unjudged_<reason>`.
`label` is what it was compared against, `agreement` is the share of the problem's samples that
gave its majority answer (recorded in both modes: with references it shows how confident the
solver is; with votes it is the pass rate).

Pseudo-labels drift as the model drifts (EVE; TTRL issue #29), so where the domain also has
references, majority mode records per round how often the vote is right:

    label_precision            majority label == reference, over problems with both
    label_precision_confident  the same over problems whose label more than half the samples gave
    labelled_problems          problems with both a label and a reference

With one sample per problem every answered sample is its own majority (reward 1): majority
labels need k >= 2 (the warm-up round's single samples are not trained on, so it does not matter
there). `flywheel audit RUN labels` shows the same per round (in either mode) and over kept
problems. Departure from TTRL: the vote is over exact extracted answers (the domain's `extract`),
not a math-equivalence grader; a tie goes to the smallest answer and is counted (`tied_share`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from domains.base import Domain
from storage.datasets import read_rows
from tasks.context import RunContext
from tasks.curriculum.votes import label_matches, majority_labels
from tasks.shards import grouped_ranges, map_shards
from tasks.stage import StageOutput, StageResult, run_stage

VERSION = 2  # 2: label and agreement columns, majority-vote labels


def verdict_rows(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]],
                 labels: str = "reference") -> list[dict[str, Any]]:
    """One verdict per rollout; `labels` is "reference" or "majority" (see the module docstring)."""
    reference = {p["problem_id"]: p["reference"] for p in problems}
    answers = [domain.extract(r["completion"]) for r in rollouts]
    by_problem: dict[str, list[str | None]] = defaultdict(list)
    for r, answer in zip(rollouts, answers, strict=True):
        by_problem[r["problem_id"]].append(answer)
    votes = majority_labels(by_problem)
    if labels == "majority":
        compared = [votes[r["problem_id"]].label for r in rollouts]
        method = "majority"
    elif labels == "reference":
        compared = [reference[r["problem_id"]] for r in rollouts]
        method = "reference"
    else:
        msg = f"verify.labels = {labels!r}: use 'reference' or 'majority'"
        raise ValueError(msg)
    scores, methods, outcomes = judge_rollouts(domain, rollouts, problems, compared, method)
    return [
        {"rollout_id": r["rollout_id"], "run_id": r["run_id"], "round": r["round"],
         "problem_id": r["problem_id"], "answer": answer, "reward": score, "method": how,
         "label": label, "agreement": votes[r["problem_id"]].agreement, "outcome": outcome}
        for r, answer, label, score, how, outcome in zip(rollouts, answers, compared, scores,
                                                         methods, outcomes, strict=True)
    ]


def judge_rollouts(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]],
                   compared: list[str | None], method: str
                   ) -> tuple[list[float | None], list[str], list[str | None]]:
    """(reward, method, sandbox outcome) per rollout. A domain with `judge` (the free-form ones)
    is given the problems' texts and says why a reward is missing (domains/checking.py:
    no_answer, verifier_timeout, ...), which becomes the row's method; a domain with
    `run_answers` (python_io) also says how the sandbox run of each answer ended (null where
    nothing ran); otherwise `score`, and "none" where there is no label. The outcome is null
    in every domain that runs no answers."""
    completions = [r["completion"] for r in rollouts]
    if not hasattr(domain, "judge"):
        methods = [method if label is not None else "none" for label in compared]
        if hasattr(domain, "run_answers"):
            ran = domain.run_answers(completions, compared)
            return [reward for reward, _ in ran], methods, [outcome for _, outcome in ran]
        return domain.score(completions, compared), methods, [None] * len(rollouts)
    text = {p["problem_id"]: p["text"] for p in problems}
    judged = domain.judge(completions, compared, [text[r["problem_id"]] for r in rollouts])
    return ([j.reward for j in judged],
            [method if j.reward is not None else (j.reason or "none") for j in judged],
            [None] * len(rollouts))


def verdict_metrics(rows: list[dict[str, Any]], problems: list[dict[str, Any]],
                    labels: str = "reference") -> dict[str, float]:
    """The verify stage's catalog metrics: counts, mean reward, agreement, label precision."""
    judged = [r["reward"] for r in rows if r["reward"] is not None]
    per_problem: dict[str, dict[str, Any]] = {}
    answers: dict[str, list[str | None]] = defaultdict(list)
    for r in rows:
        per_problem.setdefault(r["problem_id"], r)
        answers[r["problem_id"]].append(r["answer"])
    votes = majority_labels(answers)
    metrics = {"verdicts": len(rows), "unjudged": len(rows) - len(judged),
               "mean_reward": sum(judged) / len(judged) if judged else 0.0}
    for r in rows:  # why the free-form domains could not judge: unjudged_no_answer, ...
        if r["reward"] is None and r["method"] != "none":
            key = f"unjudged_{r['method']}"
            metrics[key] = metrics.get(key, 0) + 1
    if votes:
        metrics["mean_agreement"] = sum(v.agreement for v in votes.values()) / len(votes)
        metrics["tied_share"] = sum(v.tie for v in votes.values()) / len(votes)
    if labels == "majority":
        reference = {p["problem_id"]: p["reference"] for p in problems}
        label = {pid: r["label"] for pid, r in per_problem.items()}
        matching, total = label_matches(label, reference)
        metrics["labelled_problems"] = total
        if total:
            metrics["label_precision"] = matching / total
            confident = [pid for pid, v in votes.items() if 2 * v.agreement > 1]
            matching, total = label_matches(label, reference, only=confident)
            if total:
                metrics["label_precision_confident"] = matching / total
    return metrics


def verify_shards(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]],
                  labels: str, shards: int) -> list[dict[str, Any]]:
    """`verdict_rows` keyword arguments per shard: whole problems, rollouts in stored order."""
    out = []
    for start, end in grouped_ranges([r["problem_id"] for r in rollouts], shards):
        part = rollouts[start:end]
        ids = {r["problem_id"] for r in part}
        out.append({"domain": domain, "rollouts": part, "labels": labels,
                    "problems": [p for p in problems if p["problem_id"] in ids]})
    return out


@task(name="verify", cache_policy=NONE, persist_result=False)
def verify(ctx: RunContext, round_index: int, problems: StageOutput,
           rollouts: StageOutput) -> StageOutput:
    labels = ctx.config.verify.labels

    def compute(fingerprint: str) -> StageResult:
        problem_rows = read_rows(problems.path("problems"))
        rollout_rows = read_rows(rollouts.path("rollouts"))
        rows = [row for part in map_shards(  # config [scale]; a problem's rollouts stay together
            verdict_rows, verify_shards(ctx.domain, rollout_rows, problem_rows, labels,
                                        ctx.config.scale.rollout_shards),
            scale=ctx.config.scale, stage="verify") for row in part]
        return StageResult(datasets={"verdicts": rows},
                           metrics=verdict_metrics(rows, problem_rows, labels))

    return run_stage(
        ctx, stage="verify", version=VERSION, round_index=round_index,
        config={"domain": ctx.domain.name, **ctx.config.slice("verify"),
                **ctx.config.executor_slice()},
        inputs={"problems": problems.fingerprint, "rollouts": rollouts.fingerprint},
        compute=compute,
    )
