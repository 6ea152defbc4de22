"""Reverify: judge a run's stored rollouts and held-out answers again with another verifier
setting, and say what would change (`flywheel reverify RUN --set verify.compare=exact`).

Per round, the rollouts and problems the round's verify stage read are judged again by the
verify stage's own computation (tasks/verify.py `stream_verdicts`, with the round's canaries
drawn again from their seed), and the held-out answers its promote stage compared (the
candidate's and the incumbent's `evals`) by `Domain.judge` as evaluate judges them
(`rejudged_evals`), so every reward still comes from the one judging entry point. The new
verdicts and evals are a dataset of their own,

    <data-root>/runs/<run_id>/reverify/<fingerprint12>/verdicts.parquet, evals.parquet

whose fingerprint hashes the verify settings (the run's, with the `--set` overrides), the
canaries' seed, the fingerprints of the files judged and the judging code's versions. The
catalog records each file as a `datasets` row of stage `reverify` (storage/catalog/reverify.py),
never a `stages` row: the run's own files, stage rows, status and audit views stay as they were.
The same setting again finds its files recorded and intact and reuses them instead of judging
again. With no override the re-judging must reproduce the stored verdicts byte for byte: zero
flips is the check that the verification path holds (a reward is data: same completion, same
reward).

What would change, one record per round (`--json` prints these keys):

    {"round": 1, "fingerprint": "3f2a...", "path": "runs/demo/reverify/3f2a9c1b0d4e",
     "reused": false, "verdicts": 256, "flipped": 9, "reward_up": 2, "reward_down": 7,
     "to_unjudged": 0, "to_judged": 0,
     "examples": [{"rollout_id": "c3..", "answer_before": "0.5", "answer_after": "0.5",
                   "label": "1/2", "reward_before": 1.0, "reward_after": 0.0,
                   "method_after": "reference"}],
     "train_rows_before": 96, "train_rows_after": 90, "train_rows_gained": 1,
     "train_rows_lost": 7, "train_rows_changed": 3,
     "candidate_accuracy_before": 0.242, "candidate_accuracy_after": 0.233,
     "incumbent_accuracy_before": 0.2, "incumbent_accuracy_after": 0.2,
     "promoted_before": true, "promoted_after": true, "promotion_flipped": false,
     "decision_before": "accuracy 0.242 >= 0.200 - 0.000",
     "decision_after": "accuracy 0.233 >= 0.200 - 0.000",
     "alarms_before": [], "alarms_after": [],
     "verifier_before": {"canary_negatives": 30, "canary_positives": 2,
                         "verifier_false_positive_rate": 0.0, ..., "unjudged": 0.0},
     "verifier_after": {..., "label_reward_precision": 0.477, "label_reward_recall": 0.802}}

`reward_up` / `reward_down`: judged both times, the reward rose (0 -> 1) or fell (1 -> 0; a
partial credit counts by its direction); `to_unjudged` / `to_judged`: a reward became None (with
its reason in `method`) or came back; `verdicts` counts every verdict of the file, the canaries'
included. The training rows are the curate stage's computation (tasks/curate.py `curate_round`)
run in memory on the new verdicts with the run's `[curate]` settings, compared by `train_row_id`
with the stored ones (`changed`: same id, other content, e.g. a reweighted proposer row). The
decisions are tasks/promote.py's `promotion_decision` under the run's `[promote]` config over
the stored and over the re-judged evals, then its `with_alarms`: the alarms (tasks/alarms.py)
read the run's metrics, and after re-judging the re-judged rounds' verify metrics, curate
metrics and candidate accuracy in their place, so an alarm that blocked a promotion can clear
and one can fire (`alarms_before` / `alarms_after`: the fired ones); a round whose new verdicts
leave no training row would have no candidate ("no training rows"), and one that had none
before but gains rows would train a candidate reverify cannot evaluate (`promoted_after` null).
With an LLM judge (`verify.compare = "judge"`) the judge is first given the round's stored
judgements (tasks/judgements.py): the same judge asks nothing again, and the record's
`judge_calls`, `judge_prompts`, `judge_reply_tokens`, `judge_seconds` and `judge_reused` say
what the re-judging cost. `verifier_before` / `_after`: the round's verifier figures as verify
records them (tasks/verify.py `verify_metrics`: the canaries' false-positive and false-negative
rates with their Wilson intervals, the majority labels' reward precision and recall, the
unjudged counts), so `--set verify.labels=majority` measures what majority votes would have
got wrong. Fields a round cannot fill (no curate or promote stage yet) are null. Departure:
each round is judged against the incumbent the run had; a flipped promotion would have changed
the later rounds' models, which re-judging cannot show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from configs import AlarmsConfig, PromoteConfig, ScaleConfig
from configs.settings import WarmupCurateSettings, WarmupVerifySettings
from domains import Domain, get_domain
from domains.base import Problem, problem_row
from domains.judge import ModelJudge, incumbent_judged
from domains.judge_rows import model_judge_of, remember_stored
from storage.catalog import Catalog
from storage.catalog.reverify import (
    current_stages,
    record_reverified,
    reverified_datasets,
)
from storage.datasets import read_rows, write_atomic
from storage.fingerprint import row_id
from storage.paths import run_folder
from storage.recovery import check_recorded
from storage.runs import checkpoint_path
from tasks import evaluate, verify
from tasks.alarms import Alarm, Metrics, round_alarms
from tasks.context import Checkpoint
from tasks.curate import curate_round
from tasks.evaluate import accuracy, is_correct
from tasks.promote import NO_TRAINING_ROWS, promotion_decision, with_alarms
from tasks.stage import StageOutput, settings_fingerprint
from tasks.verify import canaries_of, stream_verdicts, verify_metrics

VERSION = 1
EXAMPLES = 3  # flipped verdicts shown per round
TRAIN_CONTENT = ["role", "prompt", "completion", "rejected", "weight", "problem"]
# verify's metrics that say how well it judged (`verifier_figures`)
VERIFIER_FIGURES = ("verifier_false_", "canary_", "label_reward_", "unjudged")


class ReverifyError(ValueError):
    """A run or round that cannot be re-judged; the message is one line with the fix."""


@dataclass(frozen=True)
class RoundSettings:
    """A round's settings for re-judging: the verify settings to judge with (the run's, with the
    overrides; `WarmupVerifySettings` in round 0), the run's own curate, promote and alarms
    settings to recompute its choices with, and the seed its canaries were drawn from
    (tasks/verify.py: `stage_seed(run seed, CANARY_STREAM, round)`)."""

    verify: WarmupVerifySettings
    curate: WarmupCurateSettings
    promote: PromoteConfig
    alarms: AlarmsConfig
    canary_seed: int
    correct_threshold: float  # evaluate.correct_threshold: a re-judged held-out answer's bar


@dataclass(frozen=True)
class RoundInputs:
    """What a round's verify, curate and promote stages read and wrote, as the run recorded
    them; `curated` and the evals are None where the round has not reached that stage (and
    `candidate_evals` where it trained no candidate)."""

    round: int
    problems: StageOutput
    rollouts: StageOutput
    verdicts: StageOutput
    curated: StageOutput | None
    candidate_evals: StageOutput | None
    incumbent_evals: StageOutput | None
    # the rationalize stage's hinted answers the curate stage read (`rationalize_with = "hint"`):
    # reused as they were judged, never sampled again
    hinted: StageOutput | None = None
    # the incumbent that judged the round's answers (`[verify.judge] incumbent = true`), else None
    judge: Checkpoint | None = None


def stored_output(catalog: Catalog, run_id: str, stage: dict[str, Any], name: str,
                  round_index: int) -> StageOutput:
    """The recorded, intact outputs of a completed stage (`stage`: a `current_stages` entry or
    {"fingerprint": ...}); a missing or damaged file is a ReverifyError naming it."""
    recorded = catalog.completed_datasets(run_id, stage["fingerprint"])
    damage = (check_recorded(recorded) if recorded
              else (name, "no completed stage with its fingerprint is recorded"))
    if damage is not None:
        msg = (f"round {round_index}: the {name} stage's output {damage[0]}: {damage[1]}; "
               f"`flywheel resume {run_id}` recomputes it")
        raise ReverifyError(msg)
    return StageOutput(name, round_index, stage["fingerprint"],
                       {kind: Path(info["path"]) for kind, info in recorded.items()}, True)


def round_inputs(catalog: Catalog, run_id: str, round_index: int,
                 stages: dict[tuple[int, str], dict[str, Any]]) -> RoundInputs | None:
    """The round's recorded inputs (see `RoundInputs`); None when it has no completed verify
    stage. A curate or promote stage that read other files than these is left out."""
    verified = stages.get((round_index, "verify"))
    if verified is None:
        return None

    def output(name: str, fingerprint: str) -> StageOutput:
        return stored_output(catalog, run_id, {"fingerprint": fingerprint}, name, round_index)

    problems = output("synthesize", verified["inputs"]["problems"])
    rollouts = output("rollout", verified["inputs"]["rollouts"])
    verdicts = stored_output(catalog, run_id, verified, "verify", round_index)
    curate = stages.get((round_index, "curate"))
    curated = (stored_output(catalog, run_id, curate, "curate", round_index)
               if curate and curate["inputs"].get("verdicts") == verdicts.fingerprint else None)
    promote = stages.get((round_index, "promote"))
    evals = promote["inputs"] if promote and curated is not None else {}
    candidate, incumbent = evals.get("candidate_evals"), evals.get("incumbent_evals")
    hinted = curate["inputs"].get("rationales") if curated is not None else None
    return RoundInputs(round_index, problems, rollouts, verdicts, curated,
                       output("evaluate", candidate) if candidate else None,
                       output("evaluate", incumbent) if incumbent else None,
                       output("rationalize", hinted) if hinted else None,
                       judging_incumbent(catalog, run_id, verified["inputs"].get("judge")))


def judging_incumbent(catalog: Catalog, run_id: str, fingerprint: str | None
                      ) -> Checkpoint | None:
    """The checkpoint `fingerprint` that judged a round (its verify stage's `judge` input),
    found where the run recorded it; None when the round's judge was the fixed one."""
    if fingerprint is None:
        return None
    folder = checkpoint_path(catalog, run_id, fingerprint, catalog.run_config_json(run_id))
    if folder is None or not Path(folder).is_dir():
        msg = (f"run {run_id}: the incumbent {fingerprint[:12]} that judged a round "
               f"([verify.judge] incumbent = true) has no folder any more ({folder}); reverify "
               "needs it to judge again")
        raise ReverifyError(msg)
    return Checkpoint(Path(folder), fingerprint)


def reverify_fingerprint(settings: WarmupVerifySettings, canary_seed: int,
                         inputs: RoundInputs) -> str:
    """The re-judging's fingerprint: the verify settings, the canaries' seed (the only random
    draw of verification), the files judged and the versions of the code that judges them
    (verify's and evaluate's VERSION)."""
    judged = {"problems": inputs.problems.fingerprint, "rollouts": inputs.rollouts.fingerprint,
              "judged_by": f"verify {verify.VERSION}, evaluate {evaluate.VERSION}"}
    for name in ("candidate_evals", "incumbent_evals"):
        if (evals := getattr(inputs, name)) is not None:
            judged[name] = evals.fingerprint
    return settings_fingerprint("reverify", VERSION, settings, canary_seed, judged)


def reverify_dir(data_root: Path, run_id: str, fingerprint: str) -> Path:
    """`<data-root>/runs/<run_id>/reverify/<fingerprint12>`: a re-judging's files."""
    return run_folder(data_root, run_id) / "reverify" / fingerprint[:12]


def rejudged_evals(domain: Domain, rows: list[dict[str, Any]], items: list[Problem],
                   correct_threshold: float) -> list[dict[str, Any]]:
    """Stored evals rows judged again as evaluate judges its answers (tasks/evaluate.py
    `eval_rows`): each completion by `domain.judge` against its held-out item's problem row
    (matched by `item_id`); answer, reward, method and correct are new, the rest is kept."""
    by_item = {row_id("heldout", domain.name, p.text): problem_row(p) for p in items}
    unknown = [r["item_id"] for r in rows if r["item_id"] not in by_item]
    if unknown:
        msg = (f"held-out item {unknown[0]} is not in the domain's held-out set any more (its "
               "files or [domain] changed since the run); reverify needs the run's held-out set")
        raise ReverifyError(msg)
    judged = domain.judge([r["completion"] for r in rows], [by_item[r["item_id"]] for r in rows])
    return [{**r, "answer": domain.extract(r["completion"]), "reward": j.reward,
             "method": "reference" if j.reward is not None else j.reason,
             "correct": is_correct(j.reward, correct_threshold)}
            for r, j in zip(rows, judged, strict=True)]


def rejudge(catalog: Catalog, run_id: str, inputs: RoundInputs, settings: RoundSettings,
            domain: Domain, canaries: pl.DataFrame | None,
            round_judge: Domain) -> tuple[str, dict[str, Path], bool]:
    """(fingerprint, kind -> file, reused) of the round's re-judging: the recorded files when
    intact, else verdicts (judged by `round_judge`, `judging_domain`) and evals (by `domain`,
    the fixed judge) judged again, written, then recorded (the rows last); `canaries`: the
    round's (`canaries_of`)."""
    verify_settings, problem_file = settings.verify, inputs.problems.path("problems")
    fingerprint = reverify_fingerprint(verify_settings, settings.canary_seed, inputs)
    recorded = reverified_datasets(catalog, run_id, fingerprint)
    if recorded is not None and check_recorded(recorded) is None:
        return fingerprint, {kind: Path(info["path"]) for kind, info in recorded.items()}, True
    folder = reverify_dir(catalog.data_root, run_id, fingerprint)
    for judge in round_judges(domain, round_judge):  # stored replies: the judges ask nothing
        for output in (inputs.verdicts, inputs.candidate_evals, inputs.incumbent_evals):
            remember_stored(judge, output.paths.get("judgements") if output else None)
    outputs = list(stream_verdicts(  # one in-process shard: the bytes do not depend on [scale]
        round_judge, ScaleConfig(), inputs.rollouts.path("rollouts"), problem_file,
        verify_settings.labels, folder / "verdicts.parquet", canaries=canaries).values())
    stored = [read_rows(e.path("evals")) for e in (inputs.candidate_evals, inputs.incumbent_evals)
              if e is not None]
    if stored:
        items = domain.heldout(verify_settings.domain.domain.heldout_per_level)
        rows = [row for part in stored
                for row in rejudged_evals(domain, part, items, settings.correct_threshold)]
        outputs.append(write_atomic("evals", rows, folder / "evals.parquet"))
    record_reverified(catalog, run_id=run_id, round_index=inputs.round, fingerprint=fingerprint,
                      outputs=outputs)
    return fingerprint, {out.kind: out.path for out in outputs}, False


def judging_domain(domain: Domain, inputs: RoundInputs) -> Domain:
    """The domain that judges a round's own answers: `domain` judged by the round's incumbent
    where one judged them (`RoundInputs.judge`), else `domain`; held-out answers: `domain`."""
    if inputs.judge is None:
        return domain
    return incumbent_judged(domain, inputs.judge.path, inputs.judge.fingerprint)


def round_judges(domain: Domain, round_judge: Domain) -> list[ModelJudge]:
    """The LLM judges re-judging a round, each once: the fixed one of `domain` (held-out
    answers) and the round's own (`judging_domain`; the same one unless the incumbent judged)."""
    judges = (model_judge_of(domain), model_judge_of(round_judge))
    return list({id(j): j for j in judges if j is not None}.values())


def verdict_changes(before: Path, after: Path, examples: int = EXAMPLES) -> dict[str, Any]:
    """How the verdicts of `after` differ from those of `before`, rollout by rollout (see the
    module docstring): counts per kind of change and the first `examples` changed verdicts."""
    columns = ["rollout_id", "answer", "label", "reward", "method"]
    joined = pl.read_parquet(before, columns=columns).join(
        pl.read_parquet(after, columns=columns), on="rollout_id", how="left", suffix="_after",
        maintain_order="left")
    old, new = pl.col("reward"), pl.col("reward_after")
    both = old.is_not_null() & new.is_not_null()
    counts = joined.select(
        (both & (new > old)).sum().alias("reward_up"),
        (both & (new < old)).sum().alias("reward_down"),
        (old.is_not_null() & new.is_null()).sum().alias("to_unjudged"),
        (old.is_null() & new.is_not_null()).sum().alias("to_judged")).row(0, named=True)
    changed = joined.filter(old.ne_missing(new)).head(examples).select(
        "rollout_id", pl.col("answer").alias("answer_before"), "answer_after",
        pl.col("label_after").alias("label"), pl.col("reward").alias("reward_before"),
        "reward_after", "method_after")
    return {"verdicts": len(joined), "flipped": sum(counts.values()), **counts,
            "examples": changed.to_dicts()}


def train_row_changes(before: Path, after: pl.DataFrame) -> dict[str, int]:
    """The stored training rows (`before`) against those of the new verdicts (`after`): totals,
    ids gained and lost, and ids in both whose content differs."""
    old = pl.read_parquet(before, columns=["train_row_id", *TRAIN_CONTENT])
    old_ids, new_ids = Counter(old["train_row_id"]), Counter(after["train_row_id"])
    both = old.unique("train_row_id", keep="first", maintain_order=True).join(
        after.select("train_row_id", *TRAIN_CONTENT).unique("train_row_id", keep="first"),
        on="train_row_id", how="inner", suffix="_after")
    differs = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}_after"))
                                 for c in TRAIN_CONTENT])
    return {"train_rows_before": len(old), "train_rows_after": len(after),
            "train_rows_gained": sum((new_ids - old_ids).values()),
            "train_rows_lost": sum((old_ids - new_ids).values()),
            "train_rows_changed": int(both.select(differs.sum()).item())}


