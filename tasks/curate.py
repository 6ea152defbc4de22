"""Curate: per-problem pass rates -> the curriculum (kept or dropped, with a reason) ->
training rows.

For every problem: `samples` rollouts, `judged` of them scored, pass rate p = mean reward,
reward standard deviation. Kept when min_pass_rate < p < max_pass_rate (the difficulty band)
and the rewards vary; otherwise dropped with `drop_reason`:

    unjudged       no rollout could be scored
    too_hard       p <= min_pass_rate; with `solver_targets = "rationalize"` also no sample
                   earned the full reward (partial credit lifts p, yet no answer is right)
    too_easy       p >= max_pass_rate
    zero_variance  every reward equal (no learning signal) although p is inside the band

Training rows (SFT, rejection sampling in the STaR / ReST-EM style):
    solver    the verified answers (reward 1) to kept problems, at most
              `max_answers_per_problem` per problem, in sample order
    proposer  "<propose>L{level}:" -> problem text for kept problems, weight =
              `proposer_reward` (default learnability 1 - p for 0 < p < 1, else 0: the
              hardest problems the solver still solves weigh most; variance, uncertainty,
              band, regret: tasks/curriculum/rewards.py) less
              `diversity.penalty` x (near-duplicate cluster size / valid proposer samples);
              the `max_proposer_rows` heaviest are kept, so solver rows dominate the loss

With `train.algorithm = "grpo"` or `"dpo"` the solver rows of rounds >= 1 are GRPO prompt rows
(completion = the label the verifier rewards against) or DPO pairs (completion = a verified
answer, `rejected` = a wrong one), built by tasks/curriculum/selection.py; proposer rows are
unchanged.

With `curate.solver_targets = "rationalize"` (the default; STaR's rationalization: the answer
is given for a problem the model could not solve) problems below the band (p <= min_pass_rate,
"too_hard") are kept too, and their solver row is the executed reference (one per problem, no
rollout id): at most `rationalize_ratio` of them per verified answer row of the round, lowest
levels first (the rest stay `too_hard`); the other problems are curated as above. SFT with
reference labels only; `"verified"` trains the verified answers alone (GRPO, DPO, majority-vote
labels).

With `curate.solver_targets = "reference"` (the no-self-play baseline: SFT on generator data
with references only, used with `synthesize.source = "generator"`) rounds >= 1 work like the
warm-up: every problem is kept and its solver row is the executed reference (one per problem,
no rollout id); pass rates are still recorded, and proposer rows follow `proposer_rows`.

Round 0 is the warm-up: the seed problems come from the domain's generator with executed
references (the untrained model has no verified answers yet). Seed problems up to
`domain.seed_max_level` are kept with the reference as the solver completion; harder ones are
dropped (`above_warmup_level`) for the solver, so the flywheel, not the seed, must reach them.
Proposer rows are written for seed problems of every level (`warmup_proposer_rows`, apart from
`proposer_rows` of later rounds): they teach the proposer the format of each level it will be
asked for. Under `[warmup] mode = "self_samples"` (`SelfSampleCurateSettings`) the kept seed
problems' solver rows are the model's own verified answers instead, as in `verified`
(`warmup_solver_rows`): a pretrained model keeps its reasoning.

The verify stage's canaries (`verify.canary`, tasks/verifier_rates.py) have verdicts but no row
in the problems file: curate drops their verdicts first (`round_verdicts`), so nothing is
curated or trained from them. Beside its counts the stage records two figures the alarms read
(tasks/alarms.py): `heldout_overlap` / `heldout_in_training` (how much of the held-out set's
text is in the round's training rows) and, in rounds with proposer samples, `proposer_novelty`
(the share of its valid samples admitted as new problems).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NONE

from configs import CurateConfig
from configs.settings import (
    CurateSettings,
    SelfSampleCurateSettings,
    WarmupCurateSettings,
    stage_settings,
)
from domains.base import Domain
from storage.datasets import read_rows
from tasks.alarms import leak_metrics, proposer_novelty
from tasks.context import RunContext
from tasks.curriculum.columns import lazy_frame
from tasks.curriculum.dedup import clusters
from tasks.curriculum.pass_rates import curriculum_frame, too_hard_expr  # noqa: F401 - public
from tasks.curriculum.rewards import diversity_penalties, proposer_weight  # noqa: F401 - re-exported
from tasks.curriculum.selection import (
    SOLVER_PARTS,
    dpo_pairs,
    grpo_prompts,
    kept_problems,
    positioned_problems,
    proposer_rows,
    reference_rows,
    solver_prompts,
    train_frame,
    verified_rows,
)
from tasks.stage import StageOutput, StageResult, run_stage

VERSION = 5  # 5: `passed` (full-reward samples); under rationalize a problem none solved is
#              too hard although partial credit lifts its p (graded rewards)


def drop_reason(pass_rate: float | None, reward_std: float, curation: CurateConfig,
                passed: int | None = None) -> str | None:
    """Why a judged problem is dropped (None: kept); `passed` counts its samples with the full
    reward (None: the rewards are 0 or 1, so p = 0 says it)."""
    if pass_rate is None:
        return "unjudged"
    if math.isnan(pass_rate):
        return None  # NaN compares false with every bound
    if pass_rate <= curation.min_pass_rate or (passed == 0
                                               and curation.solver_targets == "rationalize"):
        return "too_hard"
    if pass_rate >= curation.max_pass_rate:
        return "too_easy"
    if reward_std == 0.0:
        return "zero_variance"
    return None


def curriculum_rows(problems: list[dict[str, Any]], verdicts: list[dict[str, Any]],
                    curation: CurateConfig, *, warmup: bool,
                    warmup_max_level: int = 0) -> list[dict[str, Any]]:
    """`curriculum_frame` over rows, as rows (one per problem, in problem order)."""
    return curriculum_frame(problems, verdicts, curation, warmup=warmup,
                            warmup_max_level=warmup_max_level).to_dicts()


def warmup_solver_rows(domain: Domain, kept: pl.DataFrame, rollouts: Any, verdicts: Any,
                       curation: CurateConfig, *, self_samples: bool) -> pl.DataFrame:
    """Round 0's solver rows for the `kept` seed problems: their references, or with
    `self_samples` (`[warmup] mode = "self_samples"`) the model's own verified answers,
    reasoning and all (rejection sampling: at most `max_answers_per_problem` per problem; a
    problem it never solved has none)."""
    if self_samples:
        return verified_rows(rollouts, verdicts, kept, curation.max_answers_per_problem)
    return reference_rows(domain, kept)


def training_frame(domain: Domain, problems: Any, rollouts: Any, verdicts: Any, curriculum: Any,
                   curation: CurateConfig, *, warmup: bool,
                   penalties: Mapping[str, float] | None = None, algorithm: str = "sft",
                   max_pairs_per_problem: int = 4, min_pair_margin: float = 1.0,
                   self_samples: bool = False,
                   hinted: tuple[Any, Any] | None = None) -> pl.DataFrame:
    """The round's `train_rows` (see the module docstring) over Parquet paths, frames or rows.

    Parameters
    ----------
    domain
        Writes the solver and proposer prompts.
    problems, rollouts, verdicts, curriculum
        The round's datasets (tasks/curriculum/columns.py: lazy_frame); rollouts' prompts and
        completions are read for the chosen rows only.
    curation
        `[curate]`.
    warmup
        Round 0: reference rows up to the warm-up level, proposer rows for every problem.
    penalties
        The diversity penalty per problem_id (repetition_penalties), 0 if absent.
    algorithm
        `train.algorithm`: grpo / dpo solver rows after the warm-up are GRPO prompt rows or
        DPO pairs (tasks/curriculum/selection.py); proposer rows are the same for every one.
    max_pairs_per_problem, min_pair_margin
        DPO: most pairs per problem; least reward gap of a pair (`train.dpo.min_margin`).
    self_samples
        Round 0 under `[warmup] mode = "self_samples"` (`warmup_solver_rows`).
    hinted
        The rationalize stage's (rollouts, verdicts) under `rationalize_with = "hint"`
        (tasks/rationalize.py): a too-hard problem's rows are its hinted answers that reached
        the reference, on the question without the hint, instead of its reference.

    Returns
    -------
    pl.DataFrame
        The `train_rows` columns: solver rows in problem order, then proposer rows.
    """
    table = positioned_problems(problems)
    kept = kept_problems(table, curriculum)
    proposer = None
    if warmup:
        solver = warmup_solver_rows(domain, kept, rollouts, verdicts, curation,
                                    self_samples=self_samples)
        if curation.warmup_proposer_rows:
            proposer = proposer_rows(domain, table, verdicts, curation, None, weighted=False)
        return train_frame(table, solver, proposer)
    if curation.proposer_rows:
        proposer = proposer_rows(domain, kept, verdicts, curation, dict(penalties or {}),
                                 weighted=True)
    if curation.solver_targets == "reference":
        return train_frame(table, reference_rows(domain, kept), proposer)
    if algorithm == "grpo":
        return train_frame(table, grpo_prompts(domain, kept, verdicts), proposer)
    if algorithm == "dpo":
        return train_frame(table, dpo_pairs(rollouts, verdicts, kept, max_pairs_per_problem,
                                            min_pair_margin), proposer)
    if algorithm != "sft":
        msg = (f"no row builder for train.algorithm = {algorithm!r}; choose 'sft', 'grpo' or "
               "'dpo'")
        raise ValueError(msg)
    too_hard = (too_hard_expr(curation) if curation.solver_targets == "rationalize"
                else pl.lit(False))
    rationalized = (reference_rows(domain, kept.filter(too_hard)) if hinted is None else
                    unhinted_rows(domain, verified_rows(*hinted, kept.filter(too_hard),
                                                        curation.max_answers_per_problem), kept))
    solver = pl.concat([
        rationalized,
        verified_rows(rollouts, verdicts, kept.filter(~too_hard),
                      curation.max_answers_per_problem)])
    return train_frame(table, solver, proposer)


def unhinted_rows(domain: Domain, rows: pl.DataFrame, problems: pl.DataFrame) -> pl.DataFrame:
    """Solver rows of hinted answers with the prompt of their problem's question, without the
    hint (their `rollout_id` still leads to the hinted prompt they were sampled from)."""
    prompts = problems.select("pos", solver_prompts(domain, problems["text"]))
    return rows.drop("prompt").join(prompts, on="pos", how="left",
                                    maintain_order="left").select(list(SOLVER_PARTS))


def training_rows(domain: Domain, problems: list[dict[str, Any]], rollouts: list[dict[str, Any]],
                  verdicts: list[dict[str, Any]], curriculum: list[dict[str, Any]],
                  curation: CurateConfig, *, warmup: bool,
                  penalties: Mapping[str, float] | None = None, algorithm: str = "sft",
                  max_pairs_per_problem: int = 4,
                  min_pair_margin: float = 1.0) -> list[dict[str, Any]]:
    """`training_frame` over rows, as rows."""
    return training_frame(domain, problems, rollouts, verdicts, curriculum, curation,
                          warmup=warmup, penalties=penalties, algorithm=algorithm,
                          max_pairs_per_problem=max_pairs_per_problem,
                          min_pair_margin=min_pair_margin).to_dicts()


def repetition_penalties(domain: Domain, proposals: list[dict[str, Any]],
                         curation: CurateConfig) -> dict[str, float]:
    """Diversity penalty per problem_id: the valid proposer samples of the round (exact and near
    duplicates included) clustered by near-duplicate similarity of their texts or, with
    `diversity.on = "shape"`, of their shapes (Domain.shape); penalty = cluster size / samples."""
    diversity = curation.diversity
    valid = [(p["problem_id"], domain.parse(p["text"])) for p in proposals
             if p["problem_id"] is not None]
    texts = [domain.shape(parsed.text) if diversity.on == "shape" else parsed.text
             for _, parsed in valid]
    labels = clusters(texts, threshold=diversity.threshold, ngram=diversity.ngram)
    return dict(zip([pid for pid, _ in valid], diversity_penalties(labels), strict=True))


def round_verdicts(verdict_file: Path, problem_file: Path) -> Path | pl.LazyFrame:
    """The verdicts curate reads: those of the round's problems. The verify stage's canaries
    (tasks/verifier_rates.py) have verdicts but no problem row, and are dropped here, so no
    curriculum or training row comes from them; the file itself when it holds none (then the
    verdicts are read by position beside the rollouts, tasks/curriculum/selection.py)."""
    ids = lazy_frame(problem_file, {"problem_id": pl.String}).collect()["problem_id"].implode()
    verdicts = pl.scan_parquet(verdict_file)
    ours = pl.col("problem_id").is_in(ids)
    if verdicts.filter(~ours).select(pl.len()).collect().item() == 0:
        return verdict_file
    return verdicts.filter(ours)


def curate_inputs(problems: StageOutput, rollouts: StageOutput, verdicts: StageOutput,
                  hinted: StageOutput | None = None) -> dict[str, str]:
    """The fingerprints the curate stage reads: the round's problems, rollouts and verdicts, and
    the rationalize stage's output where the round has one."""
    return {"problems": problems.fingerprint, "rollouts": rollouts.fingerprint,
            "verdicts": verdicts.fingerprint,
            **({} if hinted is None else {"rationales": hinted.fingerprint})}


