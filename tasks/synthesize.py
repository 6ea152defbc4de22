"""Synthesize: the proposer writes problems; the domain admits, executes and dedups them.

Round 0 is seeded by the domain's own generator (the untrained model cannot write problems yet):
mostly problems of the levels the warm-up trains the solver on, plus a few of every other level
so the proposer learns what each level looks like. Every proposer sample is kept in `proposals`
with its `drop_reason`: `invalid` (the parser rejected it), `duplicate` (seen earlier in this
round or in any earlier round of the run), `heldout` (it equals a held-out item, which must
never be trained on), `benchmark` (it is a question of an `[evaluate] benchmarks` file, case and
spacing aside: never trained on either), or `near_duplicate`
(`synthesize.near_duplicate_threshold` < 1: a MinHash near duplicate of an earlier problem or of
one admitted before it in this round; off by default, since for arithmetic 37+5 and 37+6 are
different problems).

The proposer samples on the backend of `[rollout]` (`models.backends.backend_for`: the warm
vLLM engine under `rollout.backend = "vllm"`); each of its samples records the `checkpoint`
(fingerprint) and the `backend` that drew it, which are null on the generator's rows.

`synthesize.level_scheduler = "bandit"` draws each proposer prompt's level from a bandit over
levels (tasks.curriculum.bandit), its state recomputed from the earlier rounds' curriculum
files, which then join this stage's fingerprint; "cycle" (default) asks for each level in turn;
"fixed" raises the level on a timetable (`scheduled_levels`: round r asks for min_level + r - 1
only, capped at max_level), for the proposer and for the baselines' generator alike.
With `[synthesize.bandit] arms = "task_level"` (reasoning_gym, `source = "generator"`) the
bandit's arms are the (task, level) pairs of the task mix instead: each generator problem of a
round >= 1 is written for a drawn arm (`generate_task`), Q replayed from the earlier rounds'
curricula with each problem's task read from its text. The drawn arms are the proposals' texts
(`<task> L<level>: ...`) and the stage's metrics `requested_task_<task>_level_<L>`, next to
`bandit_q_task_...` and `bandit_p_task_...`.

A proposer trained on its kept problems learns to write them again, and repeats are dropped as
`duplicate`. `synthesize.min_novel_share` > 0 keeps the offer up to that share of `proposals`
novel problems. `synthesize.top_up = "generator"` (default): the proposer samples one batch and
the shortfall is filled with fresh generator problems (levels min_level..max_level in equal
shares, `source` = "generator"), so the rounds in which the proposer repeats itself get the
uniform curriculum's coverage, at the compute of one batch. `top_up = "proposer"`: another batch
of `proposals` samples is drawn (new seed) while too few were novel, at most `max_batches` in
all. Every sample of every batch, and every fill problem, is in `proposals`.

`synthesize.source` replaces the proposer in rounds >= 1 for the baselines: `generator` draws
`proposals` fresh generator problems per round, levels min_level..max_level in equal shares
(the uniform curriculum; deduplicated like proposer samples); `pool` draws the same problems
every round and does not deduplicate them against earlier rounds (a fixed prompt set, TTRL
style). Both carry executed references; with majority-vote labels these are used only to
measure label precision. Their rows have `source` = "generator" or "pool".
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from configs import SynthesizeConfig
from configs.settings import (
    BackendSettings,
    SeedSynthesizeSettings,
    SynthesizeSettings,
    benchmark_digest,
    stage_settings,
)
from domains.base import EXECUTION_REASONS, Domain, Problem, Rejected, problem_row
from models.backends import SamplingParams, backend_for
from storage.datasets import read_table
from storage.fingerprint import row_id
from tasks.benchmarks import benchmark_questions, in_benchmark
from tasks.context import Checkpoint, RunContext
from tasks.curriculum.bandit import (
    Arm,
    arm_q_values,
    level_probabilities,
    q_values,
    sample_arms,
    sample_levels,
    task_level_arms,
)
from tasks.curriculum.dedup import near_duplicates
from tasks.retry import TRANSIENT
from tasks.stage import StageOutput, StageResult, run_stage

VERSION = 3  # 3: problems carry their task and verification payload


def problem_id(domain: Domain, text: str) -> str:
    return row_id("problem", domain.name, text)


def seed_levels(domain: Domain, solver_max_level: int) -> list[int]:
    """The level cycle of the seed: levels the warm-up trains the solver on get 4 shares each,
    the others 1 share each (they only show the proposer what each level looks like)."""
    return [level for level in domain.levels for _ in range(4 if level <= solver_max_level else 1)]


def seed_proposals(domain: Domain, *, count: int, levels: list[int], seed: int
                   ) -> list[tuple[str, str]]:
    """(prompt, text) pairs from the domain generator, cycling through `levels`."""
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        problem = domain.generate(rng, levels[index % len(levels)])
        pairs.append((domain.proposer_prompt(problem.level), problem.text))
    return pairs


def scheduled_levels(synth: SynthesizeConfig, *, min_level: int, max_level: int,
                     round_index: int) -> list[int]:
    """The levels a round >= 1 draws from: min_level..max_level, or under `level_scheduler =
    "fixed"` the timetable's one level, min_level + round_index - 1 capped at max_level."""
    if synth.level_scheduler == "fixed":
        return [min(max_level, min_level + round_index - 1)]
    return list(range(min_level, max_level + 1))


