"""The run's tracker (tasks/tracking.py): one TensorBoard, MLflow or W&B run per flywheel run,
steps counted across rounds, the held-out accuracy and the round's funnel beside the loss; and
the round plan that gives progress lines their stage position and round ETA. The last test is a
real two-round flywheel run whose TensorBoard events are read back with TensorBoard's own
EventAccumulator."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest

from configs import RunConfig
from tasks.tracking import (
    Point,
    round_plan_of,
    round_points,
    steps_before,
    tracking_dir,
    wandb_rows,
    write_mlflow,
    write_tensorboard,
    write_wandb,
)

# two rounds as the catalog records them (storage/run_metrics.py): the warm-up trained 20 steps,
# round 1 10 more
METRICS = {
    0: {"baseline": {"accuracy": 0.1},
        "synthesize": {"novel": 40.0}, "rollout": {"rollouts": 640.0},
        "verify": {"verdicts": 640.0, "unjudged": 160.0}, "curate": {"train_rows": 80.0},
        "train": {"steps": 20.0, "curve/loss/10": 2.5, "curve/learning_rate/10": 0.003,
                  "curve/loss/20": 1.5},
        "evaluate": {"accuracy": 0.25, "accuracy_low": 0.1, "accuracy_high": 0.4},
        "promote": {"promoted": 1.0, "incumbent_accuracy": 0.1}},
    1: {"synthesize": {"novel": 30.0}, "rollout": {"rollouts": 480.0},
        "verify": {"verdicts": 480.0, "unjudged": 0.0}, "curate": {"train_rows": 60.0},
        "train": {"steps": 10.0, "curve/loss/10": 1.0},
        "evaluate": {"accuracy": 0.5}, "promote": {"promoted": 1.0}},
}


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def test_a_rounds_steps_follow_the_rounds_before_it():
    assert [steps_before(METRICS, r) for r in (0, 1, 2)] == [0, 20, 30]
    first, second = round_points(METRICS, 0), round_points(METRICS, 1)
    assert Point("baseline/accuracy", 0, 0.1) == first[0]
    assert [p for p in first if p.tag == "train/loss"] == [Point("train/loss", 10, 2.5),
                                                          Point("train/loss", 20, 1.5)]
    assert {p.tag: p.value for p in first if p.step == 20}.items() >= {
        "heldout/accuracy": 0.25, "heldout/accuracy_low": 0.1, "heldout/accuracy_high": 0.4,
        "promote/promoted": 1.0, "funnel/problems": 40.0, "funnel/rollouts": 640.0,
        "funnel/judged_share": 0.75, "funnel/train_rows": 80.0, "round": 0.0}.items()
    assert [p for p in second if p.tag == "train/loss"] == [Point("train/loss", 30, 1.0)]
    assert {p.tag for p in second if p.step == 30} >= {"heldout/accuracy", "funnel/judged_share"}
    assert not [p for p in second if p.tag.startswith("baseline/")]
    steps = [p.step for p in first + second]
    assert steps == sorted(steps)


def test_a_round_without_training_logs_where_the_last_one_ended():
    metrics = {**METRICS, 2: {"synthesize": {"novel": 5.0}, "curate": {"train_rows": 0.0},
                              "promote": {"promoted": 0.0}}}
    points = round_points(metrics, 2)
    assert {p.step for p in points} == {30}
    assert Point("promote/promoted", 30, 0.0) in points and Point("round", 30, 2.0) in points


def test_tensorboard_holds_one_run_with_steps_across_rounds(tmp_path):
    folder = tracking_dir(tmp_path, "demo") / "tensorboard"
    assert folder == tmp_path / "runs" / "demo" / "tracking" / "tensorboard"
    for round_index in (0, 1):
        write_tensorboard(folder, round_index, round_points(METRICS, round_index))
    write_tensorboard(folder, 0, round_points(METRICS, 0))  # a resume writes round 0 again
    assert sorted(p.name for p in folder.iterdir()) == [
        "events.out.tfevents.round-000.flywheel", "events.out.tfevents.round-001.flywheel"]
    assert [p.name for p in folder.parent.iterdir()] == ["tensorboard"], "no scratch left"
    events = _events(folder)
    assert events["train/loss"] == [(10, 2.5), (20, 1.5), (30, 1.0)]
    assert events["heldout/accuracy"] == [(20, 0.25), (30, 0.5)]
    assert events["funnel/judged_share"] == [(20, 0.75), (30, 1.0)]
    assert events["baseline/accuracy"] == [(0, pytest.approx(0.1))]


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")
def test_mlflow_holds_one_run_and_logs_a_round_once(tmp_path):
    from mlflow.tracking import MlflowClient

    folder = tracking_dir(tmp_path, "demo")
    assert write_mlflow(folder, "demo", 0, round_points(METRICS, 0))
    assert write_mlflow(folder, "demo", 1, round_points(METRICS, 1))
    assert not write_mlflow(folder, "demo", 0, round_points(METRICS, 0)), "already logged"
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("demo").experiment_id])
    assert run.info.run_name == "demo" and run.data.tags["flywheel.run_id"] == "demo"
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
               for key in ("train/loss", "heldout/accuracy")}
    assert history == {"train/loss": [(10, 2.5), (20, 1.5), (30, 1.0)],
                       "heldout/accuracy": [(20, 0.25), (30, 0.5)]}


def _wandb_records(run_dir: Path) -> list:
    """The records of an offline W&B run's `.wandb` file: a 7-byte W&B header, then LevelDB log
    records (7-byte header: crc32c, length, type; FULL 1, FIRST 2, MIDDLE 3, LAST 4) in 32 KiB
    blocks, each record one protobuf `Record`."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    data, pos, part, out = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        part, pos = part + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def _wandb_history(run_dir: Path) -> tuple[object, list[dict]]:
    """(the run record, the history rows without W&B's own `_` keys) of an offline run; a key
    with a slash is stored as its parts (`nested_key`)."""
    records = _wandb_records(run_dir)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    rows = [{name: json.loads(item.value_json) for item in r.history.item
             if not (name := item.key or "/".join(item.nested_key)).startswith("_")}
            for r in records if r.WhichOneof("record_type") == "history"]
    return run, rows


