"""The stage runner: the storage contract in one place.

    fingerprint -> done? (completed catalog row + files with their checksums) -> skip
                -> else compute -> write each dataset atomically -> gate each dataset
                -> catalog row last (`gate_failed` and GateFailed raised when a gate fails:
                   tasks/gates.py)

Every stage logs one line through the `flywheel` logger when it starts and one when it ends,
each opening with an ISO timestamp so they read the same under cron or CI as on a terminal:

    2025-01-02T03:04:05+00:00 round 1 rollout: started (fingerprint 3f2a9c1b0d4e)
    2025-01-02T03:05:17+00:00 round 1 rollout: completed in 72.1 s; rows rollouts=4096
    2025-01-02T03:05:18+00:00 round 1 verify: reused (fingerprint 77aa01b2c3d4); rows verdicts=4096
    2025-01-02T03:05:18+00:00 round 1 train: failed after 3.2 s: OSError: ...

A stage that fails records a `failed` row with its error and re-raises; nothing it half wrote
is visible (temporary files are removed, checkpoint folders are renamed into place last).
A recorded output found damaged (missing, truncated, wrong row count or checksum) is reported
in one line, discarded (its stage row becomes `discarded`) and recomputed. What a *killed*
process left behind is swept once at run start (storage/recovery.py).
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from storage import interruption
from storage.datasets import WrittenDataset, dataset_path, round_dir, write_atomic
from storage.fingerprint import checkpoint_checksum, stage_fingerprint
from storage.permissions import make_readable
from storage.recovery import (
    Discarded,
    check_recorded,
    discard_dependents,
    discard_outputs,
    notice,
    pause_point,
)
from tasks.context import RunContext
from tasks.gates import failed_gate, gate_outputs, gate_rows, regate_stored
from tasks.judgements import cost_text
from tasks.libraries import import_for
from tasks.spans import spent
from tasks.spans import stage as stage_span

log = logging.getLogger("flywheel")


@dataclass
class StageResult:
    """What a stage computed: per dataset kind its rows (dicts), a table (polars DataFrame or
    Arrow table) or the file the stage already wrote (a `WrittenDataset` from
    storage.datasets.DatasetWriter at `dataset_path(..., fingerprint)`, streamed as shards
    finished); an optional checkpoint folder; metrics."""

    datasets: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None
    checkpoint_rows: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StageOutput:
    """A stage's recorded outputs: the dataset (or checkpoint) path of each kind it wrote."""

    stage: str
    round: int
    fingerprint: str
    paths: dict[str, Path]
    skipped: bool  # found done (or re-gated) instead of computed

    def path(self, kind: str) -> Path:
        return self.paths[kind]


def checkpoint_dir(ctx: RunContext, round_index: int, fingerprint: str) -> Path:
    """The checkpoint folder a stage with this fingerprint writes.

    Parameters
    ----------
    ctx
        The run.
    round_index
        The round of the stage.
    fingerprint
        The stage's fingerprint; its first 12 characters name the folder.

    Returns
    -------
    Path
        `<data-root>/runs/<run_id>/round-<NNN>/checkpoint-<fingerprint12>`.
    """
    return round_dir(ctx.data_root, ctx.run_id, round_index) / f"checkpoint-{fingerprint[:12]}"


def rows_text(rows: Mapping[str, int | None]) -> str:
    """`rows rollouts=4096 checkpoint=512` for a stage's rows per dataset kind ('' for none)."""
    return ("rows " + " ".join(f"{kind}={n}" for kind, n in rows.items())) if rows else ""


def log_stage(round_index: int, stage: str, event: str,
              rows: Mapping[str, int | None] | None = None, cost: str = "") -> None:
    """One line of a stage's start or end: `round N STAGE: EVENT; rows; cost` (the handlers
    stamp it: flows/log_lines.py); `cost`: what a judge spent (tasks/judgements.py)."""
    detail = "; ".join(part for part in (rows_text(rows or {}), cost) if part)
    log.info("round %d %s: %s%s", round_index, stage, event, f"; {detail}" if detail else "")