def promotion_changes(before: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None,
                      after: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None,
                      cfg: PromoteConfig, alarms_cfg: AlarmsConfig,
                      alarms: tuple[list[Alarm], list[Alarm]], *,
                      trainable_after: int) -> dict[str, Any]:
    """Accuracies and the promotion decision over the stored and the re-judged evals, each a
    (candidate rows, incumbent rows) pair (candidate rows empty: the round had no candidate),
    with the round's alarms over the stored and over the re-judged metrics (`alarms`:
    `round_alarms` of each; those `alarms_cfg.block` names reject as promote's do);
    `trainable_after`: the new verdicts' training rows of weight > 0 (none: no candidate)."""
    out: dict[str, Any] = {}
    for when, evals, fired in (("before", before, alarms[0]), ("after", after, alarms[1])):
        candidate, incumbent = evals if evals is not None else ([], [])
        out[f"candidate_accuracy_{when}"] = accuracy(candidate)["accuracy"] if candidate else None
        out[f"incumbent_accuracy_{when}"] = accuracy(incumbent)["accuracy"] if incumbent else None
        decision = (with_alarms(promotion_decision(candidate, incumbent, cfg), fired, alarms_cfg)
                    if candidate and incumbent else None)
        out[f"promoted_{when}"] = None if decision is None else decision.promoted
        out[f"decision_{when}"] = None if decision is None else decision.reason
        out[f"alarms_{when}"] = [a.name for a in fired if a.fired]
    had_candidate = before is not None and bool(before[0])
    if before is not None and not had_candidate:
        out.update(promoted_before=False, decision_before=NO_TRAINING_ROWS)
    if before is not None and trainable_after == 0:
        out.update(promoted_after=False, decision_after=NO_TRAINING_ROWS)
    elif before is not None and not had_candidate:
        out["decision_after"] = (f"{trainable_after} training rows: a candidate would be "
                                 "trained, which reverify does not do")
    flipped = None if out["promoted_after"] is None or out["promoted_before"] is None else (
        out["promoted_after"] != out["promoted_before"])
    return {**out, "promotion_flipped": flipped}


