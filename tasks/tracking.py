"""The run's experiment tracker: one TensorBoard, MLflow or W&B run per flywheel run, its x axis
the training steps of the whole run.

With `[train] report_to = "tensorboard"`, `"mlflow"` or `"wandb"`, at the end of every round the
round's figures are read from the catalog and written under the run's folder:

    <data-root>/runs/<run_id>/tracking/tensorboard/   `tensorboard --logdir` it (or give
                                                      `<data-root>/runs` to compare runs)
    <data-root>/runs/<run_id>/tracking/mlflow.db      `mlflow ui --backend-store-uri
                                                      sqlite:///<that file>`
    <data-root>/runs/<run_id>/tracking/wandb/         one offline W&B run: `wandb sync
                                                      <that folder>/offline-run-*` uploads it

The global step counts training steps across the run: round N's trainer steps follow the steps
of rounds 0..N-1 (each train stage's `steps` metric; the passes inside a stage are already
counted on, tasks/train.py `curve_metrics`). What is logged, at which step:

    train/loss, train/learning_rate,   every logged training step (the train stage's curve)
      train/grad_norm
    heldout/<name>                     at the round's last step: the candidate's evaluate
                                       metrics (accuracy, accuracy_level_N, accuracy_low/_high
                                       where recorded, pass_at_K, ...)
    promote/<name>                     there too: promoted (0 or 1), incumbent_accuracy,
                                       candidate_accuracy, the paired test's figures
    funnel/problems, funnel/rollouts,  there too: problems admitted, rollouts sampled, the share
      funnel/judged_share,             of rollouts the verifier could judge, training rows
      funnel/train_rows
    round                              there too: the round's index (which round a step is in)
    baseline/<name>                    round 0 only, at step 0: the base model's held-out figures

    (a round without training rows logs its figures at the step the round before it ended)

Why at the round's end and from the catalog, not from the trainers: the catalog holds every
figure of a round once its promote row is written, whether a stage ran, was reused by a resume
or trained in several processes, so the tracker shows exactly what the catalog records. Each
round's TensorBoard events are one file named by the round (`events.out.tfevents.round-NNN.
flywheel`), replaced whole, so a resumed run logs nothing twice and the files read in round
order. The curve arrives when the round ends; the progress lines show the loss meanwhile.

MLflow: MLflow 3 refuses its file store (`mlruns/`) unless MLFLOW_ALLOW_FILE_STORE is set, so
the run's store is a SQLite file, MLflow's local default (mlflow-skinny is enough: SQLAlchemy
and Alembic come with Prefect). It holds one experiment and one run, both named by the run id;
a round already logged with the same figures (tag `flywheel.round.<NNN>`: a hash of them) is
not logged again.

W&B: the run is written offline (the machines that train need no W&B account or network), its
id `flywheel-<hash of the run id>` and its name the run id, with `global_step` as every
figure's x axis (W&B's `define_metric`), so a round without training, whose figures share the
step where the round before it ended, keeps both rounds' values. At each round's end the whole
run so far (rounds 0..N) is written again in a scratch folder and swapped for `wandb/`: the
folder always holds one run with every round once, and a resume logs nothing twice. Sync it
when the run has finished (a sync after each round would send the early rounds again).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from models.trainer import FLYWHEEL_TRACKERS
from storage.catalog import Catalog
from storage.fingerprint import stable_hash
from storage.paths import run_folder
from storage.run_metrics import run_metrics
from tasks.progress import ROUND_STAGES, RoundPlan, round_plan
from tasks.train import CURVE_PREFIX

TRACKING_FOLDER = "tracking"
TENSORBOARD_FOLDER = "tensorboard"
MLFLOW_STORE = "mlflow.db"
WANDB_FOLDER = "wandb"
WANDB_CACHE = ".wandb-cache"  # the W&B service's logs (`write_wandb`)
WANDB_PROJECT = "flywheel"
# funnel figure -> the (stage, metric) it is
FUNNEL = {"problems": ("synthesize", "novel"), "rollouts": ("rollout", "rollouts"),
          "train_rows": ("curate", "train_rows")}
MLFLOW_BATCH = 1000  # metrics per `log_batch` call (MLflow's limit)

Metrics = dict[int, dict[str, dict[str, float]]]  # storage/run_metrics.py: round, stage, name


class Point(NamedTuple):
    """One scalar of the tracker: its tag, global step and value."""

    tag: str
    step: int
    value: float


def tracking_dir(data_root: Path | str, run_id: str) -> Path:
    """`<data-root>/runs/<run_id>/tracking/`: where the run's tracker writes."""
    return run_folder(Path(data_root), run_id) / TRACKING_FOLDER


