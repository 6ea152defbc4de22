"""Curate: per-problem pass rates -> the curriculum (kept or dropped, with a reason) ->
training rows.

For every problem: `samples` rollouts, `judged` of them scored, pass rate p = mean reward,
reward standard deviation. Kept when min_pass_rate < p < max_pass_rate (the difficulty band)
and the rewards vary; otherwise dropped with `drop_reason`:

    unjudged       no rollout could be scored
    too_hard       p <= min_pass_rate
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
answer, `rejected` = a wrong one), built by tasks/rows.py; proposer rows are unchanged.

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
asked for.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from configs import CurateConfig, RunConfig
from domains.base import Domain
from storage.datasets import read_rows
from tasks.context import RunContext
from tasks.curriculum.dedup import clusters
from tasks.curriculum.rewards import diversity_penalties, proposer_weight
from tasks.rows import solver_rows, train_row
from tasks.stage import StageOutput, StageResult, run_stage

VERSION = 2


def drop_reason(pass_rate: float | None, reward_std: float, curation: CurateConfig) -> str | None:
    if pass_rate is None:
        return "unjudged"
    if pass_rate <= curation.min_pass_rate:
        return "too_hard"
    if pass_rate >= curation.max_pass_rate:
        return "too_easy"
    if reward_std == 0.0:
        return "zero_variance"
    return None


def rationalized(rows: list[dict[str, Any]], curation: CurateConfig) -> set[str]:
    """The too-hard problems trained on their reference under solver_targets = rationalize: at
    most rationalize_ratio x the round's verified answer rows, lowest level first (nearest the
    frontier), then in problem order. `rows`: curriculum rows (rewards are 0 or 1 against
    references, so a kept problem has round(pass_rate x judged) verified answers)."""
    verified = sum(min(round(r["pass_rate"] * r["judged"]), curation.max_answers_per_problem)
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
        pass_rate = sum(judged) / len(judged) if judged else None
        std = statistics.pstdev(judged) if judged else 0.0
        if warmup:
            reason = None if p["level"] <= warmup_max_level else "above_warmup_level"
        elif curation.solver_targets == "reference":
            reason = None  # no-self-play baseline: every problem is trained on its reference
        else:
            reason = drop_reason(pass_rate, std, curation)
        rows.append({
            "problem_id": p["problem_id"], "run_id": p["run_id"], "round": p["round"],
            "level": p["level"], "samples": len(got), "judged": len(judged),
            "pass_rate": pass_rate, "reward_std": std, "kept": reason is None,
            "drop_reason": reason,
        })
    if curation.solver_targets == "rationalize" and not warmup:
        chosen = rationalized(rows, curation)
        for row in rows:
            if row["problem_id"] in chosen:
                row.update(kept=True, drop_reason=None)  # trained on its reference (training_rows)
    return rows


def training_rows(domain: Domain, problems: list[dict[str, Any]], rollouts: list[dict[str, Any]],
                  verdicts: list[dict[str, Any]], curriculum: list[dict[str, Any]],
                  curation: CurateConfig, *, warmup: bool,
                  penalties: Mapping[str, float] | None = None, algorithm: str = "sft",
                  max_pairs_per_problem: int = 4) -> list[dict[str, Any]]:
    """`penalties`: the diversity penalty per problem_id (repetition_penalties), 0 if absent.
    `algorithm` grpo / dpo: after the warm-up, the solver rows are GRPO prompt rows or DPO pairs
    (tasks/rows.py); proposer rows are the same weighted rows for every algorithm."""
    kept = {c["problem_id"]: c for c in curriculum if c["kept"]}
    reward = {v["rollout_id"]: v["reward"] for v in verdicts}
    group: dict[str, list[float]] = defaultdict(list)  # judged rewards per problem
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
                    and stats["pass_rate"] <= curation.min_pass_rate)
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
    if algorithm != "sft" and not warmup and curation.solver_targets != "reference":
        rows = solver_rows(algorithm, domain, problems, rollouts, verdicts, curriculum,
                           max_pairs_per_problem=max_pairs_per_problem)
    proposer.sort(key=lambda r: -r["weight"])  # stable: ties keep problem order
    return rows + proposer[: curation.max_proposer_rows]


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


def curate_settings(config: RunConfig, *, warmup: bool) -> dict[str, Any]:
    """The config slice the curate stage reads, as its fingerprint covers it.

    `[curate]`, `train.algorithm` (it decides the solver rows' form) and, in rounds >= 1 under
    DPO, `train.dpo.max_pairs_per_problem`. The warm-up reads no `[curate.diversity]` (it builds
    no penalty) and no `[train.dpo]` (it trains SFT), but `domain.seed_max_level` (the hardest
    level it keeps for the solver).

    Parameters
    ----------
    config
        The run's config.
    warmup
        Whether the stage is round 0's.

    Returns
    -------
    dict
        {"curate": ..., "algorithm": ..., "warmup": bool} and "warmup_max_level" (round 0) or,
        under DPO, "max_pairs_per_problem".
    """
    curation, train = config.curate, config.train
    settings: dict[str, Any] = {
        "curate": curation.model_dump(mode="json", exclude={"diversity"} if warmup else None),
        "algorithm": train.algorithm, "warmup": warmup}
    if warmup:
        settings["warmup_max_level"] = config.domain.seed_max_level
    elif train.algorithm == "dpo":
        settings["max_pairs_per_problem"] = train.dpo.max_pairs_per_problem
    return settings


@task(name="curate", cache_policy=NONE, persist_result=False)
def curate(ctx: RunContext, round_index: int, problems: StageOutput, rollouts: StageOutput,
           verdicts: StageOutput) -> StageOutput:
    curation = ctx.config.curate

    def compute(fingerprint: str) -> StageResult:
        problem_rows = read_rows(problems.path("problems"))
        verdict_rows = read_rows(verdicts.path("verdicts"))
        warmup = round_index == 0
        curriculum = curriculum_rows(problem_rows, verdict_rows, curation, warmup=warmup,
                                     warmup_max_level=ctx.config.domain.seed_max_level)
        penalties = (repetition_penalties(ctx.domain, read_rows(problems.path("proposals")),
                                          curation)
                     if curation.diversity.penalty > 0 and not warmup else None)
        rows = training_rows(ctx.domain, problem_rows, read_rows(rollouts.path("rollouts")),
                             verdict_rows, curriculum, curation, warmup=warmup, penalties=penalties,
                             algorithm=ctx.config.train.algorithm,
                             max_pairs_per_problem=ctx.config.train.dpo.max_pairs_per_problem)
        judged = [c["pass_rate"] for c in curriculum if c["pass_rate"] is not None]
        return StageResult(
            datasets={"curriculum": curriculum, "train_rows": rows},
            metrics={"kept": sum(c["kept"] for c in curriculum),
                     "pass_at_1": sum(judged) / len(judged) if judged else 0.0,
                     "train_rows": len(rows),
                     "solver_rows": sum(r["role"] == "solver" for r in rows)},
        )

    return run_stage(
        ctx, stage="curate", version=VERSION, round_index=round_index,
        config=curate_settings(ctx.config, warmup=round_index == 0),
        inputs={"problems": problems.fingerprint, "rollouts": rollouts.fingerprint,
                "verdicts": verdicts.fingerprint},
        compute=compute,
    )