def verifier_figures(metrics: Metrics, round_index: int) -> dict[str, float]:
    """The round's verifier figures among `metrics`: the canaries' error rates with their
    intervals and counts, the majority labels' reward precision and recall, and the share of
    verdicts left unjudged (tasks/verify.py `verify_metrics`)."""
    return {name: value for (r, stage, name), value in sorted(metrics.items())
            if r == round_index and stage == "verify" and name.startswith(VERIFIER_FIGURES)}


def rejudged_metrics(stored: Metrics, round_index: int, verify_metrics: dict[str, float],
                     curate_metrics: dict[str, float] | None,
                     candidate_accuracy: float | None) -> Metrics:
    """`stored` with the round's verify metrics, its curate metrics (when recomputed) and its
    candidate's held-out accuracy replaced by the re-judged ones: what the alarms read."""
    replaced = {"verify"} | ({"curate"} if curate_metrics is not None else set())
    out = {key: value for key, value in stored.items()
           if key[0] != round_index or key[1] not in replaced}
    out.update({(round_index, "verify", name): value for name, value in verify_metrics.items()})
    out.update({(round_index, "curate", name): value
                for name, value in (curate_metrics or {}).items()})
    if candidate_accuracy is not None:
        out[(round_index, "evaluate", "accuracy")] = candidate_accuracy
    return out


