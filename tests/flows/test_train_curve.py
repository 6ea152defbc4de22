"""The train stage keeps its training curve (models/trainer.py `curve_points`, tasks/train.py
`curve_metrics`) and `[train] report_to` chooses an extra reporter, checked before a run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from configs import ConfigError, RunConfig, load_config
from models.trainer import TrainResult, check_reporter, curve_points
from tasks.fingerprints import stage_fingerprints
from tasks.train import curve_metrics, train_settings

HISTORY = [
    {"loss": 2.5, "grad_norm": 1.5, "learning_rate": 0.001, "epoch": 0.5, "step": 10},
    {"loss": 1.25, "grad_norm": None, "learning_rate": 0.0005, "epoch": 1.0, "step": 20},
    {"train_runtime": 3.0, "train_loss": 1.9, "epoch": 1.0, "step": 20},  # the closing summary
]


def test_curve_points_keep_step_loss_learning_rate_and_grad_norm_where_logged():
    assert curve_points(HISTORY) == (
        {"step": 10.0, "loss": 2.5, "learning_rate": 0.001, "grad_norm": 1.5},
        {"step": 20.0, "loss": 1.25, "learning_rate": 0.0005},
    )


def test_curve_metrics_count_later_passes_on_after_the_earlier_ones():
    first = TrainResult(steps=20, final_loss=1.25, mean_loss=1.9, trained_tokens=0,
                        curve=curve_points(HISTORY))
    second = TrainResult(steps=10, final_loss=0.5, mean_loss=0.5, trained_tokens=0,
                         curve=({"step": 10.0, "loss": 0.5},))
    assert curve_metrics([first, second]) == {
        "curve/loss/10": 2.5, "curve/learning_rate/10": 0.001, "curve/grad_norm/10": 1.5,
        "curve/loss/20": 1.25, "curve/learning_rate/20": 0.0005, "curve/loss/30": 0.5}


def test_report_to_is_validated_and_stays_out_of_the_train_fingerprint():
    with pytest.raises(ConfigError, match="report_to"):
        load_config(None, {"train.report_to": "comet"})
    chosen = load_config(None, {"train.report_to": "tensorboard"})
    assert chosen.train.report_to == "tensorboard" and RunConfig().train.report_to == "none"
    for round_index in (0, 1):
        assert train_settings(chosen, round_index) == train_settings(RunConfig(), round_index)
    assert stage_fingerprints(chosen, rounds=1) == stage_fingerprints(RunConfig(), rounds=1)


@pytest.mark.parametrize("reporter", ["tensorboard", "mlflow", "wandb"])
def test_a_reporter_whose_package_is_missing_is_one_line_before_the_run(tmp_path, reporter,
                                                                         monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == reporter else real(name, *a))
    with pytest.raises(ValueError, match=f"needs the {reporter} package"):
        check_reporter(reporter)
    check_reporter("none")
    from flows.cli import app

    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["run", "--set", f"train.report_to={reporter}",
                                      "--data-root", str(data)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"train.report_to = '{reporter}'" in lines[0], lines
    assert f"pip install {reporter}" in lines[0]
    assert not (data / "runs").exists() and not (data / "catalog.duckdb").exists()
