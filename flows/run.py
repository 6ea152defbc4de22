"""The round flow and the multi-round flywheel flow. Flows only sequence tasks.

Round 0 is the warm-up (seed problems from the domain generator, SFT on their references or,
under `[warmup] mode = "self_samples"`, on the model's own verified answers); rounds 1..N are
self-improvement rounds. Under `mode = "none"` round 0 runs no stage of its own: its promote
records the base model as the incumbent without a candidate (`NO_WARMUP`), so every reader of
the `rounds` table sees a decided round 0, and round 1 starts from the model as it is. Under
`[proposer] separate = true` a second model writes the problems: synthesize samples the round's
proposer, the solver's train stage trains the solver rows only, and `train-proposer` trains the
proposer rows into the next round's proposer (`proposer-base` is round 0's). Every
stage is skipped when its fingerprint is already done in the catalog, so running the same flow
again resumes it; a completed run with nothing to recompute is resumed without a flow run
(`resume_without_work`: the same round bodies, each stage only checked).

What the Prefect UI shows of a run `demo` (`run_flywheel`):

    flow runs   demo (flywheel), demo-round-0, demo-round-1, ... (flywheel-round)
    task runs   base-model-r0, baseline-r0, synthesize-r1, rollout-r1, ..., promote-r1
    tags        run:demo on the flow runs; their task runs are listed under them
    logs        every `flywheel` record made inside a flow or task run (the stages' start and
                end lines, progress lines, notices), besides Prefect's own
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from logging.handlers import BufferingHandler
from pathlib import Path
from typing import Any

from prefect import flow, tags
from prefect.logging.handlers import APILogHandler
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ConfigDict

from configs import RunConfig
from configs.settings import asks_hints
from flows.runners import check_task_runner, scale_session
from storage.interruption import stop_status
from tasks.context import Checkpoint, RunContext
from tasks.curate import curate
from tasks.evaluate import Evaluation, evaluate
from tasks.incumbent import NO_WARMUP, base_model, proposer_base
from tasks.promote import NO_TRAINING_ROWS, promote
from tasks.rationalize import rationalize
from tasks.rollout import rollout
from tasks.stage import StageNotDone, StageOutput, reuse_only, reusing_only
from tasks.synthesize import synthesize
from tasks.tracking import observed_round
from tasks.train import PROPOSER_STAGE, train, train_proposer, trained_roles
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
    proposer: Checkpoint | None  # the separate proposer of the next round; None: the solver


def run_tag(run_id: str) -> str:
    """The tag every flow and task run of `run_id` carries in Prefect."""
    return f"run:{run_id}"


@contextmanager
def untagged_task_runs() -> Iterator[None]:
    """Task runs created inside carry no tags. Prefect's task engine asks the API for a
    concurrency slot of every tag a task run carries before the task starts, and after a task
    of a few seconds or more that request took about 2 s (bench/round_overhead.py; docs/
    benchmarks.md): the run's tag stays on its flow runs, which list their task runs."""
    from prefect.context import TagsContext

    with TagsContext(current_tags=set()):
        yield


def named(stage_task: Any, stage: str, round_index: int) -> Any:
    """`stage_task` with its task runs named `<stage>-r<round>` (`rollout-r2`) and untagged
    (`untagged_task_runs`): every stage task of a run is called through this, its run context
    `quote`d. Prefect walks every task parameter for upstream results (the UI's edges between
    task runs); the context (the whole run config, the catalog, the domain) is never one, and
    walking it took about 10 ms a task run (bench/round_overhead.py)."""
    if reusing_only():  # resume_without_work: the task's own function, no task run
        return stage_task.fn
    task = stage_task.with_options(task_run_name=f"{stage}-r{round_index}")

    def call(ctx: RunContext, *args: Any, **kwargs: Any) -> Any:
        with untagged_task_runs():
            return task(quote(ctx), *args, **kwargs)

    return call


class FlywheelRecordsToPrefect(APILogHandler):
    """Sends the `flywheel` logger's records made inside a Prefect flow or task run to the
    Prefect API (so a run's stage lines are in its UI logs); records made outside one (the
    CLI's own lines, unit tests) are left to the other handlers."""

    def emit(self, record: logging.LogRecord) -> None:
        from prefect.context import FlowRunContext, TaskRunContext

        if FlowRunContext.get() is None and TaskRunContext.get() is None:
            return
        super().emit(record)


def forward_flywheel_logs() -> None:
    """Attach `FlywheelRecordsToPrefect` to the `flywheel` logger, once per process; a logger
    left at no level of its own (a nightly run's worker, a script) logs from INFO up."""
    logger = logging.getLogger("flywheel")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not any(isinstance(h, FlywheelRecordsToPrefect) for h in logger.handlers):
        handler = FlywheelRecordsToPrefect()
        handler.setLevel(logging.INFO)
        logger.addHandler(handler)