def reverify_round(catalog: Catalog, run_id: str, inputs: RoundInputs, settings: RoundSettings,
                   domain: Domain, stored: Metrics,
                   rejudged: Metrics) -> tuple[dict[str, Any], Metrics]:
    """One round's record (module docstring), re-judged (or reused) then compared, and the
    metrics with its re-judged ones. `stored`: the run's metrics of rounds 0..r; `rejudged`: the
    same with the earlier re-judged rounds' replaced (`rejudged_metrics`; the alarms' trends
    read them)."""
    r = inputs.round
    canaries = canaries_of(domain, settings.verify, settings.canary_seed,
                           inputs.problems.path("problems"))
    round_judge = judging_domain(domain, inputs)  # one instance: it holds the stored replies
    judges = round_judges(domain, round_judge)
    spent_before = [replace(j.cost) for j in judges]
    fingerprint, files, reused = rejudge(catalog, run_id, inputs, settings, domain, canaries,
                                         round_judge)
    record: dict[str, Any] = {
        "round": r, "fingerprint": fingerprint,
        "path": catalog.relative(files["verdicts"].parent), "reused": reused,
        **verdict_changes(inputs.verdicts.path("verdicts"), files["verdicts"])}
    for judge, before in zip(judges, spent_before, strict=True):  # 0 calls: stored replies
        for name, spent in judge.cost.since(before).items():
            record[name] = record.get(name, 0) + spent
    trainable_after, curate_metrics = 0, None
    if inputs.curated is not None:
        verdicts = StageOutput("reverify", r, fingerprint, {"verdicts": files["verdicts"]}, True)
        curated = curate_round(round_judge, settings.curate, inputs.problems, inputs.rollouts,
                               verdicts, inputs.hinted)
        rows, curate_metrics = curated.datasets["train_rows"], curated.metrics
        record.update(train_row_changes(inputs.curated.path("train_rows"), rows))
        trainable_after = int((rows["weight"] > 0).sum())
    else:
        record.update(dict.fromkeys(("train_rows_before", "train_rows_after",
                                     "train_rows_gained", "train_rows_lost",
                                     "train_rows_changed")))
    before = after = None
    if inputs.incumbent_evals is not None:
        candidate = (read_rows(inputs.candidate_evals.path("evals"))
                     if inputs.candidate_evals is not None else [])
        before = (candidate, read_rows(inputs.incumbent_evals.path("evals")))
        judged = read_rows(files["evals"])
        after = (judged[:len(candidate)], judged[len(candidate):])
    new_verify = verify_metrics(round_judge, settings.verify, inputs.rollouts.path("rollouts"),
                                inputs.problems.path("problems"), files["verdicts"], canaries)
    rejudged = rejudged_metrics(
        rejudged, r, new_verify, curate_metrics,
        accuracy(after[0])["accuracy"] if after is not None and after[0] else None)
    record.update(verifier_before=verifier_figures(stored, r),
                  verifier_after=verifier_figures(rejudged, r))
    alarms = (round_alarms(stored, r, settings.alarms), round_alarms(rejudged, r, settings.alarms))
    return {**record, **promotion_changes(before, after, settings.promote, settings.alarms,
                                          alarms, trainable_after=trainable_after)}, rejudged