def steps_before(metrics: Metrics, round_index: int) -> int:
    """The training steps of the rounds before `round_index`: its global step offset."""
    return sum(int(stages.get("train", {}).get("steps", 0))
               for r, stages in metrics.items() if r < round_index)


def round_points(metrics: Metrics, round_index: int) -> list[Point]:
    """The scalars of round `round_index` (module docstring), in step order, from the run's
    recorded `metrics`."""
    offset = steps_before(metrics, round_index)
    stages = metrics.get(round_index, {})
    train = stages.get("train", {})
    end = offset + int(train.get("steps", 0))
    points = []
    for name, value in train.items():  # curve/<key>/<step>
        if name.startswith(CURVE_PREFIX):
            key, step = name.removeprefix(CURVE_PREFIX).rsplit("/", 1)
            points.append(Point(f"train/{key}", offset + int(step), value))
    if round_index == 0:
        points += [Point(f"baseline/{name}", 0, value)
                   for name, value in stages.get("baseline", {}).items()]
    for stage, prefix in (("evaluate", "heldout"), ("promote", "promote")):
        points += [Point(f"{prefix}/{name}", end, value)
                   for name, value in stages.get(stage, {}).items()]
    for figure, (stage, name) in FUNNEL.items():
        if name in stages.get(stage, {}):
            points.append(Point(f"funnel/{figure}", end, stages[stage][name]))
    verify = stages.get("verify", {})
    if verify.get("verdicts"):
        judged = verify["verdicts"] - verify.get("unjudged", 0.0)
        points.append(Point("funnel/judged_share", end, judged / verify["verdicts"]))
    points.append(Point("round", end, float(round_index)))
    return sorted(points, key=lambda p: (p.step, p.tag))


def write_tensorboard(folder: Path, round_index: int, points: list[Point]) -> Path:
    """Write the round's scalars as one event file in `folder`, replacing the round's earlier
    file: written in a scratch folder beside it, then renamed to its round's name."""
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"events.out.tfevents.round-{round_index:03d}.flywheel"
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}-", dir=folder.parent) as scratch:
        writer = SummaryWriter(log_dir=scratch)
        for point in points:
            writer.add_scalar(point.tag, point.value, point.step)
        writer.close()
        (written,) = Path(scratch).glob("events.out.tfevents.*")
        os.replace(written, final)
    return final


def mlflow_run(folder: Path, run_id: str) -> tuple[Any, Any]:
    """(the client of the run's SQLite store in `folder`, the MLflow run of `run_id` in it,
    created with its experiment the first time)."""
    from mlflow.tracking import MlflowClient

    folder.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=f"sqlite:///{(folder / MLFLOW_STORE).resolve()}")
    experiment = client.get_experiment_by_name(run_id)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(
        run_id, artifact_location=(folder / "mlflow-artifacts").resolve().as_uri())
    found = client.search_runs([experiment_id], max_results=1,
                               order_by=["attributes.start_time ASC"])
    run = found[0] if found else client.create_run(experiment_id, run_name=run_id,
                                                   tags={"flywheel.run_id": run_id})
    return client, run


def write_mlflow(folder: Path, run_id: str, round_index: int, points: list[Point]) -> bool:
    """Log the round's scalars to the run's MLflow run; False when the same ones already are."""
    from mlflow.entities import Metric

    client, run = mlflow_run(folder, run_id)
    tag, digest = f"flywheel.round.{round_index:03d}", stable_hash([list(p) for p in points])
    if run.data.tags.get(tag) == digest:
        return False
    now = int(time.time() * 1000)
    metrics = [Metric(p.tag, p.value, now, p.step) for p in points]
    for start in range(0, len(metrics), MLFLOW_BATCH):
        client.log_batch(run.info.run_id, metrics=metrics[start:start + MLFLOW_BATCH])
    client.set_tag(run.info.run_id, tag, digest)
    client.set_terminated(run.info.run_id)  # between rounds it is not running
    return True