def trainable_rows(curated: StageOutput, roles: str = "both") -> int:
    """The round's training rows of `roles` with weight > 0 (what a train stage would train on;
    tasks/train.py `trained_roles`: both, solver or proposer)."""
    from storage.datasets import read_table

    # plain Python, not pyarrow.compute: its first call imports pandas (0.7 s of a resume)
    table = read_table(curated.path("train_rows"), columns=["weight", "role"])
    return sum(1 for weight, kind in zip(table["weight"].to_pylist(), table["role"].to_pylist(),
                                         strict=True)
               if weight is not None and weight > 0.0 and roles in ("both", kind))


def publish_round_artifact(spec: RunSpec, round_index: int,
                           catalog_before: tuple[Any, ...] | None = None) -> None:
    """A markdown artifact with the round's funnel, drops and metrics, for the Prefect UI.

    `catalog_before`: the catalog's state (`CatalogFile.state`) when the round's flow began.
    A round flow that recorded nothing (every stage found done, as in a resume) publishes none
    when Prefect already holds one under the round's key: the flow that recorded the round
    published it from the same rows (the one case it misses: a run killed between its round's
    last catalog row and this call, over an artifact of an earlier attempt of that round)."""
    import re

    if reusing_only():  # resume_without_work: the completed run published every round's
        return
    from prefect.artifacts import Artifact, create_markdown_artifact

    from storage.audit.markdown import round_markdown
    from storage.audit.snapshot import open_run
    from storage.catalog import Catalog

    slug = re.sub(r"[^a-z0-9-]+", "-", spec.run_id.lower()).strip("-")
    key = f"flywheel-{slug}-round-{round_index}"
    if catalog_before is not None and Catalog(spec.data_root).state() == catalog_before \
            and Artifact.get(key) is not None:
        return
    con = open_run(spec.data_root, spec.run_id)
    try:
        markdown = round_markdown(con, spec.run_id, round_index)
    finally:
        con.close()
    create_markdown_artifact(markdown=markdown, key=key,
                             description=f"run {spec.run_id}, round {round_index}: "
                                         "funnel and metrics")


@flow(name="flywheel-round", validate_parameters=False,
      flow_run_name="{spec.run_id}-round-{round_index}")
def round_flow(spec: RunSpec, round_index: int, incumbent: Checkpoint, incumbent_eval: Evaluation,
               earlier_problems: list[StageOutput], earlier_curated: list[StageOutput],
               proposer: Checkpoint | None = None) -> RoundOutcome:
    ctx, r = spec.context(), round_index
    catalog_before = ctx.catalog.state()
    problems = named(synthesize, "synthesize", r)(ctx, r, proposer or incumbent,
                                                   earlier_problems, earlier_curated)
    rollouts = named(rollout, "rollout", r)(ctx, r, incumbent, problems)
    verdicts = named(verify, "verify", r)(ctx, r, problems, rollouts, incumbent)
    hinted = (named(rationalize, "rationalize", r)(ctx, r, incumbent, problems, verdicts)
              if asks_hints(spec.config, r) else None)
    curated = named(curate, "curate", r)(ctx, r, problems, rollouts, verdicts, hinted)
    separate = proposer is not None
    if separate and trainable_rows(curated, trained_roles(PROPOSER_STAGE,
                                                          separate_proposer=separate)):
        proposer = named(train_proposer, PROPOSER_STAGE, r)(ctx, r, proposer, incumbent,
                                                              curated, earlier_curated)
    # every problem dropped (the solver's rows, beside a separate proposer): the incumbent stays
    if trainable_rows(curated, trained_roles("train", separate_proposer=separate)) == 0:
        winner = named(promote, "promote", r)(ctx, r, incumbent, incumbent_eval,
                                              without_candidate=NO_TRAINING_ROWS)
        winner_eval = incumbent_eval
    else:
        candidate = named(train, "train", r)(ctx, r, incumbent, curated, earlier_curated)
        candidate_eval = named(evaluate, "evaluate", r)(ctx, r, candidate)
        winner = named(promote, "promote", r)(ctx, r, incumbent, incumbent_eval, candidate,
                                              candidate_eval)
        winner_eval = candidate_eval if winner == candidate else incumbent_eval
    publish_round_artifact(spec, round_index, catalog_before)
    return RoundOutcome(
        incumbent=winner,
        incumbent_eval=winner_eval,
        problems=problems,
        curated=curated,
        proposer=proposer,
    )


@flow(name="flywheel", validate_parameters=False, flow_run_name="{spec.run_id}")
def flywheel_flow(spec: RunSpec) -> Checkpoint:
    with tags(run_tag(spec.run_id)):  # the round flows' and the task runs' tag
        return run_rounds(spec)