def settings_fingerprint(stage: str, version: int, settings: BaseModel, seed: int,
                         inputs: dict[str, str]) -> str:
    """The fingerprint of a stage with these settings: `stage_fingerprint` (storage/fingerprint.py)
    over the settings' class name and `model_dump(mode="json")`, defaults included, so every field
    counts and a settings model of another mode (`SeedSynthesizeSettings`) never collides."""
    dumped = {"class": type(settings).__name__, "settings": settings.model_dump(mode="json")}
    return stage_fingerprint(stage, version, dumped, seed, inputs)


class StageNotDone(Exception):  # noqa: N818 - a finding, not an error
    """Raised by `run_stage` inside `reuse_only()` instead of computing the stage."""

    def __init__(self, stage: str, round_index: int) -> None:
        super().__init__(f"round {round_index} {stage} is not done")


_reuse_only: ContextVar[bool] = ContextVar("flywheel_reuse_only", default=False)


@contextmanager
def reuse_only() -> Iterator[None]:
    """Inside, a stage found done and intact is reused as always; one that would compute, or
    whose recorded output is damaged or failed its gate, raises StageNotDone instead, having
    written nothing (flows/run.py `resume_without_work`: a resume with nothing to recompute).
    The run that follows discards or re-gates such an output, as ever."""
    token = _reuse_only.set(True)
    try:
        yield
    finally:
        _reuse_only.reset(token)


def reusing_only() -> bool:
    """Whether this runs inside `reuse_only()`."""
    return _reuse_only.get()


def run_stage(
    ctx: RunContext,
    *,
    stage: str,
    version: int,
    round_index: int,
    settings: BaseModel,
    inputs: dict[str, str],
    compute: Callable[[str], StageResult],
) -> StageOutput:
    """Run `compute(fingerprint)` unless a completed, intact output with this fingerprint exists.

    A failure while computing or writing records a `failed` stage row and re-raises; a failed
    gate records `gate_failed` and raises GateFailed (tasks/gates.py).

    Parameters
    ----------
    ctx
        The run.
    stage
        The stage's name.
    version
        The stage's VERSION: bumped when what the stage computes changes.
    round_index
        The round.
    settings
        The stage's frozen settings object (configs/settings.py), fingerprinted whole with its
        defaults and its class's name.
    inputs
        The fingerprints of its inputs by name (fingerprinted, and recorded with the stage).
    compute
        Computes the stage's result from its fingerprint.

    Returns
    -------
    StageOutput
        `skipped` when the output was found done (or its stored data passed a re-run gate).
    """
    interruption.check()  # a stop request that a library swallowed ends the run here
    with stage_span(stage):
        return run_stage_parts(ctx, stage=stage, version=version, round_index=round_index,
                               settings=settings, inputs=inputs, compute=compute)