def test_wandb_holds_one_offline_run_with_every_round_once(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_CACHE_DIR", raising=False)
    folder = tracking_dir(tmp_path, "demo") / "wandb"
    round_0 = [round_points(METRICS, 0)]
    both = [*round_0, round_points(METRICS, 1)]
    write_wandb(folder, "demo", round_0)
    write_wandb(folder, "demo", both)
    run_dir = write_wandb(folder, "demo", both)  # a resume writes the run again
    assert [p.name for p in folder.glob("offline-run-*")] == [run_dir.name], "one run"
    assert sorted(p.name for p in folder.parent.iterdir()) == [".wandb-cache", "wandb"], \
        "no scratch left"
    run, rows = _wandb_history(run_dir)
    assert (run.display_name, run.project) == ("demo", "flywheel")
    assert run.run_id.startswith("flywheel-") and run_dir.name.endswith(run.run_id)
    loss = [(row["global_step"], row["train/loss"]) for row in rows if "train/loss" in row]
    assert loss == [(10, 2.5), (20, 1.5), (30, 1.0)]
    accuracy = [(row["global_step"], row["heldout/accuracy"]) for row in rows
                if "heldout/accuracy" in row]
    assert accuracy == [(20, 0.25), (30, 0.5)]
    (end_of_warmup,) = [row for row in rows if row["global_step"] == 20]  # one row a step
    assert {"train/loss", "heldout/accuracy", "round"} <= set(end_of_warmup)
    assert [(row["global_step"], row["baseline/accuracy"]) for row in rows
            if "baseline/accuracy" in row] == [(0, 0.1)]


def test_wandb_keeps_two_rounds_that_end_at_one_step_apart():
    metrics = {**METRICS, 2: {"synthesize": {"novel": 5.0}, "promote": {"promoted": 0.0}}}
    rows = wandb_rows([round_points(metrics, r) for r in (0, 1, 2)])
    at_30 = [row for row in rows if row["global_step"] == 30.0]
    assert [(row["round"], row["promote/promoted"]) for row in at_30] == [(1.0, 1.0), (2.0, 0.0)]
    steps = [row["global_step"] for row in rows]
    assert steps == sorted(steps)


def test_the_round_plan_takes_each_stage_from_the_latest_earlier_round():
    rows = [{"round": 0, "stage": "train", "status": "completed", "seconds": 90.0},
            {"round": 0, "stage": "rollout", "status": "completed", "seconds": 5.0},
            {"round": 1, "stage": "rollout", "status": "completed", "seconds": 7.0},
            {"round": 1, "stage": "train", "status": "failed", "seconds": 1.0},
            {"round": 0, "stage": "baseline", "status": "completed", "seconds": 3.0},
            {"round": 2, "stage": "rollout", "status": "completed", "seconds": 9.0}]
    plan = round_plan_of(rows, 2)
    assert plan.round_index == 2 and plan.earlier_seconds == {"train": 90.0, "rollout": 7.0}
    assert round_plan_of(rows, 0).earlier_seconds == {}


def test_the_trainers_report_to_no_tracker(tmp_path):
    from models.runtime import train_runtime
    from models.trainer import common_arguments

    for reporter in ("none", "tensorboard", "mlflow", "wandb"):
        config = RunConfig.model_validate({"train": {"report_to": reporter}})
        arguments = common_arguments(work_dir=tmp_path, steps=1, micro_batch=1,
                                     gradient_accumulation_steps=1, learning_rate=1e-3,
                                     save_steps=0, seed=0, runtime=train_runtime(config.train))
        assert arguments["report_to"] == "none", reporter


# ---- a real run ------------------------------------------------------------------------------

# warm-up + one round, each 10 SFT steps of a very small model on generator problems trained on
# their references (the 10-step model solves nothing, so round 1 needs them to have rows)
REAL_RUN = {"rounds": 1, "model.hidden_size": 32, "model.num_layers": 1, "model.head_dim": 8,
            "model.intermediate_size": 64, "domain.seed_problems": 40,
            "domain.heldout_per_level": 2, "synthesize.proposals": 16,
            "synthesize.source": "generator", "rollout.samples_per_problem": 2,
            "curate.solver_targets": "reference", "train.batch_size": 8,
            "train.warmup.max_steps": 10, "train.max_steps": 10, "gates.enabled": False,
            "train.report_to": "tensorboard"}


@pytest.mark.slow
def test_a_two_round_run_writes_one_tensorboard_run(tmp_path, prefect_server, caplog,
                                                    monkeypatch):
    from configs import load_config
    from flows.run import RunSpec, flywheel_flow

    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "WARNING")
    caplog.set_level(logging.INFO, logger="flywheel")
    flywheel_flow(RunSpec(data_root=str(tmp_path), run_id="tracked",
                          config=load_config(None, REAL_RUN)))
    folder = tracking_dir(tmp_path, "tracked") / "tensorboard"
    assert sorted(p.name for p in folder.iterdir()) == [
        "events.out.tfevents.round-000.flywheel", "events.out.tfevents.round-001.flywheel"]
    events = _events(folder)
    loss_steps = [step for step, _ in events["train/loss"]]
    assert loss_steps == [10, 20], "round 1's steps follow the warm-up's 10"
    accuracy = events["heldout/accuracy"]
    assert [step for step, _ in accuracy] == [10, 20]
    assert all(0.0 <= value <= 1.0 for _, value in accuracy)
    for tag in ("funnel/problems", "funnel/rollouts", "funnel/judged_share", "funnel/train_rows",
                "promote/promoted", "round"):
        assert [step for step, _ in events[tag]] == [10, 20], tag
    assert [step for step, _ in events["baseline/accuracy"]] == [0]
    # the progress lines knew their round: its stage, and in round 1 (after the warm-up) its ETA
    lines = [r.getMessage() for r in caplog.records if r.name == "flywheel"]
    assert any("round 0 rollout (stage 2 of 7): " in line for line in lines), lines
    round_1 = [line for line in lines if "round 1 train (stage 5 of 7): " in line]
    assert round_1 and all("round eta ~" in line for line in round_1), lines
