"""Verifier error rates: how often a round's rewards disagree with known answers.

The verify stage records two measurements per round (tasks/verify.py `error_rate_metrics`),
both from pairs (the verdict's reward, the reward against the known answer) of judged rollouts:

Label precision and recall (`verify.labels = "majority"`, over the round's problems that have a
reference). The verdict's reward is against the problem's majority label, the round's training
signal; the known answer is the reference (TTRL logs the same every round; its own example shows
37 % label accuracy behind 92 % reward accuracy):

    label_reward_precision   of the rollouts the majority label rewarded 1, the share the
                             reference also rewards 1
    label_reward_recall      of the rollouts the reference rewards 1, the share the majority
                             label rewarded 1

(`label_precision` of tasks/verify.py is the per-problem figure: the share of labelled problems
whose majority label equals the reference; the alarm `label_accuracy_drop` watches it.)

Canaries (`verify.canary = n`, rounds >= 1). `round_canaries` draws n problems from the domain's
generator, from the run's seed and the round (`CANARY_STREAM`), never a held-out item nor one of
the round's problems, each with its reference. The rollout stage samples them after the round's
problems (so the round's own samples are those of a run without canaries), the verify stage
judges them like the round's problems, with the same labels, and writes their verdicts to the
round's verdicts file; their problem ids (`row_id("canary", domain, text)`) are in no problems
file, the curate stage drops their verdicts, and nothing trains on them. Against the known
answer:

    verifier_false_positive_rate   rewarded 1 where the known answer is not: FP / (FP + TN)
    verifier_false_negative_rate   not rewarded 1 where the known answer is: FN / (FN + TP)

each with its Wilson 95 % interval (`_low`, `_high`: storage/audit/round_metrics.py
`wilson_interval`) and the counts they are over (`canary_negatives`, `canary_positives`), beside
`canary_problems`.
With reference labels a canary's label is its known answer, so both rates are 0 by construction:
canaries measure labels that are not the reference (majority votes, later a judge).

A "1" is a reward of 1.0 (full credit, as evaluate's `correct`); a rollout with either reward
None (unjudged) is counted in neither. A rate with no rollout to be over is not recorded (no 0
for "not measured").

    error_rates(Confusion(true_positive=40, false_positive=3, false_negative=5, true_negative=52))
    -> {"verifier_false_positive_rate": 0.0545..., "verifier_false_positive_low": 0.0187...,
        "verifier_false_positive_high": 0.1487..., "verifier_false_negative_rate": 0.1111...,
        ..., "canary_negatives": 55, "canary_positives": 45}
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from configs.settings import DomainSettings
from domains.base import Domain, problem_row
from storage.audit.round_metrics import wilson_interval
from storage.fingerprint import row_id

CANARY_STREAM = "verify-canary"  # the canaries' seed: stage_seed(run seed, CANARY_STREAM, round)
DRAWS_PER_CANARY = 20  # generator draws tried per canary before a domain is taken to have no more
CANARY_COLUMNS = {"problem_id": pl.String, "text": pl.String, "reference": pl.String,
                  "level": pl.Int64, "task": pl.String, "payload": pl.String}


def canary_problems(domain: Domain, *, count: int, levels: list[int], seed: int,
                    exclude: set[str]) -> pl.DataFrame:
    """Up to `count` generator problems with a reference, levels cycled, none of whose texts is
    in `exclude` or repeated; the same rows for the same arguments in every process.

    A domain with few distinct problems left gives fewer (at most `DRAWS_PER_CANARY` draws per
    canary), so the canaries' count is a metric (`canary_problems`), not a promise."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    taken = set(exclude)
    for _ in range(count * DRAWS_PER_CANARY):
        if len(rows) == count:
            break
        problem = domain.generate(rng, levels[len(rows) % len(levels)])
        if problem.reference is None or problem.text in taken:
            continue
        taken.add(problem.text)
        rows.append({"problem_id": row_id("canary", domain.name, problem.text),
                     **problem_row(problem)})
    return pl.DataFrame(rows, schema=CANARY_COLUMNS)


def round_canaries(domain: Domain, settings: DomainSettings, *, count: int, seed: int,
                   problem_texts: Iterable[str]) -> pl.DataFrame:
    """The round's canaries (module docstring): `count` problems of levels min_level..max_level
    that are neither held-out items nor among `problem_texts` (the round's problems), so a
    canary never shares a text with what the round trains on or is evaluated on."""
    config = settings.domain
    heldout = {p.text for p in domain.heldout(config.heldout_per_level)}
    return canary_problems(domain, count=count,
                           levels=list(range(config.min_level, config.max_level + 1)),
                           seed=seed, exclude=heldout | set(problem_texts))


@dataclass(frozen=True)
class Confusion:
    """Judged rollouts counted by (the verdict rewarded 1, the known answer rewards 1)."""

    true_positive: int
    false_positive: int
    false_negative: int
    true_negative: int


def confusion(pairs: pl.DataFrame) -> Confusion:
    """The counts over `pairs` (columns `reward`, the verdict's, and `truth`, the reward against
    the known answer), leaving out every row where either is None."""
    judged = pairs.filter(pl.col("reward").is_not_null() & pl.col("truth").is_not_null())
    said, true = pl.col("reward") == 1.0, pl.col("truth") == 1.0
    counts = judged.select((said & true).sum().alias("tp"), (said & ~true).sum().alias("fp"),
                           (~said & true).sum().alias("fn"), (~said & ~true).sum().alias("tn"))
    tp, fp, fn, tn = (int(v) for v in counts.row(0))
    return Confusion(tp, fp, fn, tn)


def rate(name: str, errors: int, n: int) -> dict[str, float]:
    """`{name}_rate` = errors / n with its Wilson 95 % interval (`{name}_low`, `{name}_high`);
    nothing when n = 0."""
    if n == 0:
        return {}
    low, high = wilson_interval(errors, n)
    return {f"{name}_rate": errors / n, f"{name}_low": low, f"{name}_high": high}


def error_rates(counts: Confusion) -> dict[str, float]:
    """The verifier's false-positive and false-negative rates on the canaries, with intervals
    and the counts they are over (module docstring)."""
    negatives = counts.false_positive + counts.true_negative
    positives = counts.false_negative + counts.true_positive
    return {**rate("verifier_false_positive", counts.false_positive, negatives),
            **rate("verifier_false_negative", counts.false_negative, positives),
            "canary_negatives": negatives, "canary_positives": positives}


def label_rates(counts: Confusion) -> dict[str, float]:
    """label_reward_precision and label_reward_recall of the majority labels (module
    docstring); each left out when nothing was rewarded 1 by its side."""
    said = counts.true_positive + counts.false_positive
    true = counts.true_positive + counts.false_negative
    out: dict[str, float] = {}
    if said:
        out["label_reward_precision"] = counts.true_positive / said
    if true:
        out["label_reward_recall"] = counts.true_positive / true
    return out