def reverify_run(data_root: Path, run_id: str, settings: Callable[[int], RoundSettings], *,
                 round_index: int | None = None) -> list[dict[str, Any]]:
    """Re-judge every verified round of a run (or `round_index` only) and compare.

    Parameters
    ----------
    data_root
        The data root; its catalog must exist.
    run_id
        The run.
    settings
        A round's index -> its `RoundSettings`.
    round_index
        Only this round.

    Returns
    -------
    One record per re-judged round, in round order (the module docstring shows one).

    Raises
    ------
    ReverifyError
        No round (or not `round_index`) has a completed verify stage, a recorded input is
        missing or damaged, the domain cannot be built, or its held-out set changed.
    """
    catalog = Catalog(data_root)
    stages = current_stages(catalog, run_id)
    verified = sorted(r for r, stage in stages if stage == "verify")
    wanted = verified if round_index is None else [round_index]
    if not verified or round_index is not None and round_index not in verified:
        which = "no round" if round_index is None else f"round {round_index}"
        done = ", ".join(map(str, verified)) or "none yet"
        msg = (f"run {run_id}: {which} has no completed verify stage to re-judge (verified "
               f"rounds: {done}; `flywheel status {run_id}` shows how far it got)")
        raise ReverifyError(msg)
    verify_settings = settings(wanted[0]).verify  # the domain's part is every round's
    try:
        domain = get_domain(verify_settings.domain.domain.name,
                            verify_settings.domain.domain_config())
    except ValueError as exc:  # e.g. a dataset domain whose files moved
        raise ReverifyError(f"run {run_id}: its domain cannot be built: {exc}") from None
    stored = catalog.round_metrics(run_id, wanted[-1])
    rejudged, records = stored, []  # the alarms' trends read the rounds re-judged before
    for r in wanted:
        upto = {key: value for key, value in stored.items() if key[0] <= r}
        record, rejudged = reverify_round(catalog, run_id, round_inputs(catalog, run_id, r, stages),
                                          settings(r), domain, upto, rejudged)
        records.append(record)
    return records
