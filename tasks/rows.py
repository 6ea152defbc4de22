"""Solver training rows for GRPO and DPO: pure builders over problems, rollouts, verdicts and
the curriculum (curate calls them; SFT rows stay in tasks/curate.py).

Both write `train_rows` records (storage/datasets.py), so lineage and audit queries
read them like SFT rows:

    grpo  {"role": "solver", "prompt": "<solve>37+5=", "completion": "42", "rejected": None,
           "rollout_id": None, ...}        # completion = the label the reward compares against
    dpo   {"role": "solver", "prompt": "<solve>37+5=", "completion": "42", "rejected": "41",
           "rollout_id": "c3..", ...}      # chosen = a verified answer (its rollout),
                                           # rejected a wrong one

GRPO: one prompt row per kept problem (the curriculum already dropped zero-variance groups,
which carry no GRPO signal); the trainer samples its own completions and the domain's verifier
scores them against `completion`. The label is the verdicts' `label` (a reference or a
majority-vote pseudo-label) where verify wrote one, else the problem's reference; a kept problem
with neither gets no row.

DPO: per kept problem, the verified answers (reward 1) and the wrong ones (reward 0), each in
sample order, are zipped into at most `max_pairs_per_problem` (chosen, rejected) pairs.
Unjudged answers (reward None) and partial rewards are in neither list.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from domains.base import Domain
from storage.fingerprint import row_id


def train_row(*, role: str, prompt: str, completion: str, weight: float, problem: dict[str, Any],
              rollout_id: str | None, rejected: str | None = None) -> dict[str, Any]:
    """One `train_rows` record; the id hashes run, round, role, problem and rollout."""
    return {
        "train_row_id": row_id("train_row", problem["run_id"], problem["round"], role,
                               problem["problem_id"], rollout_id),
        "run_id": problem["run_id"], "round": problem["round"], "role": role, "prompt": prompt,
        "completion": completion, "rejected": rejected, "weight": weight,
        "problem_id": problem["problem_id"], "rollout_id": rollout_id,
        "proposal_id": problem["proposal_id"],
    }


def labels_for(problems: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, str]:
    """problem_id -> the label GRPO rewards against: the first non-null `label` of the problem's
    verdicts (when verify writes that column), else the problem's reference; problems with
    neither are left out."""
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
    """One solver prompt row per kept problem with a label, in problem order."""
    kept = {c["problem_id"] for c in curriculum if c["kept"]}
    return [
        train_row(role="solver", prompt=domain.solver_prompt(p["text"]),
                  completion=labels[p["problem_id"]], weight=1.0, problem=p, rollout_id=None)
        for p in problems if p["problem_id"] in kept and p["problem_id"] in labels
    ]


def dpo_rows(problems: list[dict[str, Any]], rollouts: list[dict[str, Any]],
             verdicts: list[dict[str, Any]], curriculum: list[dict[str, Any]], *,
             max_pairs_per_problem: int) -> list[dict[str, Any]]:
    """(chosen = verified answer, rejected = wrong answer) pairs per kept problem, sample order."""
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


def solver_rows(algorithm: str, domain: Domain, problems: list[dict[str, Any]],
                rollouts: list[dict[str, Any]], verdicts: list[dict[str, Any]],
                curriculum: list[dict[str, Any]], *,
                max_pairs_per_problem: int) -> list[dict[str, Any]]:
    """The solver rows of a self-play round for `train.algorithm` grpo or dpo."""
    if algorithm == "grpo":
        return grpo_rows(domain, problems, curriculum, labels_for(problems, verdicts))
    if algorithm == "dpo":
        return dpo_rows(problems, rollouts, verdicts, curriculum,
                        max_pairs_per_problem=max_pairs_per_problem)
    msg = (f"no row builder for train.algorithm = {algorithm!r}; choose 'grpo' or 'dpo' "
           "(sft rows are curate's)")
    raise ValueError(msg)


def split_for(algorithm: str,
              rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows `algorithm`'s trainer takes, rows a weighted SFT pass takes after it).

    sft   every row
    grpo  solver rows as prompts whose `completion` is the label (GRPO rows, and replayed
          warm-up rows whose completion is the reference); proposer rows go to SFT
    dpo   rows with a `rejected` completion; proposer rows and replayed rows without a pair
          (the warm-up's references) go to SFT
    """
    if algorithm == "sft":
        return rows, []
    if algorithm == "grpo":
        takes = [r["role"] == "solver" for r in rows]
    elif algorithm == "dpo":
        takes = [r.get("rejected") is not None for r in rows]
    else:
        msg = f"unknown train.algorithm = {algorithm!r}; choose 'sft', 'grpo' or 'dpo'"
        raise ValueError(msg)
    return ([r for r, t in zip(rows, takes, strict=True) if t],
            [r for r, t in zip(rows, takes, strict=True) if not t])
