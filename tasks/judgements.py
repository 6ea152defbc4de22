"""Judge calls as data: the `judgements` dataset the verify stage writes beside its verdicts when
an LLM judge (`verify.compare = "judge"`, domains/judge.py) gives the rewards.

One row per judged rollout (storage/datasets.py has the schema):

    {"judgement_id": "4be1..", "run_id": "demo", "round": 1, "rollout_id": "c3..",
     "problem_id": "a1..", "judge": "judge[/models/judge:1-10:9f2c..]@1",
     "question": "What is 37 + 5?", "rubric": None,
     "prompt": "Rate the answer to the question ... Score:", "reply": " 9",
     "reward": 0.889, "reason": None}

Pairwise (`mode = "pairwise"`, domains/pairwise.py) rows also hold `prompt_swapped` and
`reply_swapped` (the answers in the other order) and `position_consistent` (whether the two
verdicts agreed; a disagreement is a tie, reward 0.5); they are null pointwise.
`rubric` is the criteria the judge wrote for the question under `[verify.judge] rubrics = true`
(EvoRubric style; the same for every answer to the question, and in the prompt), else null.
`judgement_id` is the judge's `key(prompt)`, a hash of the judge's id and the prompt: rollouts
whose answers make the same prompt share it and were judged once. `prompt` is the filled
template before the judge's chat template; `reply` is what the judge said; `reward` and `reason`
are what the verdict of that rollout says (`reason` names why there is no reward:
judge_unparseable). A rollout cut off while thinking has no prompt and no row (its verdict says
thinking_unfinished).

Evaluate writes the same for the held-out answers it judged (`eval_judgements`), and the train
stage for the answers its GRPO reward judged while training (models/grpo_journal.py
`JudgementJournal`, `rollout_id` `grpo/<step>/<rank>/<call>/<index>`). The verify stage
judges each chunk of rollouts here, in its own process, before the shards compute their
verdicts: the shards (in process or on Ray workers, which receive the judge with its
replies) find every prompt answered and call no model. `flywheel reverify` gives the judge the
round's stored judgements first (domains/judge_rows.py `remember_stored`): with the same judge
it asks nothing again and reproduces the verdicts; a changed judge has another id, so its own
prompts are new.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from domains.judge_rows import JUDGED_COLUMNS, judgement_frame

if TYPE_CHECKING:
    from domains.base import Domain, Problem
    from domains.judge import ModelJudge

def judgements_beside(verdict_path: Path) -> Path:
    """The judgements file of a verdicts file: `verdicts-<fp>.parquet` ->
    `judgements-<fp>.parquet` (a stage's), `verdicts.parquet` -> `judgements.parquet`
    (a re-judging's)."""
    return verdict_path.with_name(verdict_path.name.replace("verdicts", "judgements", 1))


def eval_judgements(judge: ModelJudge, domain: Domain, rows: list[dict[str, Any]],
                    items: list[Problem]) -> pl.DataFrame:
    """The judgements of evaluate's answers (`rows`: evals rows, each against its held-out item
    of `items`); `rollout_id` is the eval row's `<item_id>/<sample>` and `problem_id` its
    item's id (one checkpoint per evals file)."""
    from domains.base import problem_row
    from storage.fingerprint import row_id

    answers = pl.DataFrame({
        "rollout_id": [f"{r['item_id']}/{r['sample']}" for r in rows],
        "run_id": [r["run_id"] for r in rows], "round": [r["round"] for r in rows],
        "problem_id": [r["item_id"] for r in rows],
        "completion": [r["completion"] for r in rows]},
        schema={"rollout_id": pl.String, "run_id": pl.String, "round": pl.Int64,
                "problem_id": pl.String, "completion": pl.String})
    problems = pl.DataFrame(
        [{"problem_id": row_id("heldout", domain.name, p.text), **problem_row(p)} for p in items],
        schema={"problem_id": pl.String, **dict.fromkeys(JUDGED_COLUMNS, pl.String),
                "level": pl.Int64})
    return judgement_frame(judge, domain, answers, problems)


def cost_text(metrics: dict[str, Any]) -> str:
    """`judge 96 prompts in 3 calls, 1.2 s, 412 reply tokens, 0 reused` from a stage's
    `judge_*` metrics ('' for a stage without a judge)."""
    if "judge_prompts" not in metrics:
        return ""
    return (f"judge {metrics['judge_prompts']:.0f} prompts in {metrics['judge_calls']:.0f} "
            f"calls, {metrics['judge_seconds']:.1f} s, {metrics['judge_reply_tokens']:.0f} "
            f"reply tokens, {metrics['judge_reused']:.0f} reused")
