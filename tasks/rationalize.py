"""Rationalize: STaR's rationalization, the too-hard problems asked again with their answer as a
hint (`curate.rationalize_with = "hint"`, rounds >= 1 of SFT runs).

A problem the model could not solve (p <= curate.min_pass_rate; the ones curate keeps under
`rationalize_ratio`, lowest levels first: the same `curriculum_frame` curate computes) is put to
the incumbent again as `curate.hint_template` ({question} = its text, {answer} = what its
reference teaches). Its k answers are judged by the domain's verifier against the problem
itself, exactly as verify judges the round's rollouts. Curate then trains each answer that
reaches the reference (reward 1, at most `max_answers_per_problem`) on the question *without*
the hint (tasks/curate.py), so the model learns to reason to an answer it could not find; a
problem no hinted answer reaches trains nothing.

The stage writes what it sampled and how each was judged as a `rollouts` and a `verdicts`
dataset of its own: every rollout's `prompt` is the hinted prompt it was sampled from and its
id is a `rationale` row id, so the training row a rationale became leads back (`rollout_id`) to
the hint it was given and the verdict that kept it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NONE

from configs import CurateConfig
from configs.settings import RationalizeSettings, stage_settings
from domains.base import Domain
from models.backends import SamplingParams
from storage.fingerprint import row_id
from tasks.context import Checkpoint, RunContext
from tasks.curate import round_verdicts
from tasks.curriculum.pass_rates import curriculum_frame, too_hard_expr
from tasks.curriculum.selection import kept_problems, positioned_problems
from tasks.retry import TRANSIENT
from tasks.rollout import rollout_shard
from tasks.stage import StageOutput, StageResult, run_stage
from tasks.verify import verdict_frame

VERSION = 2  # 2: too hard under graded rewards includes problems no sample solved


def too_hard_problems(problem_file: Any, curriculum: pl.DataFrame,
                      curation: CurateConfig) -> list[dict[str, Any]]:
    """The problem rows curate keeps although they are too hard (tasks/curriculum/pass_rates.py:
    too_hard_expr), in problem order."""
    kept = kept_problems(positioned_problems(problem_file), curriculum)
    return kept.filter(too_hard_expr(curation)).drop("pos", "pass_rate", "passed").to_dicts()


def hinted_text(domain: Domain, template: str, problem: dict[str, Any]) -> str:
    """The problem's text with its answer as a hint (`curate.hint_template`)."""
    return template.format(question=problem["text"],
                           answer=domain.training_target(problem["reference"]))


def rationale_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hinted rollouts with ids of their own: a `rationale` id per (rollout) row, never one the
    round's rollout of the same problem, sample and checkpoint has."""
    return [{**r, "rollout_id": row_id("rationale", r["rollout_id"])} for r in rows]


def rationalize_inputs(incumbent: Checkpoint, problems: StageOutput,
                       verdicts: StageOutput) -> dict[str, str]:
    """The fingerprints the rationalize stage reads: the incumbent, the round's problems and
    their verdicts (which problems were too hard)."""
    return {"checkpoint": incumbent.fingerprint, "problems": problems.fingerprint,
            "verdicts": verdicts.fingerprint}


def rationalize_round(ctx: RunContext, settings: RationalizeSettings, round_index: int,
                      incumbent: Checkpoint, problems: StageOutput, verdicts: StageOutput,
                      _fingerprint: str) -> StageResult:
    """The rationalize stage's computation: hinted samples of the too-hard problems, judged."""
    curation, cfg = settings.curate, settings.rollout
    problem_file = problems.path("problems")
    curriculum = curriculum_frame(problem_file, round_verdicts(verdicts.path("verdicts"),
                                                               problem_file),
                                  curation, warmup=False,
                                  warmup_max_level=settings.domain.domain.seed_max_level)
    chosen = too_hard_problems(problem_file, curriculum, curation)
    hinted = [{**p, "text": hinted_text(ctx.domain, curation.hint_template, p)} for p in chosen]
    rows: list[dict[str, Any]] = []
    if hinted:
        params = SamplingParams(n=cfg.samples_per_problem, temperature=cfg.temperature,
                                max_new_tokens=cfg.max_new_tokens,
                                seed=ctx.stage_seed("rationalize", round_index))
        rows = rationale_rows(rollout_shard(
            rollout=cfg, checkpoint_dir=str(incumbent.path), domain=ctx.domain, problems=hinted,
            params=params, checkpoint=incumbent.fingerprint, run_id=ctx.run_id,
            round_index=round_index))
    judge = ctx.judging_domain(incumbent)  # the round's judge, as verify's
    judged = verdict_frame(judge, rows, chosen) if rows else []  # against the problems
    reached = judged.filter(pl.col("reward") == 1.0) if rows else pl.DataFrame(
        {"problem_id": []}, schema={"problem_id": pl.String})
    return StageResult(
        datasets={"rollouts": rows, "verdicts": judged},
        metrics={"hinted_problems": len(chosen), "hinted_rollouts": len(rows),
                 "rationales": len(reached),
                 "rationalized_problems": reached["problem_id"].n_unique()})


@task(name="rationalize", cache_policy=NONE, persist_result=False, **TRANSIENT)
def rationalize(ctx: RunContext, round_index: int, incumbent: Checkpoint, problems: StageOutput,
                verdicts: StageOutput) -> StageOutput:
    settings = stage_settings(ctx.config, "rationalize", round_index)
    return run_stage(
        ctx, stage="rationalize", version=VERSION, round_index=round_index, settings=settings,
        inputs=rationalize_inputs(incumbent, problems, verdicts),
        compute=partial(rationalize_round, ctx, settings, round_index, incumbent, problems,
                        verdicts),
    )
