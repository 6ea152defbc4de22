"""The train stage's crash handling without training a model: which trainer checkpoint it
resumes from, and the out-of-memory retry (the trainer is a fake; tests/flows/test_resume.py
kills a real training)."""

import json
import logging

import pytest

from configs import load_config
from models import trainer
from models.passes import PLAN_FILE, resumable_training
from models.trainer import TrainResult, last_checkpoint
from storage.datasets import dataset_path, write_atomic
from tasks.context import Checkpoint, RunContext
from tasks.stage import StageOutput
from tasks.train import train


def _checkpoint(folder, step, complete=True):
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (path / name).write_bytes(b"x")
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_last_complete_checkpoint_wins_and_incomplete_ones_are_reported(tmp_path):
    _checkpoint(tmp_path, 10)
    good = _checkpoint(tmp_path, 20)
    torn = _checkpoint(tmp_path, 30, complete=False)  # killed while saving
    assert last_checkpoint(tmp_path) == (good, [torn])
    assert last_checkpoint(tmp_path / "nothing") == (None, [])


def test_resumable_training_discards_torn_saves_and_announces_the_step(tmp_path, caplog):
    scratch = tmp_path / ".train-abc"
    good = _checkpoint(scratch / "trainer", 20)
    torn = _checkpoint(scratch / "trainer", 30, complete=False)
    (scratch / "model").mkdir()  # a final save that was interrupted
    with caplog.at_level(logging.WARNING, logger="flywheel.recovery"):
        assert resumable_training(scratch, 1, "round 0 train") == good
    lines = [r.getMessage() for r in caplog.records]
    assert any(str(torn) in line and "incomplete trainer checkpoint" in line for line in lines)
    assert any("resuming from the trainer's checkpoint at step 20" in line for line in lines)
    assert not torn.exists() and not (scratch / "model").exists()


@pytest.fixture
def train_inputs(tmp_path):
    config = load_config(None, {"rounds": 0, "train.batch_size": 64,
                                "train.oom_retry_batch_size": 16, "gates.enabled": False})
    ctx = RunContext(data_root=tmp_path, run_id="r", config=config)
    rows = [{"train_row_id": f"t{i}", "run_id": "r", "round": 0, "role": "solver",
             "prompt": f"<solve>{i}+1=", "completion": str(i + 1), "rejected": None, "weight": 1.0,
             "problem_id": f"p{i}", "rollout_id": None, "proposal_id": f"q{i}"} for i in range(8)]
    path = write_atomic("train_rows", rows,
                        dataset_path(tmp_path, "r", 0, "train_rows", "a" * 32)).path
    curated = StageOutput("curate", 0, "a" * 32, {"train_rows": path}, skipped=False)
    return ctx, 0, Checkpoint(path=tmp_path, fingerprint="b" * 32), curated


def test_out_of_memory_retries_with_a_smaller_micro_batch(train_inputs, monkeypatch, caplog):
    calls = []

    def fake_train_sft(**kwargs):
        calls.append(kwargs["gradient_accumulation_steps"])
        if kwargs["gradient_accumulation_steps"] == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        kwargs["out_dir"].mkdir(parents=True)
        (kwargs["out_dir"] / "model.safetensors").write_bytes(b"weights")
        plan = json.loads((kwargs["out_dir"].parent / PLAN_FILE).read_text())
        assert plan == {"gradient_accumulation_steps": 4}
        return TrainResult(steps=1, final_loss=1.0, mean_loss=1.0, trained_tokens=8)

    monkeypatch.setattr(trainer, "train_sft", fake_train_sft)
    with caplog.at_level(logging.WARNING, logger="flywheel.recovery"):
        checkpoint = train.fn(*train_inputs, [])
    assert calls == [1, 4]
    assert (checkpoint.path / "model.safetensors").read_bytes() == b"weights"
    assert any("out of memory at batch 64; retrying" in r.getMessage() for r in caplog.records)


def test_other_errors_are_not_retried_in_the_stage(train_inputs, monkeypatch):
    calls = []

    def fake_train_sft(**kwargs):
        calls.append(kwargs["gradient_accumulation_steps"])
        raise ValueError("no training rows with weight > 0; nothing to train")

    monkeypatch.setattr(trainer, "train_sft", fake_train_sft)
    with pytest.raises(ValueError, match="no training rows"):
        train.fn(*train_inputs, [])
    assert calls == [1]