def run_flywheel(spec: RunSpec) -> Checkpoint:
    """Run `flywheel_flow` tagged `run:<run_id>`, the `flywheel` records forwarded to Prefect."""
    forward_flywheel_logs()
    with tags(run_tag(spec.run_id)):
        return flywheel_flow(spec)


def run_rounds(spec: RunSpec) -> Checkpoint:
    """The flywheel flow's body: the run's status around `every_round`."""
    ctx = spec.context()
    check_task_runner(spec.config.scale)  # e.g. Ray without a Prefect server: before anything runs
    ctx.catalog.ensure_run(spec.run_id, spec.config.model_dump_json())
    try:
        with scale_session(spec.config.scale) as runner:  # [scale]: rounds' shards on Ray workers
            incumbent = every_round(spec, round_flow if runner is None
                                    else round_flow.with_options(task_runner=runner))
    except BaseException as exc:
        try:  # interrupted (SIGINT), terminated (SIGTERM, which Prefect raises as its own)
            ctx.catalog.set_run_status(spec.run_id, stop_status(exc))
        except Exception as record_exc:  # noqa: BLE001 - e.g. the disk is full: keep the cause
            exc.add_note(f"(the run's status could not be recorded: {record_exc})")
        raise
    ctx.catalog.set_run_status(spec.run_id, "completed")
    return incumbent


def every_round(spec: RunSpec, one_round: Any) -> Checkpoint:
    """The base model and its baseline, then every round in turn (`one_round`: the round flow);
    returns the last round's incumbent."""
    ctx = spec.context()
    incumbent = named(base_model, "base-model", 0)(ctx)
    proposer = (named(proposer_base, "proposer-base", 0)(ctx, incumbent)
                if spec.config.proposer.separate else None)
    incumbent_eval = named(evaluate, "baseline", 0)(ctx, 0, incumbent, stage="baseline")
    problems: list[StageOutput] = []
    curated: list[StageOutput] = []
    first = spec.config.warmup.first_round  # 1 under [warmup] mode = "none"
    if first:  # round 0 only decides: the base model stays the incumbent
        with observed_round(spec.data_root, spec.run_id, 0, spec.config.train.report_to):
            named(promote, "promote", 0)(ctx, 0, incumbent, incumbent_eval,
                                         without_candidate=NO_WARMUP)
    for round_index in range(first, spec.config.rounds + 1):
        with observed_round(spec.data_root, spec.run_id, round_index,  # progress, tracker
                            spec.config.train.report_to):
            outcome = one_round(spec, round_index, incumbent, incumbent_eval, problems,
                                curated, proposer)
        incumbent, incumbent_eval = outcome.incumbent, outcome.incumbent_eval
        proposer = outcome.proposer
        problems.append(outcome.problems)
        curated.append(outcome.curated)
    return incumbent


@contextmanager
def held_back(logger: logging.Logger) -> Iterator[list[logging.LogRecord]]:
    """The records `logger` (and its children) gets inside, kept from every handler and
    listed instead; `logger.handle` each one to let it through."""
    held = BufferingHandler(capacity=sys.maxsize)  # never flushes: it only lists
    handlers, propagate = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [held], False
    try:
        yield held.buffer
    finally:
        logger.handlers, logger.propagate = handlers, propagate


def resume_without_work(spec: RunSpec) -> bool:
    """Resume a completed run without Prefect when none of its stages would compute.

    `every_round` runs under `reuse_only` (tasks/stage.py) with each task's and the round flow's
    own function, so every stage's done check is the one a flow run makes: the same
    fingerprints, integrity checks and lines. When every stage is found done, the lines are let
    through, the run's row records this config (`ensure_run`, as a run does) and stays
    `completed`, and there is no flow run to start: `flywheel resume` of a finished run needs no
    Prefect server (docs/operations.md). The first stage that would compute, or whose output is
    damaged or gate-failed, ends the check: its lines are dropped, the catalog is as it was, and
    the caller runs the flows. A run that is not `completed` (interrupted, failed, or stopped
    between its last stage and its status) always runs them, so a round artifact its flow never
    published is published.

    Returns
    -------
    Whether the resume is finished.
    """
    ctx = spec.context()
    if ctx.catalog.run_status(spec.run_id) != "completed":
        return False
    logger = logging.getLogger("flywheel")
    with held_back(logger) as lines:
        try:
            with reuse_only():
                every_round(spec, round_flow.fn)
        except StageNotDone:
            return False
    for line in lines:
        logger.handle(line)
    ctx.catalog.ensure_run(spec.run_id, spec.config.model_dump_json(), status="completed")
    return True
