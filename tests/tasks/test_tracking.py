"""The run's tracker (tasks/tracking.py): one TensorBoard run, or one MLflow run, per flywheel run,
steps counted across rounds, the held-out accuracy and the round's funnel beside the loss; and
the round plan that gives progress lines their stage position and round ETA. The last test is a
real two-round flywheel run whose TensorBoard events are read back with TensorBoard's own
EventAccumulator."""

from __future__ import annotations

import logging

import pytest

from tasks.tracking import (
    Point,
    round_plan_of,
    round_points,
    steps_before,
    tracking_dir,
    write_mlflow,
    write_tensorboard,
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


def test_the_trainers_report_to_no_tracker_that_flywheel_writes(tmp_path):
    from models.runtime import TrainRuntime
    from models.trainer import common_arguments, trainer_reporter

    assert [trainer_reporter(r) for r in ("none", "tensorboard", "mlflow", "wandb")] == [
        "none", "none", "none", "wandb"]
    arguments = common_arguments(work_dir=tmp_path, steps=1, micro_batch=1,
                                 gradient_accumulation_steps=1, learning_rate=1e-3, save_steps=0,
                                 seed=0, runtime=TrainRuntime(report_to="tensorboard"))
    assert arguments["report_to"] == "none"


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