def baseline_proposals(domain: Domain, source: str, *, count: int, levels: list[int],
                       round_seed: int, pool_seed: int) -> list[tuple[str, str]]:
    """Problems of rounds >= 1 without a proposer (`synthesize.source`), `levels` in equal
    shares.

    generator: fresh draws every round (seeded per round): the uniform curriculum.
    pool: the same draws every round (one seed for the run): a fixed prompt set.
    """
    return seed_proposals(domain, count=count, levels=levels,
                          seed=pool_seed if source == "pool" else round_seed)


def admit(
    domain: Domain,
    pairs: list[tuple[str, str]],
    *,
    source: str | list[str],
    seen: set[str],
    heldout: set[str],
    run_id: str,
    round_index: int,
    near_duplicate_threshold: float = 1.0,
    ngram: int = 3,
    benchmark: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Parse, execute and dedup proposer samples -> (proposal rows, problem rows).

    `source`: the rows' `source`, one for all pairs or one per pair. `benchmark`: the
    `[evaluate] benchmarks` questions (`benchmark_questions`), dropped as `benchmark`.

    With `near_duplicate_threshold` < 1, a sample that passed every other check but is a near
    duplicate (tasks.curriculum.dedup: MinHash Jaccard of character `ngram`s) of an earlier
    problem in `seen`, or of a sample admitted before it in this batch, is `near_duplicate`.
    """
    earlier = sorted(seen)  # sorted: the same answer in every process
    seen = set(seen)
    checked = []
    domain.prepare([text for _, text in pairs])  # an executing domain runs the batch at once
    parses: dict[str, Problem | Rejected] = {}  # parse is pure: a repeated sample is parsed once
    for index, (prompt, text) in enumerate(pairs):
        parsed = parses.get(text)
        if parsed is None:
            parsed = parses[text] = domain.parse(text)
        if not isinstance(parsed, Problem):
            reason = parsed.reason if parsed.reason in EXECUTION_REASONS else "invalid"
        elif parsed.text in heldout:
            reason = "heldout"
        elif in_benchmark(parsed.text, benchmark):
            reason = "benchmark"
        elif parsed.text in seen:
            reason = "duplicate"
        else:
            reason = None
            seen.add(parsed.text)
        checked.append((index, prompt, text, parsed, reason))
    if near_duplicate_threshold < 1.0:
        fresh = [k for k, row in enumerate(checked) if row[4] is None]
        flags = near_duplicates([checked[k][3].text for k in fresh], earlier,
                                threshold=near_duplicate_threshold, ngram=ngram)
        for k in (k for k, flag in zip(fresh, flags, strict=True) if flag):
            checked[k] = (*checked[k][:4], "near_duplicate")
    sources = [source] * len(pairs) if isinstance(source, str) else source
    proposals, problems = [], []
    for (index, prompt, text, parsed, reason), origin in zip(checked, sources, strict=True):
        pid = problem_id(domain, parsed.text) if isinstance(parsed, Problem) else None
        proposal_id = row_id("proposal", run_id, round_index, index, prompt, text)
        proposals.append({
            "proposal_id": proposal_id, "run_id": run_id, "round": round_index, "prompt": prompt,
            "text": text, "level": parsed.level if isinstance(parsed, Problem) else None,
            "source": origin, "problem_id": pid, "drop_reason": reason,
        })
        if reason is None:
            problems.append({
                "problem_id": pid, "run_id": run_id, "round": round_index, "source": origin,
                "proposal_id": proposal_id, **problem_row(parsed),
            })
    return proposals, problems


def propose(domain: Domain, checkpoint: Path, *, count: int, levels: list[int], temperature: float,
            max_new_tokens: int, seed: int, backend: BackendSettings) -> list[tuple[str, str]]:
    """Sample `count` proposer completions, requested levels cycling through `levels`, on the
    backend of `[rollout]` (`backend_for`: vLLM's warm engine under `rollout.backend = "vllm"`,
    which the rollout stage then reuses on the same weights)."""
    prompts = [domain.proposer_prompt(levels[i % len(levels)]) for i in range(count)]
    sampler = backend_for(backend, checkpoint)
    try:
        outputs = sampler.generate(
            prompts, SamplingParams(n=1, temperature=temperature, max_new_tokens=max_new_tokens,
                                    seed=seed)
        )
    finally:
        sampler.close()
    cut = domain.cut  # [prompt] stop strings
    return [(prompt, cut(out[0].text)) for prompt, out in zip(prompts, outputs, strict=True)]


def record_sampler(proposals: list[dict[str, Any]], *, checkpoint: str,
                   backend: str | None) -> None:
    """Record on each proposer sample the checkpoint (fingerprint) and the backend that sampled
    it; rows of the domain's generator (seed, generator, pool, the top-up's fill) get None."""
    for row in proposals:
        sampled = row["source"] == "proposer"
        row["checkpoint"] = checkpoint if sampled else None
        row["backend"] = backend if sampled else None


def bandit_levels(cfg: SynthesizeConfig, curricula: list[StageOutput], levels: list[int], *,
                  seed: int) -> tuple[list[int], dict[str, float]]:
    """One requested level per proposer prompt from the level bandit, whose Q values are replayed
    from the earlier rounds' curriculum files in round order -> (levels, metrics)."""
    columns = ["level", "pass_rate", "reward_mad", "judged"]
    rounds = [read_table(o.path("curriculum")).select(columns).to_pylist() for o in curricula]
    bandit = cfg.bandit
    q = q_values(rounds, levels, alpha=bandit.alpha, initial_q=bandit.initial_q)
    drawn = sample_levels(q, cfg.proposals, temperature=bandit.temperature, seed=seed)
    probabilities = level_probabilities(q, bandit.temperature)
    metrics = {}
    for level in levels:
        metrics[f"bandit_q_level_{level}"] = q[level]
        metrics[f"bandit_p_level_{level}"] = probabilities[level]
        metrics[f"requested_level_{level}"] = float(drawn.count(level))
    return drawn, metrics