def run_stage_parts(ctx: RunContext, *, stage: str, version: int, round_index: int,
                    settings: BaseModel, inputs: dict[str, str],
                    compute: Callable[[str], StageResult]) -> StageOutput:
    """`run_stage`'s body, each part a span (tasks/spans.py) of the stage."""
    with spent("done check"):
        fingerprint = settings_fingerprint(stage, version, settings,
                                           ctx.stage_seed(stage, round_index), inputs)
        stored = stored_output(ctx, stage=stage, round_index=round_index,
                               fingerprint=fingerprint)
    if stored is not None:
        return stored
    if reusing_only():
        raise StageNotDone(stage, round_index)
    import_for(stage)  # its libraries, frozen out of full collections (tasks/libraries.py)
    started = time.time()
    log_stage(round_index, stage, f"started (fingerprint {fingerprint[:12]})")
    try:
        pause_point(f"{stage}:{round_index}:start")
        with spent("own work"):
            result = compute(fingerprint)
        with spent("parquet writes"):
            outputs = write_result(ctx, result, stage=stage, round_index=round_index,
                                   fingerprint=fingerprint)
    except BaseException as exc:
        mark_failed_stage(exc, stage, round_index)
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log_stage(round_index, stage, f"failed after {time.time() - started:.1f} s: "
                  f"{error.splitlines()[-1] if error else type(exc).__name__}")
        try:
            ctx.catalog.record_failed(
                run_id=ctx.run_id, round_index=round_index, stage=stage, fingerprint=fingerprint,
                started_at=started, error=error,
            )
        except Exception as record_exc:  # noqa: BLE001 - e.g. the disk is full: keep the cause
            exc.add_note(f"(the failure could not be recorded in the catalog: {record_exc})")
        raise
    try:
        output = record_result(ctx, result, outputs, stage=stage, round_index=round_index,
                               fingerprint=fingerprint, inputs=inputs, started=started)
    except BaseException as exc:  # a gate or the catalog; the stage's row says which
        mark_failed_stage(exc, stage, round_index)
        log_stage(round_index, stage, f"stopped after {time.time() - started:.1f} s: "
                  f"{type(exc).__name__}", {o.kind: o.rows for o in outputs})
        raise
    log_stage(round_index, stage, f"completed in {time.time() - started:.1f} s",
              {o.kind: o.rows for o in outputs}, cost_text(result.metrics))
    return output


def mark_failed_stage(exc: BaseException, stage: str, round_index: int) -> None:
    """Remember on `exc` which stage it stopped (the innermost stage wins)."""
    if getattr(exc, "flywheel_stage", None) is None:
        try:
            exc.flywheel_stage = (stage, round_index)  # type: ignore[attr-defined]
        except AttributeError:  # an exception type without a __dict__
            pass


