"""`train_rows` records and the split of a round's rows between the trainers.

`train_row` builds one record (bench/baseline_rows.py builds its rows with it); curate builds
the round's rows as polars frames of the same columns (tasks/curate.py `training_frame`, GRPO
prompt rows and DPO pairs in tasks/curriculum/selection.py). Sample records:

    sft   {"role": "solver", "prompt": "<solve>37+5=", "completion": "42", "rejected": None,
           "rollout_id": "c3..", ...}      # a verified answer (its rollout)
    grpo  {"role": "solver", "prompt": "<solve>37+5=", "completion": "42", "rejected": None,
           "rollout_id": None, "problem": '{"text":"37+5","reference":"42",...}', ...}
                                           # completion = the label the reward judges against,
                                           # as `problem`'s reference
    dpo   {"role": "solver", "prompt": "<solve>37+5=", "completion": "42", "rejected": "41",
           "rollout_id": "c3..", ...}      # chosen = a verified answer (its rollout),
                                           # rejected a wrong one

`split_for` decides which rows the algorithm's trainer takes and which a weighted SFT pass
takes after it (tasks/train.py).
"""

from __future__ import annotations

import json
from typing import Any

from storage.fingerprint import row_id


def problem_json(problem: dict[str, Any], label: str | None = None) -> str:
    """A solver row's `problem`: its problem row's judged columns as JSON, the reference
    replaced by `label` where there is one (tasks/curriculum/selection.py `problem_json`)."""
    judged = {"text": problem["text"],
              "reference": label if label is not None else problem.get("reference"),
              "level": problem["level"], "task": problem.get("task"),
              "payload": problem.get("payload")}
    return json.dumps(judged, ensure_ascii=False, separators=(",", ":"))


def train_row(*, role: str, prompt: str, completion: str, weight: float, problem: dict[str, Any],
              rollout_id: str | None, rejected: str | None = None,
              label: str | None = None) -> dict[str, Any]:
    """One `train_rows` record; the id hashes run, round, role, problem and rollout. A solver
    row carries its problem as its verifier judges it (`problem_json`, against `label`)."""
    return {
        "train_row_id": row_id("train_row", problem["run_id"], problem["round"], role,
                               problem["problem_id"], rollout_id),
        "run_id": problem["run_id"], "round": problem["round"], "role": role, "prompt": prompt,
        "completion": completion, "rejected": rejected, "weight": weight,
        "problem_id": problem["problem_id"], "rollout_id": rollout_id,
        "proposal_id": problem["proposal_id"],
        "problem": problem_json(problem, label) if role == "solver" else None,
    }


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