def draws_task_level_arms(synth: SynthesizeConfig) -> bool:
    """Whether rounds >= 1 draw their generator problems by the (task, level) bandit."""
    return synth.level_scheduler == "bandit" and synth.bandit.arms == "task_level"


def reads_curricula(synth: SynthesizeConfig) -> bool:
    """Whether rounds >= 1 replay the earlier rounds' curricula (a bandit chooses their draws)."""
    return synth.level_scheduler == "bandit" and (synth.source == "proposer"
                                                   or draws_task_level_arms(synth))


def arm_rounds(domain: Domain, curricula: list[StageOutput],
               earlier_problems: list[StageOutput]) -> list[list[dict[str, Any]]]:
    """Each earlier round's curriculum rows (level, pass_rate, reward_mad, judged) with their
    problem's `task` (read from the problem text by `domain.task_of`), in round order."""
    tasks: dict[str, str | None] = {}
    for out in earlier_problems:
        table = read_table(out.path("problems")).select(["problem_id", "text"]).to_pydict()
        tasks.update(zip(table["problem_id"], map(domain.task_of, table["text"]), strict=True))
    columns = ["problem_id", "level", "pass_rate", "reward_mad", "judged"]
    return [[{**row, "task": tasks.get(row["problem_id"])}
             for row in read_table(o.path("curriculum")).select(columns).to_pylist()]
            for o in curricula]


