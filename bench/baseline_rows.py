"""The list-of-dicts data plane as it was before the columnar one: the reference that
bench/scale.py measures against and tests/tasks/test_columnar_equivalence.py compares with.

Each function is the earlier row-by-row implementation, unchanged in what it computes:
curriculum rows, training rows (SFT, GRPO prompt rows, DPO pairs), verdicts and verdict
metrics. Nothing in the library imports this module.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from configs import CurateConfig
from domains.base import Domain
from tasks.curate import drop_reason
from tasks.curriculum.rewards import proposer_weight
from tasks.curriculum.votes import label_matches, majority_labels
from tasks.rows import train_row


def rationalized(rows: list[dict[str, Any]], curation: CurateConfig) -> set[str]:
    verified = sum(min(r["passed"], curation.max_answers_per_problem)
                   for r in rows if r["drop_reason"] is None)
    too_hard = sorted((r for r in rows if r["drop_reason"] == "too_hard"), key=lambda r: r["level"])
    return {r["problem_id"] for r in too_hard[: int(curation.rationalize_ratio * verified)]}


def curriculum_rows(problems: list[dict[str, Any]], verdicts: list[dict[str, Any]],
                    curation: CurateConfig, *, warmup: bool,
                    warmup_max_level: int = 0) -> list[dict[str, Any]]:
    rewards: dict[str, list[float | None]] = defaultdict(list)
    for v in verdicts:
        rewards[v["problem_id"]].append(v["reward"])
    rows = []
    for p in problems:
        got = rewards.get(p["problem_id"], [])
        judged = [r for r in got if r is not None]
        passed = sum(r == 1.0 for r in judged)
        pass_rate = sum(judged) / len(judged) if judged else None
        std = statistics.pstdev(judged) if judged else 0.0
        mad = 0.0
        if judged:
            mad = (float(sum(abs(Fraction(r) - Fraction(pass_rate)) for r in judged) / len(judged))
                   if all(map(math.isfinite, judged)) else math.nan)
        if warmup:
            reason = None if p["level"] <= warmup_max_level else "above_warmup_level"
        elif curation.solver_targets == "reference":
            reason = None
        else:
            reason = drop_reason(pass_rate, std, curation, passed)
        rows.append({
            "problem_id": p["problem_id"], "run_id": p["run_id"], "round": p["round"],
            "level": p["level"], "samples": len(got), "judged": len(judged), "passed": passed,
            "pass_rate": pass_rate, "reward_std": std, "reward_mad": mad, "kept": reason is None,
            "drop_reason": reason,
        })
    if curation.solver_targets == "rationalize" and not warmup:
        chosen = rationalized(rows, curation)
        for row in rows:
            if row["problem_id"] in chosen:
                row.update(kept=True, drop_reason=None)
    return rows


def labels_for(problems: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for v in verdicts:
        label = v.get("label")
        if label is not None:
            labels.setdefault(v["problem_id"], label)
    for p in problems:
        if p["problem_id"] not in labels and p.get("reference") is not None:
            labels[p["problem_id"]] = p["reference"]
    return labels


def grpo_rows(domain: Domain, problems: list[dict[str, Any]], curriculum: list[dict[str, Any]],
              labels: dict[str, str]) -> list[dict[str, Any]]:
    kept = {c["problem_id"] for c in curriculum if c["kept"]}
    return [
        train_row(role="solver", prompt=domain.solver_prompt(p["text"]),
                  completion=labels[p["problem_id"]], weight=1.0, problem=p, rollout_id=None,
                  label=labels[p["problem_id"]])
        for p in problems if p["problem_id"] in kept and p["problem_id"] in labels
    ]


def dpo_rows(problems: list[dict[str, Any]], rollouts: list[dict[str, Any]],
             verdicts: list[dict[str, Any]], curriculum: list[dict[str, Any]], *,
             max_pairs_per_problem: int) -> list[dict[str, Any]]:
    kept = {c["problem_id"] for c in curriculum if c["kept"]}
    reward = {v["rollout_id"]: v["reward"] for v in verdicts}
    right: dict[str, list[dict[str, Any]]] = defaultdict(list)
    wrong: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rollouts, key=lambda r: (r["problem_id"], r["sample_index"])):
        score = reward.get(r["rollout_id"])
        if r["problem_id"] in kept and score in (0.0, 1.0):
            (right if score == 1.0 else wrong)[r["problem_id"]].append(r)
    rows = []
    for p in problems:
        pairs = list(zip(right[p["problem_id"]], wrong[p["problem_id"]], strict=False))
        for chosen, rejected in pairs[:max_pairs_per_problem]:
            rows.append(train_row(role="solver", prompt=chosen["prompt"],
                                  completion=chosen["completion"], weight=1.0, problem=p,
                                  rollout_id=chosen["rollout_id"],
                                  rejected=rejected["completion"]))
    return rows


def training_rows(domain: Domain, problems: list[dict[str, Any]], rollouts: list[dict[str, Any]],
                  verdicts: list[dict[str, Any]], curriculum: list[dict[str, Any]],
                  curation: CurateConfig, *, warmup: bool,
                  penalties: Mapping[str, float] | None = None, algorithm: str = "sft",
                  max_pairs_per_problem: int = 4) -> list[dict[str, Any]]:
    kept = {c["problem_id"]: c for c in curriculum if c["kept"]}
    reward = {v["rollout_id"]: v["reward"] for v in verdicts}
    group: dict[str, list[float]] = defaultdict(list)
    for v in verdicts:
        if v["reward"] is not None:
            group[v["problem_id"]].append(v["reward"])
    verified: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rollouts, key=lambda r: (r["problem_id"], r["sample_index"])):
        if r["problem_id"] in kept and reward[r["rollout_id"]] == 1.0:
            verified[r["problem_id"]].append(r)
    rows: list[dict[str, Any]] = []
    proposer: list[dict[str, Any]] = []

    def add(role: str, prompt: str, completion: str, weight: float, problem: dict[str, Any],
            rollout_id: str | None) -> None:
        (proposer if role == "proposer" else rows).append(train_row(
            role=role, prompt=prompt, completion=completion, weight=weight, problem=problem,
            rollout_id=rollout_id))

    for problem in problems:
        stats = kept.get(problem["problem_id"])
        if warmup:
            if stats is not None:
                add("solver", domain.solver_prompt(problem["text"]), problem["reference"], 1.0,
                    problem, None)
            if curation.warmup_proposer_rows:
                add("proposer", domain.proposer_prompt(problem["level"]), problem["text"], 1.0,
                    problem, None)
            continue
        if stats is None:
            continue
        too_hard = (curation.solver_targets == "rationalize"
                    and (stats["pass_rate"] <= curation.min_pass_rate or stats["passed"] == 0))
        if curation.solver_targets == "reference" or too_hard:
            add("solver", domain.solver_prompt(problem["text"]), problem["reference"], 1.0,
                problem, None)
        elif algorithm == "sft":
            for r in verified[problem["problem_id"]][: curation.max_answers_per_problem]:
                add("solver", r["prompt"], r["completion"], 1.0, problem, r["rollout_id"])
        if curation.proposer_rows:
            weight = proposer_weight(stats["pass_rate"] or 0.0, group[problem["problem_id"]],
                                     curation,
                                     penalty=(penalties or {}).get(problem["problem_id"], 0.0))
            add("proposer", domain.proposer_prompt(problem["level"]), problem["text"], weight,
                problem, None)
    if algorithm == "grpo" and not warmup and curation.solver_targets != "reference":
        rows = grpo_rows(domain, problems, curriculum, labels_for(problems, verdicts))
    elif algorithm == "dpo" and not warmup and curation.solver_targets != "reference":
        rows = dpo_rows(problems, rollouts, verdicts, curriculum,
                        max_pairs_per_problem=max_pairs_per_problem)
    proposer.sort(key=lambda r: -r["weight"])
    return rows + proposer[: curation.max_proposer_rows]


def verdict_metrics(rows: list[dict[str, Any]], problems: list[dict[str, Any]],
                    labels: str = "reference") -> dict[str, float]:
    judged = [r["reward"] for r in rows if r["reward"] is not None]
    per_problem: dict[str, dict[str, Any]] = {}
    answers: dict[str, list[str | None]] = defaultdict(list)
    for r in rows:
        per_problem.setdefault(r["problem_id"], r)
        answers[r["problem_id"]].append(r["answer"])
    votes = majority_labels(answers)
    metrics = {"verdicts": len(rows), "unjudged": len(rows) - len(judged),
               "mean_reward": math.fsum(judged) / len(judged) if judged else 0.0}
    for r in rows:
        if r["reward"] is None and r["method"] != "none":
            key = f"unjudged_{r['method']}"
            metrics[key] = metrics.get(key, 0) + 1
    if votes:
        metrics["mean_agreement"] = math.fsum(v.agreement for v in votes.values()) / len(votes)
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


def verdict_rows(domain: Domain, rollouts: list[dict[str, Any]], problems: list[dict[str, Any]],
                 labels: str = "reference") -> list[dict[str, Any]]:
    rows = {p["problem_id"]: {key: p.get(key) for key in ("text", "reference", "level", "task",
                                                          "payload")} for p in problems}
    answers = [domain.extract(r["completion"]) for r in rollouts]
    by_problem: dict[str, list[str | None]] = defaultdict(list)
    for r, answer in zip(rollouts, answers, strict=True):
        by_problem[r["problem_id"]].append(answer)
    votes = majority_labels(by_problem)
    if labels == "majority":
        compared = [votes[r["problem_id"]].label for r in rollouts]
    else:
        compared = [rows[r["problem_id"]]["reference"] for r in rollouts]
    completions = [r["completion"] for r in rollouts]
    judged = domain.judge(completions, [{**rows[r["problem_id"]], "reference": label}
                                        for r, label in zip(rollouts, compared, strict=True)])
    scores = [j.reward for j in judged]
    methods = [labels if j.reward is not None else (j.reason or "none") for j in judged]
    outcomes = [j.outcome for j in judged]
    return [
        {"rollout_id": r["rollout_id"], "run_id": r["run_id"], "round": r["round"],
         "problem_id": r["problem_id"], "answer": answer, "reward": score, "method": how,
         "label": label, "agreement": votes[r["problem_id"]].agreement, "outcome": outcome,
         "verifier": domain.verifier(), "score": j.score}
        for r, answer, label, score, how, outcome, j in zip(
            rollouts, answers, compared, scores, methods, outcomes, judged, strict=True)
    ]
