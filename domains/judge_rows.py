"""Judge calls as rows: the `judgements` table of what an LLM judge (domains/judge.py) was asked
about a batch of answers and what it replied (tasks/judgements.py has the dataset's rows and
where the stages store it). One function builds the table for every stage that judges: verify,
evaluate, reverify and the GRPO reward while it trains (models/grpo.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from storage.datasets import read_table

if TYPE_CHECKING:
    from pathlib import Path

    from domains.base import Domain
    from domains.judge import ModelJudge

JUDGED_COLUMNS = ["text", "reference", "level", "task", "payload"]  # what `Domain.judge` reads


def model_judge_of(domain: Domain) -> ModelJudge | None:
    """The LLM judge that judges `domain`'s answers, or None (its own verifier, a reward
    function)."""
    from domains.judge import JudgedDomain, ModelJudge

    scorer = getattr(domain, "scorer", None) if isinstance(domain, JudgedDomain) else None
    return scorer if isinstance(scorer, ModelJudge) else None


def judgement_frame(judge: ModelJudge, domain: Domain, rollouts: pl.DataFrame,
                    problems: pl.DataFrame) -> pl.DataFrame:
    """The judgements of `rollouts` (rollout_id, run_id, round, problem_id, completion), each
    against its problem row among `problems`; prompts not yet replied to are sent to the judge
    in one call (`ModelJudge.ensure`)."""
    joined = rollouts.join(problems.unique("problem_id", keep="last"), on="problem_id",
                           how="left", maintain_order="left")
    prompts = judge.prompts(joined["completion"].to_list(),
                            joined.select(JUDGED_COLUMNS).to_dicts(), domain)
    judge.ensure(prompts)
    asked = [index for index, prompt in enumerate(prompts) if prompt is not None]
    judged = [judge.judgement(prompts[index]) for index in asked]
    keep = joined[asked]
    questions = [domain.question(text) for text in keep["text"].to_list()]
    rubrics = ([judge.rubric_of(q) for q in questions] if judge.settings.rubrics
               else [None] * len(questions))
    return keep.select(
        pl.Series("judgement_id", [judge.key(prompts[i]) for i in asked], dtype=pl.String),
        "run_id", "round", "rollout_id", "problem_id",
        pl.lit(judge.describe(), dtype=pl.String).alias("judge"),
        pl.Series("question", questions, dtype=pl.String),
        pl.Series("rubric", rubrics, dtype=pl.String),
        pl.Series("prompt", [prompts[i] for i in asked], dtype=pl.String),
        pl.Series("reply", [judge.reply(prompts[i]) for i in asked], dtype=pl.String),
        *pairwise_columns(judge, [prompts[i] for i in asked]),
        pl.Series("reward", [j.reward for j in judged], dtype=pl.Float64),
        pl.Series("reason", [j.reason for j in judged], dtype=pl.String))


def pairwise_columns(judge: ModelJudge, prompts: list[str]) -> list[pl.Series]:
    """prompt_swapped, reply_swapped and position_consistent of each prompt (null pointwise)."""
    swapped = [judge.partner(p) for p in prompts]
    return [pl.Series("prompt_swapped", swapped, dtype=pl.String),
            pl.Series("reply_swapped", [None if s is None else judge.reply(s) for s in swapped],
                      dtype=pl.String),
            pl.Series("position_consistent",
                      [judge.outcome(p)[1] if judge.pairwise else None for p in prompts],
                      dtype=pl.Boolean)]


def remember_stored(judge: ModelJudge, path: Path | None) -> int:
    """Give `judge` the replies of a stored judgements file that its own id gave (others are
    another judge's); how many distinct prompts it was given (0 without a file)."""
    if path is None or not path.is_file():
        return 0
    table = pl.from_arrow(read_table(path, columns=["judge", "question", "rubric", "prompt",
                                                    "reply", "prompt_swapped", "reply_swapped"]))
    mine = table.filter(pl.col("judge") == judge.describe())
    replies = mine.unique("prompt", keep="first", maintain_order=True)
    judge.remember(replies["prompt"].to_list(), replies["reply"].to_list())
    swapped = replies.filter(pl.col("prompt_swapped").is_not_null())
    judge.remember(swapped["prompt_swapped"].to_list(), swapped["reply_swapped"].to_list())
    written = mine.filter(pl.col("rubric").is_not_null()).unique("question", keep="first",
                                                                 maintain_order=True)
    judge.remember([judge.rubric_prompt(q) for q in written["question"].to_list()],
                   written["rubric"].to_list())  # the criteria the prompts were built with
    return len(replies)
