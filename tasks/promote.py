"""Promote: decide whether the round's candidate replaces the incumbent, and say why.

`promotion_decision(candidate_evals, incumbent_evals, cfg)` compares the held-out eval rows of
both checkpoints (the same fixed items, matched by `item_id`) under `[promote]`:

    accuracy   candidate >= incumbent - margin      (margin: an allowed drop; default 0)
               candidate >= incumbent + min_gain    (min_gain: a required gain; set one of them)
    per level  with max_level_regression set: for every difficulty level, the share of the
               level's items that flip pass (incumbent) -> fail (candidate) must not exceed it.
               Flip-based, as AgentDevel accepts a change only without pass -> fail regressions:
               an accuracy gain at level 2 does not buy a collapse at level 4.

With `test` = paired_bootstrap or mcnemar the accuracy rule is a one-sided paired test over the
items both were evaluated on (tasks/promotion_tests.py): H0 "candidate - incumbent <= min_gain -
margin" must be rejected at `alpha`, so a gain of one or two items out of 120 no longer promotes.

The decision's reason is one line, recorded in the catalog's `rounds` table and shown by
`flywheel status RUN_ID` (the `decision` column):

    "accuracy 0.242 >= 0.200 - 0.000"
    "accuracy 0.242 >= 0.200 - 0.000; level 3: 4/40 items pass->fail > 0.050"   (rejected)
    "accuracy 0.242 vs 0.200: +0.042 [+0.008, +0.075], p = 0.021 <= 0.050 (paired bootstrap,
     120 items, 90% interval)"                                                   (test set)

With a test, the stage's metrics also hold `accuracy_difference`, its interval
(`accuracy_difference_low`, `_high`) and `p_value`.

Then the alarms (`[alarms]`, tasks/alarms.py) are checked on the run's metrics of rounds 0..r
and recorded (`alarm_*` metrics); a fired alarm that `alarms.block` names rejects the candidate
whatever the accuracy rule said, its reason appended to the line (`with_alarms`):

    "accuracy 0.242 >= 0.200 - 0.000; alarm novelty_collapse: proposer novelty 0.040 < 0.100
     (new problems / valid proposer samples)"                                    (rejected)

A round whose curate stage left no training rows has no candidate: it is recorded as rejected
with reason "no training rows" and the incumbent stays (flows/run.py). The candidate's model
card (tasks/model_card.py) gets its held-out accuracy and the decision before the stage's row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from configs import AlarmsConfig, PromoteConfig
from configs.settings import PromoteSettings
from storage.datasets import read_rows
from tasks.alarms import Alarm, alarm_metrics, blocking, round_alarms
from tasks.context import Checkpoint, RunContext
from tasks.evaluate import Evaluation, item_passes
from tasks.model_card import add_evaluation
from tasks.promotion_tests import PairedTest, mcnemar, paired_bootstrap
from tasks.stage import StageResult, run_stage

VERSION = 2  # 2: promotion_decision (min_gain, max_level_regression, reasons); no-candidate rounds
NO_TRAINING_ROWS = "no training rows"
_EPS = 1e-9  # accuracies are ratios of counts: 0.3 - 0.1 must still admit 0.2


@dataclass(frozen=True)
class Decision:
    promoted: bool
    reason: str
    worst_level_flip_share: float | None = None
    test: PairedTest | None = None  # [promote] test set: the paired test of the accuracy rule


def _accuracy(rows: list[dict[str, Any]], which: str) -> float:
    if not rows:
        msg = f"promote: the {which} has no held-out eval rows (check domain.heldout_per_level)"
        raise ValueError(msg)
    return sum(bool(r["correct"]) for r in rows) / len(rows)


def level_flips(candidate_evals: list[dict[str, Any]],
                incumbent_evals: list[dict[str, Any]]) -> dict[int, tuple[float, int]]:
    """{level: (items that pass for the incumbent and fail for the candidate, items)} over the
    held-out items both were evaluated on. With several samples per item (evaluate.samples) an
    item counts by how much its pass fraction dropped (`item_passes`; 1 for a pass->fail)."""
    candidate = item_passes(candidate_evals)
    out: dict[int, list[float]] = defaultdict(lambda: [0, 0])
    for item, (level, passed) in item_passes(incumbent_evals).items():
        if item not in candidate:
            continue
        counts = out[level]
        counts[1] += 1
        counts[0] += max(0.0, passed - candidate[item][1])
    return {level: (flips, int(items)) for level, (flips, items) in sorted(out.items())}


def paired_test(candidate_evals: list[dict[str, Any]], incumbent_evals: list[dict[str, Any]],
                cfg: PromoteConfig) -> PairedTest:
    """`cfg.test` over the items both were evaluated on (matched by `item_id`), against the
    bound min_gain - margin; with several samples per item, over their pass fractions."""
    candidate = item_passes(candidate_evals)
    pairs = [(candidate[item][1], passed)
             for item, (_, passed) in item_passes(incumbent_evals).items() if item in candidate]
    if not pairs:
        msg = ("promote: the candidate and the incumbent share no held-out item_id, so no paired "
               "test; evaluate both on the same held-out set, or set [promote] test = 'none'")
        raise ValueError(msg)
    passes, incumbent_passes = [c for c, _ in pairs], [i for _, i in pairs]
    if cfg.test == "mcnemar":
        return mcnemar(passes, incumbent_passes, alpha=cfg.alpha)
    return paired_bootstrap(passes, incumbent_passes, bound=cfg.min_gain - cfg.margin,
                            alpha=cfg.alpha, samples=cfg.bootstrap_samples)


def promotion_decision(candidate_evals: list[dict[str, Any]], incumbent_evals: list[dict[str, Any]],
                       cfg: PromoteConfig) -> Decision:
    """Promote or not, with a one-line reason (see the module docstring)."""
    candidate, incumbent = (_accuracy(candidate_evals, "candidate"),
                            _accuracy(incumbent_evals, "incumbent"))
    test = None if cfg.test == "none" else paired_test(candidate_evals, incumbent_evals, cfg)
    if test is not None:
        accuracy_ok = test.passed
        reasons = [f"accuracy {candidate:.3f} vs {incumbent:.3f}: {test.describe()}"]
    else:
        bar = (f"{incumbent:.3f} + {cfg.min_gain:.3f}" if cfg.min_gain > 0
               else f"{incumbent:.3f} - {cfg.margin:.3f}")
        accuracy_ok = candidate >= incumbent - cfg.margin + cfg.min_gain - _EPS
        reasons = [f"accuracy {candidate:.3f} {'>=' if accuracy_ok else '<'} {bar}"]
    limit = cfg.max_level_regression
    if limit is None:
        return Decision(accuracy_ok, reasons[0], test=test)
    flips = level_flips(candidate_evals, incumbent_evals)
    shares = {level: f / n for level, (f, n) in flips.items() if n}
    regressed = [level for level, (f, n) in flips.items() if n and f > limit * n + _EPS]
    for level in regressed:
        f, n = flips[level]
        reasons.append(f"level {level}: {f:g}/{n} items pass->fail > {limit:.3f}")
    worst = max(shares, key=lambda level: (shares[level], -level)) if shares else None
    if not regressed and worst is not None:
        f, n = flips[worst]
        reasons.append(f"worst level {worst}: {f:g}/{n} items pass->fail <= {limit:.3f}")
    return Decision(accuracy_ok and not regressed, "; ".join(reasons),
                    shares[worst] if worst is not None else None, test)


def with_alarms(decision: Decision, alarms: list[Alarm], cfg: AlarmsConfig) -> Decision:
    """`decision`, rejected when a fired alarm is one `cfg.block` names; the reason of each
    such alarm is appended to its line."""
    blocked = blocking(alarms, cfg)
    if not blocked:
        return decision
    reason = "; ".join([decision.reason, *(f"alarm {a.name}: {a.reason}" for a in blocked)])
    return replace(decision, promoted=False, reason=reason)


def promote_inputs(incumbent: Checkpoint, incumbent_eval: Evaluation,
                   candidate: Checkpoint | None = None, candidate_eval: Evaluation | None = None,
                   *, without_candidate: str = NO_TRAINING_ROWS) -> dict[str, str]:
    """The fingerprints the promote stage compares: incumbent and candidate with their evals
    (or, without a candidate, why there is none)."""
    return {"incumbent": incumbent.fingerprint, "incumbent_evals": incumbent_eval.fingerprint,
            **({"candidate": candidate.fingerprint, "candidate_evals": candidate_eval.fingerprint}
               if candidate is not None and candidate_eval is not None
               else {"without_candidate": without_candidate})}


@task(name="promote", cache_policy=NONE, persist_result=False)
def promote(ctx: RunContext, round_index: int, incumbent: Checkpoint, incumbent_eval: Evaluation,
            candidate: Checkpoint | None = None, candidate_eval: Evaluation | None = None,
            *, without_candidate: str = NO_TRAINING_ROWS) -> Checkpoint:
    """Record the round's decision; return the checkpoint that is the incumbent afterwards.

    `candidate` None: the round produced no candidate (`without_candidate` says why)."""
    settings = PromoteSettings.from_config(ctx.config)
    incumbent_accuracy = incumbent_eval.accuracy["accuracy"]
    if candidate is None or candidate_eval is None:
        decision = Decision(False, without_candidate)
        candidate_accuracy = None
    else:
        decision = promotion_decision(read_rows(candidate_eval.path),
                                      read_rows(incumbent_eval.path), settings.promote)
        candidate_accuracy = candidate_eval.accuracy["accuracy"]
    alarms = round_alarms(ctx.catalog.round_metrics(ctx.run_id, round_index), round_index,
                          settings.alarms)
    if candidate is not None:
        decision = with_alarms(decision, alarms, settings.alarms)

    def compute(fingerprint: str) -> StageResult:
        if candidate is not None and candidate_eval is not None:  # before the stage's row
            add_evaluation(candidate.path, {
                "heldout_accuracy": candidate_accuracy, "evals": candidate_eval.fingerprint,
                **{f"heldout_accuracy_{end}": candidate_eval.accuracy[f"accuracy_{end}"]
                   for end in ("low", "high") if f"accuracy_{end}" in candidate_eval.accuracy},
                "incumbent": incumbent.fingerprint, "incumbent_accuracy": incumbent_accuracy,
                "promoted": decision.promoted, "reason": decision.reason})
        ctx.catalog.record_round(
            run_id=ctx.run_id, round_index=round_index, incumbent=incumbent.fingerprint,
            candidate=None if candidate is None else candidate.fingerprint,
            incumbent_accuracy=incumbent_accuracy, candidate_accuracy=candidate_accuracy,
            promoted=decision.promoted, reason=decision.reason,
        )
        metrics = {"promoted": float(decision.promoted), "incumbent_accuracy": incumbent_accuracy}
        if candidate_accuracy is not None:
            metrics["candidate_accuracy"] = candidate_accuracy
        if decision.worst_level_flip_share is not None:
            metrics["worst_level_flip_share"] = decision.worst_level_flip_share
        if decision.test is not None:
            metrics.update(accuracy_difference=decision.test.difference,
                           accuracy_difference_low=decision.test.low,
                           accuracy_difference_high=decision.test.high,
                           p_value=decision.test.p_value)
        return StageResult(metrics={**metrics, **alarm_metrics(alarms)})

    run_stage(
        ctx, stage="promote", version=VERSION, round_index=round_index,
        settings=settings,
        inputs=promote_inputs(incumbent, incumbent_eval, candidate, candidate_eval,
                              without_candidate=without_candidate),
        compute=compute,
    )
    return candidate if decision.promoted and candidate is not None else incumbent