def bandit_arms(domain: Domain, settings: SynthesizeSettings, rounds: list[list[dict[str, Any]]],
                *, seed: int) -> tuple[list[Arm], dict[str, float]]:
    """One (task, level) arm per generator problem of the round from the bandit over the
    tasks of positive weight and levels min_level..max_level -> (arms, metrics)."""
    levels = settings.domain.domain
    bandit = settings.synthesize.bandit
    tasks = [task for task, weight in zip(domain.tasks, domain.weights, strict=True) if weight > 0]
    arms = task_level_arms(tasks, list(range(levels.min_level, levels.max_level + 1)))
    q = arm_q_values(rounds, arms, alpha=bandit.alpha, initial_q=bandit.initial_q)
    drawn = sample_arms(q, settings.synthesize.proposals, temperature=bandit.temperature, seed=seed)
    probabilities = level_probabilities(q, bandit.temperature)
    metrics = {}
    for arm in arms:
        name = f"task_{arm[0]}_level_{arm[1]}"
        metrics[f"bandit_q_{name}"] = q[arm]
        metrics[f"bandit_p_{name}"] = probabilities[arm]
        metrics[f"requested_{name}"] = float(drawn.count(arm))
    return drawn, metrics


def arm_proposals(domain: Domain, arms: list[Arm], *, seed: int) -> list[tuple[str, str]]:
    """(prompt, text) generator problems, one of each (task, level) arm in turn, seeded."""
    rng = random.Random(seed)
    return [(domain.proposer_prompt(level), domain.generate_task(rng, task, level).text)
            for task, level in arms]


def top_up(draw: Callable[[int], list[tuple[str, str]]],
           count_novel: Callable[[list[tuple[str, str]]], int], *, min_novel: int,
           max_batches: int) -> list[tuple[str, str]]:
    """Batches `draw(0)`, `draw(1)`, ... until `count_novel` of them reaches `min_novel` or
    `max_batches` were drawn; one batch when min_novel is 0."""
    pairs: list[tuple[str, str]] = []
    for batch in range(max_batches if min_novel > 0 else 1):
        if batch and count_novel(pairs) >= min_novel:
            break
        pairs += draw(batch)
    return pairs