def wandb_rows(rounds: list[list[Point]]) -> list[dict[str, float]]:
    """The W&B history rows of the rounds' points (`round_points` of rounds 0..N): one row per
    round and step, each with its `global_step`."""
    rows = []
    for points in rounds:
        by_step: dict[int, dict[str, float]] = {}
        for point in points:
            by_step.setdefault(point.step, {"global_step": float(point.step)})[point.tag] = \
                point.value
        rows += by_step.values()
    return rows


def write_wandb(folder: Path, run_id: str, rounds: list[list[Point]]) -> Path:
    """Write the run's scalars so far (`rounds`: each round's points, rounds 0..N) as one
    offline W&B run in `folder`, replacing the folder whole (module docstring); returns the
    run's folder."""
    # W&B's service keeps its debug logs in its cache folder (~/.cache/wandb): the run's own
    # instead, unless the user named one; read when the process's service starts
    os.environ.setdefault("WANDB_CACHE_DIR", str(folder.parent / WANDB_CACHE))
    import wandb

    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}-", dir=folder.parent) as scratch:
        settings = wandb.Settings(mode="offline", silent=True, console="off", save_code=False,
                                  x_disable_stats=True, x_disable_meta=True)
        run = wandb.init(project=WANDB_PROJECT, id=f"flywheel-{stable_hash(run_id)[:16]}",
                         name=run_id, dir=scratch, config={"flywheel_run_id": run_id},
                         settings=settings)
        try:
            run.define_metric("global_step")
            run.define_metric("*", step_metric="global_step")
            for row in wandb_rows(rounds):
                run.log(row)
        finally:
            run.finish()
        written = Path(scratch) / "wandb"
        old = Path(scratch) / "old"
        if folder.exists():
            os.replace(folder, old)  # removed with the scratch folder
        os.replace(written, folder)
    (run_dir,) = folder.glob("offline-run-*")
    return run_dir


def track_round(data_root: Path | str, run_id: str, round_index: int, report_to: str) -> None:
    """Write round `round_index`'s scalars to the run's tracker (`report_to`: tensorboard,
    mlflow or wandb; any other writes nothing here)."""
    if report_to not in FLYWHEEL_TRACKERS:
        return
    metrics = run_metrics(Catalog(data_root), run_id)
    folder = tracking_dir(data_root, run_id)
    if report_to == "wandb":
        write_wandb(folder / WANDB_FOLDER, run_id,
                    [round_points(metrics, r) for r in range(round_index + 1)])
        return
    points = round_points(metrics, round_index)
    if report_to == "tensorboard":
        write_tensorboard(folder / TENSORBOARD_FOLDER, round_index, points)
    else:
        write_mlflow(folder, run_id, round_index, points)


def round_plan_of(stage_rows: list[dict[str, Any]], round_index: int) -> RoundPlan:
    """The progress lines' plan of round `round_index` (tasks/progress.py): per stage of a round,
    the seconds of its latest completed execution in the latest earlier round that ran it
    (`Catalog.stage_rows`, oldest first)."""
    earlier: dict[str, tuple[int, float]] = {}
    for row in stage_rows:
        if row["status"] == "completed" and row["stage"] in ROUND_STAGES \
                and row["round"] < round_index and row["seconds"] is not None:
            if row["round"] >= earlier.get(row["stage"], (-1, 0.0))[0]:
                earlier[row["stage"]] = (row["round"], float(row["seconds"]))
    return RoundPlan(round_index, {stage: seconds for stage, (_, seconds) in earlier.items()})


@contextmanager
def observed_round(data_root: Path | str, run_id: str, round_index: int,
                   report_to: str) -> Iterator[None]:
    """What watches a round from outside it (flows/run.py): inside the block its progress lines
    say the stage and the round's ETA (`round_plan`); when the block completes the round's
    figures go to the run's tracker (`track_round`); a failed round writes none."""
    with round_plan(round_plan_of(Catalog(data_root).stage_rows(run_id), round_index)):
        yield
    track_round(data_root, run_id, round_index, report_to)