def failed_stage(exc: BaseException) -> tuple[str, int] | None:
    """(stage, round) that `exc`, or an exception it was raised from, stopped; else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        where = getattr(exc, "flywheel_stage", None)
        if where is not None:
            return where
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def lost_rows(ctx: RunContext, round_index: int, expected: int | None,
              recorded: dict[str, dict[str, Any]]) -> tuple[Path, str] | None:
    """(the round's folder, why) when the catalog lists fewer datasets of a completed stage
    than the stage wrote (`expected`: a `datasets` row was lost), else None: such a stage is
    not done."""
    if expected is None or expected == len(recorded):
        return None
    return (round_dir(ctx.data_root, ctx.run_id, round_index),
            f"the catalog lists {len(recorded)} of the stage's {expected} outputs")


def stored_output(ctx: RunContext, *, stage: str, round_index: int, fingerprint: str
                  ) -> StageOutput | None:
    """The stage's output as stored, when it need not be computed again.

    A completed output whose files are intact is skipped. A damaged one (missing, truncated,
    wrong row count or checksum) is reported in one line and discarded with everything computed
    from it, so nothing stale survives downstream. An output whose gate failed before is
    re-gated (its thresholds may have been fixed) instead of recomputed.

    Parameters
    ----------
    ctx
        The run.
    stage
        The stage's name.
    round_index
        The round.
    fingerprint
        The stage's fingerprint.

    Returns
    -------
    StageOutput or None
        The stored output (`skipped`), or None when the stage must be computed.
    """
    recorded = ctx.catalog.recorded_stage(ctx.run_id, fingerprint)
    if recorded is None:
        return None
    if recorded.status == "gate_failed":
        if reusing_only():
            raise StageNotDone(stage, round_index)
        regated = regate_stored(ctx, stage=stage, round_index=round_index,
                                fingerprint=fingerprint, recorded=recorded.datasets)
        if regated is None:
            return None
        log_stage(round_index, stage, f"reused (fingerprint {fingerprint[:12]}, gate passed "
                  "on its stored data)")
        return StageOutput(stage, round_index, fingerprint, regated, skipped=True)
    with spent("integrity check"):
        damage = (check_recorded(recorded.datasets)
                  or lost_rows(ctx, round_index, recorded.outputs, recorded.datasets))
    if damage is not None:
        if reusing_only():
            raise StageNotDone(stage, round_index)
        notice(str(Discarded(*damage)))
        discard_dependents(ctx.catalog, ctx.run_id, fingerprint)
        discard_outputs(recorded.datasets)
        ctx.catalog.discard_stage(ctx.run_id, fingerprint, f"{damage[0]}: {damage[1]}")
        return None
    log_stage(round_index, stage, f"reused (fingerprint {fingerprint[:12]})",
              {kind: info["rows"] for kind, info in recorded.datasets.items()})
    paths = {kind: Path(info["path"]) for kind, info in recorded.datasets.items()}
    return StageOutput(stage, round_index, fingerprint, paths, skipped=True)


def write_result(ctx: RunContext, result: StageResult, *, stage: str, round_index: int,
                 fingerprint: str) -> list[WrittenDataset]:
    """Write each dataset of `result` atomically, then rename its checkpoint folder into place.

    Parameters
    ----------
    ctx
        The run.
    result
        What the stage computed.
    stage
        The stage's name.
    round_index
        The round.
    fingerprint
        The stage's fingerprint; it names the files.

    Returns
    -------
    list of WrittenDataset
        One per dataset kind, then the checkpoint (its rows: `result.checkpoint_rows`, its
        checksum: its weights', `checkpoint_checksum`).
    """
    point = f"{stage}:{round_index}"
    outputs: list[WrittenDataset] = []
    for kind, rows in result.datasets.items():
        path = dataset_path(ctx.data_root, ctx.run_id, round_index, kind, fingerprint)
        if isinstance(rows, WrittenDataset):
            if rows.path != path or rows.kind != kind:
                msg = f"{stage}: the {kind} file was written to {rows.path}, expected {path}"
                raise ValueError(msg)
            outputs.append(rows)
        else:
            outputs.append(write_atomic(kind, rows, path))
        pause_point(f"{point}:wrote-{kind}")
    if result.checkpoint is not None:
        final = checkpoint_dir(ctx, round_index, fingerprint)
        if final.exists():
            shutil.rmtree(final)
        make_readable(result.checkpoint)  # safetensors writes 0600 weights, mkdtemp 0700 folders
        result.checkpoint.rename(final)
        with spent("checkpoint hashing"):
            checksum = checkpoint_checksum(final)  # every shard of a sharded save
        outputs.append(WrittenDataset("checkpoint", final, result.checkpoint_rows, checksum))
        pause_point(f"{point}:wrote-checkpoint")
    return outputs


def record_result(ctx: RunContext, result: StageResult, outputs: list[WrittenDataset], *,
                  stage: str, round_index: int, fingerprint: str, inputs: dict[str, str],
                  started: float) -> StageOutput:
    """Gate the written outputs, then write the stage's catalog row: the row comes last, so its
    presence means the data is complete.

    Parameters
    ----------
    ctx
        The run.
    result
        What the stage computed (its metrics are recorded).
    outputs
        What `write_result` wrote.
    stage
        The stage's name.
    round_index
        The round.
    fingerprint
        The stage's fingerprint.
    inputs
        The fingerprints of its inputs by name.
    started
        When the stage started (epoch seconds).

    Returns
    -------
    StageOutput
        The outputs just written; GateFailed is raised instead when a gate fails (the files
        stay for audit, nothing downstream runs).
    """
    with spent("gates"):
        results = gate_outputs(ctx, stage=stage, round_index=round_index,
                               paths={o.kind: o.path for o in outputs})
        gated = failed_gate(stage, round_index, results)
    with spent("catalog rows"):
        ctx.catalog.record_completed(
            run_id=ctx.run_id, round_index=round_index, stage=stage, fingerprint=fingerprint,
            started_at=started, outputs=outputs, inputs=inputs, metrics=result.metrics,
            status="completed" if gated is None else "gate_failed",
            error=None if gated is None else str(gated), gates=gate_rows(results),
        )
    if gated is not None:
        raise gated
    pause_point(f"{stage}:{round_index}:done")
    return StageOutput(
        stage, round_index, fingerprint, {o.kind: o.path for o in outputs}, skipped=False
    )
