"""The round flow and the multi-round flywheel flow. Flows only sequence tasks.

Round 0 is the warm-up (seed problems from the domain generator, SFT on references); rounds
1..N are self-improvement rounds. Every stage is skipped when its fingerprint is already done
in the catalog, so running the same flow again resumes it.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from pydantic import BaseModel, ConfigDict

from configs import RunConfig
from flows.runners import check_task_runner, scale_session
from tasks.context import Checkpoint, RunContext
from tasks.curate import curate
from tasks.evaluate import Evaluation, evaluate
from tasks.incumbent import base_model
from tasks.promote import NO_TRAINING_ROWS, promote
from tasks.rollout import rollout
from tasks.stage import StageOutput
from tasks.synthesize import synthesize
from tasks.train import train
from tasks.verify import verify


class RunSpec(BaseModel):
    """Everything a flow needs to rebuild its run context; plain data, so Prefect can record it."""

    model_config = ConfigDict(frozen=True)
    data_root: str
    run_id: str
    config: RunConfig

    def context(self) -> RunContext:
        return RunContext(data_root=Path(self.data_root), run_id=self.run_id, config=self.config)


class RoundOutcome(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    incumbent: Checkpoint
    incumbent_eval: Evaluation
    problems: StageOutput
    curated: StageOutput


def trainable_rows(curated: StageOutput) -> int:
    """The round's training rows with weight > 0 (what the trainer would train on)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    weights = pq.read_table(curated.path("train_rows"), columns=["weight"])["weight"]
    return int(pc.sum(pc.greater(weights, 0.0)).as_py() or 0)


def publish_round_artifact(spec: RunSpec, round_index: int) -> None:
    """A markdown artifact with the round's funnel, drops and metrics, for the Prefect UI."""
    import re

    from prefect.artifacts import create_markdown_artifact

    from storage.audit.markdown import round_markdown
    from storage.audit.snapshot import open_run

    con = open_run(spec.data_root, spec.run_id)
    try:
        markdown = round_markdown(con, spec.run_id, round_index)
    finally:
        con.close()
    slug = re.sub(r"[^a-z0-9-]+", "-", spec.run_id.lower()).strip("-")
    create_markdown_artifact(markdown=markdown, key=f"flywheel-{slug}-round-{round_index}",
                             description=f"run {spec.run_id}, round {round_index}: "
                                         "funnel and metrics")


@flow(name="flywheel-round", validate_parameters=False)
def round_flow(spec: RunSpec, round_index: int, incumbent: Checkpoint, incumbent_eval: Evaluation,
               earlier_problems: list[StageOutput],
               earlier_curated: list[StageOutput]) -> RoundOutcome:
    ctx = spec.context()
    problems = synthesize(ctx, round_index, incumbent, earlier_problems, earlier_curated)
    rollouts = rollout(ctx, round_index, incumbent, problems)
    verdicts = verify(ctx, round_index, problems, rollouts)
    curated = curate(ctx, round_index, problems, rollouts, verdicts)
    if trainable_rows(curated) == 0:  # every problem dropped: no candidate, the incumbent stays
        winner = promote(ctx, round_index, incumbent, incumbent_eval,
                         without_candidate=NO_TRAINING_ROWS)
        winner_eval = incumbent_eval
    else:
        candidate = train(ctx, round_index, incumbent, curated, earlier_curated)
        candidate_eval = evaluate(ctx, round_index, candidate)
        winner = promote(ctx, round_index, incumbent, incumbent_eval, candidate, candidate_eval)
        winner_eval = candidate_eval if winner == candidate else incumbent_eval
    publish_round_artifact(spec, round_index)
    return RoundOutcome(
        incumbent=winner,
        incumbent_eval=winner_eval,
        problems=problems,
        curated=curated,
    )


@flow(name="flywheel", validate_parameters=False)
def flywheel_flow(spec: RunSpec) -> Checkpoint:
    ctx = spec.context()
    check_task_runner(spec.config.scale)  # e.g. Ray without a Prefect server: before anything runs
    ctx.catalog.ensure_run(spec.run_id, spec.config.model_dump_json())
    try:
        with scale_session(spec.config.scale) as runner:  # [scale]: rounds' shards on Ray workers
            one_round = (round_flow if runner is None
                         else round_flow.with_options(task_runner=runner))
            incumbent = base_model(ctx)
            incumbent_eval = evaluate(ctx, 0, incumbent, stage="baseline")
            problems: list[StageOutput] = []
            curated: list[StageOutput] = []
            for round_index in range(spec.config.rounds + 1):
                outcome = one_round(spec, round_index, incumbent, incumbent_eval, problems, curated)
                incumbent, incumbent_eval = outcome.incumbent, outcome.incumbent_eval
                problems.append(outcome.problems)
                curated.append(outcome.curated)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        try:
            ctx.catalog.set_run_status(spec.run_id, status)
        except Exception as record_exc:  # noqa: BLE001 - e.g. the disk is full: keep the cause
            exc.add_note(f"(the run's status could not be recorded: {record_exc})")
        raise
    ctx.catalog.set_run_status(spec.run_id, "completed")
    return incumbent