def curate_round(domain: Domain, settings: WarmupCurateSettings, problems: StageOutput,
                 rollouts: StageOutput, verdicts: StageOutput,
                 hinted: StageOutput | None = None) -> StageResult:
    """The curate stage's computation: the curriculum and the training rows of the round
    (`CurateSettings`; `WarmupCurateSettings` in round 0, the warm-up); `hinted`: the
    rationalize stage's output (tasks/rationalize.py)."""
    curation = settings.curate
    warmup = not isinstance(settings, CurateSettings)
    problem_file = problems.path("problems")
    verdict_file = round_verdicts(verdicts.path("verdicts"), problem_file)  # canaries dropped
    curriculum = curriculum_frame(problem_file, verdict_file, curation, warmup=warmup,
                                  warmup_max_level=settings.domain.domain.seed_max_level)
    penalties = (repetition_penalties(domain, read_rows(problems.path("proposals")), curation)
                 if curation.diversity.penalty > 0 and not warmup else None)
    pairs = {} if warmup else {"max_pairs_per_problem": settings.max_pairs_per_problem,
                               "min_pair_margin": settings.min_pair_margin}
    rows = training_frame(domain, problem_file, rollouts.path("rollouts"), verdict_file,
                          curriculum, curation, warmup=warmup, penalties=penalties,
                          algorithm=settings.algorithm,
                          self_samples=isinstance(settings, SelfSampleCurateSettings),
                          hinted=None if hinted is None else (hinted.path("rollouts"),
                                                              hinted.path("verdicts")), **pairs)
    judged = curriculum["pass_rate"].drop_nulls().to_list()  # summed left to right
    heldout = [p.text for p in domain.heldout(settings.domain.domain.heldout_per_level)]
    novelty = None if warmup else proposer_novelty(problems.path("proposals"))
    return StageResult(
        datasets={"curriculum": curriculum, "train_rows": rows},
        metrics={"kept": int(curriculum["kept"].sum()),
                 "pass_at_1": sum(judged) / len(judged) if judged else 0.0,
                 "train_rows": len(rows),
                 "solver_rows": int((rows["role"] == "solver").sum()),
                 **({} if hinted is None else
                    {"rationalized_rows": rationalized_count(rows, hinted)}),
                 **leak_metrics(heldout, rows),
                 **({} if novelty is None else {"proposer_novelty": novelty})},
    )


def rationalized_count(rows: pl.DataFrame, hinted: StageOutput) -> int:
    """Training rows from hinted answers: those whose rollout is one of the rationalize
    stage's."""
    ids = lazy_frame(hinted.path("rollouts"), {"rollout_id": pl.String}).collect()["rollout_id"]
    return int(rows["rollout_id"].is_in(ids.implode()).sum())


@task(name="curate", cache_policy=NONE, persist_result=False)
def curate(ctx: RunContext, round_index: int, problems: StageOutput, rollouts: StageOutput,
           verdicts: StageOutput, hinted: StageOutput | None = None) -> StageOutput:
    settings = stage_settings(ctx.config, "curate", round_index)
    return run_stage(
        ctx, stage="curate", version=VERSION, round_index=round_index, settings=settings,
        inputs=curate_inputs(problems, rollouts, verdicts, hinted),
        compute=lambda _fingerprint: curate_round(ctx.domain, settings, problems, rollouts,
                                                  verdicts, hinted),
    )