def generator_fill(domain: Domain, *, missing: int, exclude: set[str], levels: list[int],
                   seed: int, batch: int, max_batches: int,
                   benchmark: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """Up to `missing` (prompt, text) generator problems whose texts are not in `exclude` nor
    `benchmark` and not repeated, from at most `max_batches` draws of `batch` (`levels` in equal
    shares, seed + draw)."""
    fill: list[tuple[str, str]] = []
    taken = set(exclude)
    for draw in range(max_batches):
        if len(fill) >= missing:
            break
        for prompt, text in seed_proposals(domain, count=batch, levels=levels, seed=seed + draw):
            if len(fill) == missing:
                break
            if text not in taken and not in_benchmark(text, benchmark):
                taken.add(text)
                fill.append((prompt, text))
    return fill


def novel_texts(domain: Domain, pairs: list[tuple[str, str]], seen: set[str], heldout: set[str],
                benchmark: frozenset[str] = frozenset()) -> set[str]:
    """Distinct problem texts among `pairs` that `admit` would keep (exact checks only)."""
    texts = {parsed.text for parsed in (domain.parse(text) for _, text in pairs)
             if isinstance(parsed, Problem)}
    return {text for text in texts - seen - heldout if not in_benchmark(text, benchmark)}


def novel_count(domain: Domain, pairs: list[tuple[str, str]], seen: set[str], heldout: set[str],
                benchmark: frozenset[str] = frozenset()) -> int:
    """Distinct problems among `pairs` that `admit` would keep (exact checks only)."""
    return len(novel_texts(domain, pairs, seen, heldout, benchmark))


@dataclass(frozen=True)
class ProblemChoice:
    """The (prompt, text) samples a round offers to `admit`, and where they came from."""

    pairs: list[tuple[str, str]]
    source: str  # the pairs' `source`: seed, proposer, generator or pool
    # top_up = generator: fresh generator problems, novel by construction, admitted last
    fill: list[tuple[str, str]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # the bandit's draws, the fill


def choose_problems(ctx: RunContext, settings: SeedSynthesizeSettings | SynthesizeSettings,
                    round_index: int, checkpoint: Path, *, seen: set[str], heldout: set[str],
                    curricula: list[StageOutput], earlier_problems: list[StageOutput],
                    benchmark: frozenset[str] = frozenset()) -> ProblemChoice:
    """Where a round's problems come from: the seed generator in round 0, else the proposer
    (`proposer_problems`) or, for the baselines, `synthesize.source` (`baseline_proposals`,
    or the (task, level) bandit's arms: `bandit_arms`).

    `seen`, `heldout` and `benchmark` are what `admit` drops (they decide the proposer's
    top-up);
    `curricula` are the earlier rounds' curate outputs a bandit replays (with
    `earlier_problems`, whose texts give each problem's task)."""
    domain = settings.domain.domain
    seed = ctx.stage_seed("synthesize", round_index)
    if not isinstance(settings, SynthesizeSettings):  # round 0: the seed generator
        pairs = seed_proposals(ctx.domain, count=domain.seed_problems,
                               levels=seed_levels(ctx.domain, domain.seed_max_level), seed=seed)
        return ProblemChoice(pairs, "seed")
    synth = settings.synthesize
    if synth.source == "proposer":
        return proposer_problems(ctx, settings, round_index, checkpoint, seed=seed, seen=seen,
                                 heldout=heldout, curricula=curricula, benchmark=benchmark)
    if draws_task_level_arms(synth):
        arms, metrics = bandit_arms(ctx.domain, settings,
                                    arm_rounds(ctx.domain, curricula, earlier_problems),
                                    seed=ctx.stage_seed("synthesize-bandit", round_index))
        return ProblemChoice(arm_proposals(ctx.domain, arms, seed=seed), "generator",
                             metrics=metrics)
    levels = scheduled_levels(synth, min_level=domain.min_level, max_level=domain.max_level,
                              round_index=round_index)
    pairs = baseline_proposals(ctx.domain, synth.source, count=synth.proposals, levels=levels,
                               round_seed=seed, pool_seed=ctx.stage_seed("synthesize-pool", 0))
    return ProblemChoice(pairs, synth.source)


def proposer_problems(ctx: RunContext, settings: SynthesizeSettings, round_index: int,
                      checkpoint: Path, *, seed: int, seen: set[str], heldout: set[str],
                      curricula: list[StageOutput], benchmark: frozenset[str] = frozenset()
                      ) -> ProblemChoice:
    """The proposer's samples of a round >= 1 (levels cycled, or drawn by the level bandit),
    kept up to `min_novel_share` novel ones by more batches or by the generator's fill."""
    domain, synth = settings.domain.domain, settings.synthesize
    scheduled = scheduled_levels(synth, min_level=domain.min_level, max_level=domain.max_level,
                                 round_index=round_index)
    levels: list[int] = scheduled
    metrics: dict[str, float] = {}
    if synth.level_scheduler == "bandit":
        levels, metrics = bandit_levels(synth, curricula, levels,
                                        seed=ctx.stage_seed("synthesize-bandit", round_index))
    min_novel = math.ceil(synth.min_novel_share * synth.proposals)
    by_generator = synth.top_up == "generator"
    pairs = top_up(
        lambda batch: propose(ctx.domain, checkpoint, count=synth.proposals, levels=levels,
                              temperature=synth.temperature, max_new_tokens=synth.max_new_tokens,
                              seed=seed + batch, backend=settings.backend),
        lambda pairs: novel_count(ctx.domain, pairs, seen, heldout, benchmark),
        min_novel=0 if by_generator else min_novel, max_batches=synth.max_batches)
    if not by_generator:
        return ProblemChoice(pairs, "proposer", metrics=metrics)
    novel = novel_texts(ctx.domain, pairs, seen, heldout, benchmark)
    fill = generator_fill(ctx.domain, missing=min_novel - len(novel),
                          exclude=seen | heldout | novel, levels=scheduled,
                          seed=ctx.stage_seed("synthesize-fill", round_index),
                          batch=synth.proposals, max_batches=synth.max_batches,
                          benchmark=benchmark)
    return ProblemChoice(pairs, "proposer", fill=fill,
                         metrics={**metrics, "generator_fill": float(len(fill))})


def synthesize_inputs(incumbent: Checkpoint, earlier_problems: list[StageOutput],
                      curricula: list[StageOutput],
                      benchmarks: dict[str, str] | None = None) -> dict[str, str]:
    """The fingerprints the synthesize stage reads: the incumbent, the earlier rounds' problems
    (dedup), the curricula a bandit replays and the benchmark files whose questions it drops
    (their bytes' digests; none without benchmarks, so such a run's fingerprints stay)."""
    return {"checkpoint": incumbent.fingerprint,
            **{f"problems_round_{o.round}": o.fingerprint for o in earlier_problems},
            **{f"curriculum_round_{o.round}": o.fingerprint for o in curricula},
            **{f"benchmark_{name}": benchmark_digest(name, path)
               for name, path in sorted((benchmarks or {}).items())}}


def replayed_curricula(settings: SeedSynthesizeSettings | SynthesizeSettings,
                       earlier_curated: list[StageOutput] | None) -> list[StageOutput]:
    """The earlier rounds' curate outputs the stage reads, in round order: a bandit's only."""
    if not isinstance(settings, SynthesizeSettings) or not reads_curricula(settings.synthesize):
        return []
    return sorted(earlier_curated or [], key=lambda o: o.round)


def synthesize_round(ctx: RunContext, settings: SeedSynthesizeSettings | SynthesizeSettings,
                     round_index: int, incumbent: Checkpoint, earlier_problems: list[StageOutput],
                     curricula: list[StageOutput], fingerprint: str) -> StageResult:
    """The synthesize stage's computation: choose the round's problems, then admit them."""
    seen = {text for out in earlier_problems
            for text in read_table(out.path("problems"))["text"].to_pylist()}
    heldout = {p.text for p in ctx.domain.heldout(settings.domain.domain.heldout_per_level)}
    benchmark = benchmark_questions(settings.benchmarks, settings.domain.domain.dataset)
    choice = choose_problems(ctx, settings, round_index, incumbent.path, seen=seen,
                             heldout=heldout, curricula=curricula,
                             earlier_problems=earlier_problems, benchmark=benchmark)
    proposer = isinstance(settings, SynthesizeSettings)
    admission = settings.synthesize if proposer else settings
    proposals, problems = admit(
        ctx.domain, choice.pairs + choice.fill,
        source=[choice.source] * len(choice.pairs) + ["generator"] * len(choice.fill),
        seen=set() if choice.source == "pool" else seen,  # a fixed prompt set: same every round
        heldout=heldout, run_id=ctx.run_id, round_index=round_index,
        near_duplicate_threshold=admission.near_duplicate_threshold, ngram=admission.ngram,
        benchmark=benchmark)
    record_sampler(proposals, checkpoint=incumbent.fingerprint,
                   backend=settings.backend.backend if proposer else None)
    reasons = [p["drop_reason"] for p in proposals]
    return StageResult(
        datasets={"proposals": proposals, "problems": problems},
        metrics={"proposed": len(proposals), "valid": sum(r != "invalid" for r in reasons),
                 "novel": len(problems), "near_duplicates": reasons.count("near_duplicate"),
                 **choice.metrics},
    )


@task(name="synthesize", cache_policy=NONE, persist_result=False, **TRANSIENT)
def synthesize(ctx: RunContext, round_index: int, incumbent: Checkpoint,
               earlier_problems: list[StageOutput],
               earlier_curated: list[StageOutput] | None = None) -> StageOutput:
    """`earlier_curated`: the earlier rounds' curate outputs, read by a bandit only."""
    settings = stage_settings(ctx.config, "synthesize", round_index)
    curricula = replayed_curricula(settings, earlier_curated)
    return run_stage(
        ctx, stage="synthesize", version=VERSION, round_index=round_index, settings=settings,
        inputs=synthesize_inputs(incumbent, earlier_problems, curricula, settings.benchmarks),
        compute=partial(synthesize_round, ctx, settings, round_index, incumbent, earlier_problems,
                        curricula),
    )
