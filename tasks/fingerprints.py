"""Every stage's fingerprint of a run's first rounds, computed from the config alone.

The stages compute their fingerprints as they run (tasks/stage.py `run_stage`); this computes
the same ones without running anything, each stage's inputs chained through as the round flow
(flows/run.py) chains them, every candidate promoted and every round with training rows (and,
beside a separate proposer, with proposer rows):

    stage_fingerprints(load_config(None), rounds=1)
    -> {("base", 0): "3f2a...", ("baseline", 0): ..., ("synthesize", 0): ..., ...,
        ("promote", 1): ...}

It tells which stages a config change reruns (tests/tasks/test_stage_settings.py).
"""

from __future__ import annotations

from pathlib import Path

from configs import RunConfig
from configs.domain import incumbent_judges
from configs.settings import asks_hints, stage_settings
from storage.seeds import stage_seed
from storage.train_stages import TRAIN_STAGES
from tasks import (
    curate,
    evaluate,
    incumbent,
    promote,
    rationalize,
    rollout,
    synthesize,
    train,
    verify,
)
from tasks.context import Checkpoint
from tasks.evaluate import Evaluation
from tasks.stage import StageOutput, settings_fingerprint

VERSIONS = {"base": incumbent.VERSION, "baseline": evaluate.VERSION,
            "synthesize": synthesize.VERSION, "rollout": rollout.VERSION,
            "verify": verify.VERSION, "rationalize": rationalize.VERSION,
            "curate": curate.VERSION, "train": train.VERSION,
            "evaluate": evaluate.VERSION, "promote": promote.VERSION,
            "proposer-base": incumbent.VERSION, train.PROPOSER_STAGE: train.VERSION}


Stage = tuple[str, int]  # (stage, round)


def stage_fingerprints(config: RunConfig, *, rounds: int = 1) -> dict[Stage, str]:
    """(stage, round) -> fingerprint for the base model, its baseline and rounds 0..`rounds`.

    Parameters
    ----------
    config
        The run's config (`model.path` set: that folder's checkpoint fingerprint is the base).
    rounds
        The last round computed.

    Returns
    -------
    dict
        One fingerprint per stage execution, as `run_stage` would compute it.
    """
    return stage_graph(config, rounds=rounds)[0]


def stage_graph(config: RunConfig, *, rounds: int = 1
                ) -> tuple[dict[Stage, str], dict[Stage, set[Stage]]]:
    """`stage_fingerprints` and, per stage, the stages whose outputs it reads (its inputs)."""
    out: dict[Stage, str] = {}
    reads: dict[Stage, set[Stage]] = {}

    def run(stage: str, round_index: int, inputs: dict[str, str]) -> StageOutput:
        dtype = (train.train_settings(config, round_index).dtype
                 if stage in TRAIN_STAGES else None)
        settings = stage_settings(config, stage, round_index, dtype=dtype)
        producers = {fingerprint: key for key, fingerprint in out.items()}
        reads[stage, round_index] = {producers[f] for f in inputs.values() if f in producers}
        out[stage, round_index] = settings_fingerprint(
            stage, VERSIONS[stage], settings, stage_seed(config.seed, stage, round_index), inputs)
        return StageOutput(stage, round_index, out[stage, round_index], {}, skipped=False)

    if config.model.path is None:
        base = Checkpoint(Path(), run("base", 0, {}).fingerprint)
    else:
        base = incumbent.local_checkpoint(config.model)
    champion = base
    proposer = None  # [proposer] separate: the proposer's checkpoint, else the champion proposes
    if config.proposer.separate:
        proposer = (Checkpoint(Path(), run("proposer-base", 0, {}).fingerprint)
                    if config.proposer.model.path is None
                    else incumbent.local_checkpoint(config.proposer.model, "proposer.model"))
    champion_eval = evaluation(run("baseline", 0, {"checkpoint": base.fingerprint}))
    earlier_problems: list[StageOutput] = []
    earlier_curated: list[StageOutput] = []
    first = config.warmup.first_round
    if first:  # [warmup] mode = "none": round 0 only decides
        run("promote", 0, promote.promote_inputs(champion, champion_eval,
                                                 without_candidate=incumbent.NO_WARMUP))
    for r in range(first, rounds + 1):
        settings = stage_settings(config, "synthesize", r)
        curricula = synthesize.replayed_curricula(settings, earlier_curated)
        problems = run("synthesize", r, synthesize.synthesize_inputs(
            proposer or champion, earlier_problems, curricula, settings.benchmarks))
        rollouts = run("rollout", r, rollout.rollout_inputs(champion, problems))
        judge = champion if incumbent_judges(config.verify) else None
        verdicts = run("verify", r, verify.verify_inputs(problems, rollouts, judge))
        hinted = (run("rationalize", r, rationalize.rationalize_inputs(champion, problems,
                                                                       verdicts))
                  if asks_hints(config, r) else None)
        curated = run("curate", r, curate.curate_inputs(problems, rollouts, verdicts, hinted))
        if proposer is not None:
            proposer = Checkpoint(Path(), run(train.PROPOSER_STAGE, r, train.train_inputs(
                train.PROPOSER_STAGE, champion, curated, earlier_curated, proposer)).fingerprint)
        trained = run("train", r, train.train_inputs("train", champion, curated,
                                                     earlier_curated))
        candidate = Checkpoint(Path(), trained.fingerprint)
        candidate_eval = evaluation(run("evaluate", r, {"checkpoint": candidate.fingerprint}))
        run("promote", r, promote.promote_inputs(champion, champion_eval, candidate,
                                                 candidate_eval))
        champion, champion_eval = candidate, candidate_eval
        earlier_problems.append(problems)
        earlier_curated.append(curated)
    return out, reads


def evaluation(out: StageOutput) -> Evaluation:
    """An evaluation known by its fingerprint only (what the stages downstream of it read)."""
    return Evaluation({}, Path(), out.fingerprint)
