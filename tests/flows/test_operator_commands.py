"""The commands an operator reaches for: `--version`, `--set`, `config show|diff`, `runs`,
`checkpoint`, the presets by name, and the schedule's help and cron nicknames. A catalog is
written by hand where a command only reads it (no model is trained here)."""

from __future__ import annotations

import json
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from configs import load_config
from configs.presets import config_file, presets
from flows.cli import app
from flows.config_cli import parse_sets
from storage.catalog import Catalog
from storage.datasets import WrittenDataset
from storage.fingerprint import checkpoint_checksum
from tests.security.checkpoints import save_checkpoint


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_version_is_the_installed_distributions():
    code, output = _cli("--version")
    assert code == 0 and output.strip() == f"flywheel {version('flywheel')}"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["rounds=2"], {"rounds": 2}),
        (["train.warmup.max_steps=60", "rollout.temperature=0.7"],
         {"train.warmup.max_steps": 60, "rollout.temperature": 0.7}),
        (["gates.enabled=false"], {"gates.enabled": False}),
        (["model.path=/models/qwen 1.5b"], {"model.path": "/models/qwen 1.5b"}),  # not TOML
        (['domain.name="arithmetic"'], {"domain.name": "arithmetic"}),
        (["rounds=1", "rounds=3"], {"rounds": 3}),  # the last one wins
    ],
)
def test_set_values_are_read_as_toml_else_as_strings(values, expected):
    assert parse_sets(values) == expected


@pytest.mark.parametrize("bad", ["rounds", "=3", "train..lr=1", ".rounds=1"])
def test_a_malformed_set_is_a_user_error(tmp_path, bad):
    code, output = _cli("run", "--set", bad, "--data-root", str(tmp_path / "d"))
    assert code == 2 and f"--set {bad!r}: use KEY=VALUE" in output, output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("value", "in_run", "in_resume"),
    [("bogus.key=1", "unknown key `bogus`", "unknown key `bogus`"),
     ("rollout.samples_per_problem=0", "`rollout.samples_per_problem` = 0",
      "`rollout.samples_per_problem` = 0"),
     # the defaults have no `rounds` key to descend into; a recorded config has one
     ("rounds.x=1", "`rounds`: Input should be a valid integer", "cannot set `rounds.x`")],
)
def test_set_reaches_the_config_checks_of_run_and_resume(tmp_path, value, in_run, in_resume):
    data = tmp_path / "d"
    code, output = _cli("run", "--set", value, "--data-root", str(data))
    assert code == 2 and in_run in output and len(output.strip().splitlines()) == 1, output
    Catalog(data).ensure_run("r", load_config(None).model_dump_json())
    code, output = _cli("resume", "r", "--set", value, "--data-root", str(data))
    assert code == 2 and in_resume in output and "run r" in output, output


def test_resume_applies_set_to_the_recorded_config(tmp_path, monkeypatch):
    import flows.cli

    seen = {}
    monkeypatch.setattr(flows.cli, "_execute", lambda root, run_id, cfg: seen.update(cfg=cfg))
    Catalog(tmp_path).ensure_run("r", load_config(None, {"seed": 5}).model_dump_json())
    code, output = _cli("resume", "r", "--set", "gates.min_rows=3", "--data-root", str(tmp_path))
    assert code == 0, output
    assert seen["cfg"].gates.min_rows == 3 and seen["cfg"].seed == 5  # recorded, then --set


@pytest.mark.parametrize("preset", [None, *sorted(presets())])
def test_config_show_prints_toml_that_loads_back_to_the_same_config(tmp_path, preset):
    args = ["config", "show", "--set", "train.warmup.max_steps=61"]
    if preset is not None:
        args += ["--config", preset]
    code, output = _cli(*args)
    assert code == 0, output
    shown = tmp_path / "shown.toml"
    shown.write_text(output)
    expected = load_config(config_file(Path(preset)) if preset else None,
                           {"train.warmup.max_steps": 61})
    assert load_config(shown) == expected
    assert "max_steps = 61" in output


def test_config_show_of_a_run_and_diff_against_a_file(tmp_path):
    recorded = load_config(None, {"rounds": 7, "rollout.temperature": 0.5})
    Catalog(tmp_path / "d").ensure_run("r", recorded.model_dump_json())
    code, output = _cli("config", "show", "r", "--format", "json", "--data-root",
                        str(tmp_path / "d"))
    assert code == 0 and json.loads(output) == recorded.model_dump(mode="json")
    other = tmp_path / "other.toml"
    other.write_text("rounds = 2\n[rollout]\ntemperature = 0.5\n[train.warmup]\nmax_steps = 9\n")
    code, output = _cli("config", "diff", "r", str(other), "--data-root", str(tmp_path / "d"))
    default_steps = load_config(None).train.warmup.max_steps
    assert code == 0 and output.splitlines() == [
        "rounds: 7 -> 2", f"train.warmup.max_steps: {default_steps} -> 9"], output
    code, output = _cli("config", "show", "nope", "--data-root", str(tmp_path / "d"))
    assert code == 2 and "unknown run id 'nope'" in output


def test_a_preset_runs_by_name(tmp_path, monkeypatch):
    """`--config r-zero` and the README's `configs/r-zero.toml` reach the shipped preset from any
    working directory; an existing file of that name wins."""
    monkeypatch.chdir(tmp_path)
    preset = presets()["r-zero"]
    assert config_file(Path("r-zero")) == preset
    assert config_file(Path("configs/r-zero.toml")) == preset
    assert config_file(Path("no-such-preset")) == Path("no-such-preset")
    mine = Path("r-zero")
    mine.write_text("rounds = 1\n")
    assert config_file(mine) == mine
    assert {"tiny-cpu", "r-zero", "rest-em", "absolute-zero", "ttrl", "eva"} <= set(presets())


# ---- runs and checkpoint ---------------------------------------------------------------------


def _checkpoint(catalog: Catalog, run_id: str, round_index: int, stage: str, fp: str) -> Path:
    folder = (catalog.data_root / "runs" / run_id / f"round-{round_index:03d}"
              / f"checkpoint-{fp[:12]}")
    save_checkpoint(folder)  # intact, so `runs` and `status` do not call the run damaged
    catalog.record_completed(run_id=run_id, round_index=round_index, stage=stage, fingerprint=fp,
                             started_at=time.time(), inputs={},
                             outputs=[WrittenDataset("checkpoint", folder, 1,
                                                     checkpoint_checksum(folder))])
    return folder


@pytest.fixture
def two_runs(tmp_path):
    """Run `a`: base (acc 0.1), round 0 promoted (0.3), round 1 rejected (0.2), completed.
    Run `b`: base only, its catalog row says running but nobody holds its lock."""
    catalog = Catalog(tmp_path)
    catalog.ensure_run("a", load_config(None, {"rounds": 2}).model_dump_json())
    base = _checkpoint(catalog, "a", 0, "base", "b" * 32)
    catalog.record_completed(run_id="a", round_index=0, stage="baseline", fingerprint="e" * 32,
                             started_at=time.time(), outputs=[], inputs={},
                             metrics={"accuracy": 0.1})
    first = _checkpoint(catalog, "a", 0, "train", "c" * 32)
    second = _checkpoint(catalog, "a", 1, "train", "d" * 32)
    catalog.record_round(run_id="a", round_index=0, incumbent="b" * 32, candidate="c" * 32,
                         incumbent_accuracy=0.1, candidate_accuracy=0.3, promoted=True)
    catalog.record_round(run_id="a", round_index=1, incumbent="c" * 32, candidate="d" * 32,
                         incumbent_accuracy=0.3, candidate_accuracy=0.2, promoted=False)
    catalog.set_run_status("a", "completed")
    catalog.ensure_run("b", load_config(None, {"rounds": 0}).model_dump_json())
    b_base = _checkpoint(catalog, "b", 0, "base", "f" * 32)
    return tmp_path, {"a-base": base, "a0": first, "a1": second, "b-base": b_base}


def test_runs_lists_status_rounds_best_accuracy_and_the_promoted_checkpoint(two_runs):
    root, folders = two_runs
    code, output = _cli("runs", "--json", "--data-root", str(root))
    assert code == 0, output
    rows = {r["run_id"]: r for r in json.loads(output)}
    a, b = rows["a"], rows["b"]
    assert (a["status"], a["decided_rounds"], a["planned_rounds"]) == ("completed", 2, 3)
    assert a["best_accuracy"] == pytest.approx(0.3)
    assert a["incumbent"] == {"round": 0, "model": "candidate", "fingerprint": "c" * 32,
                              "accuracy": pytest.approx(0.3),
                              "path": str(folders["a0"].resolve())}
    assert b["status"] == "interrupted" and b["decided_rounds"] == 0
    assert (b["incumbent"]["round"], b["incumbent"]["model"]) == (None, "base")
    assert b["incumbent"]["path"] == str(folders["b-base"].resolve())
    code, output = _cli("runs", "--data-root", str(root))
    assert code == 0 and "completed" in output and "interrupted" in output and "2/3" in output


def test_checkpoint_prints_the_incumbents_folder(two_runs):
    root, folders = two_runs
    for args, folder in ((["a"], "a0"), (["a", "--round", "1"], "a0"),
                         (["a", "--round", "0"], "a0"), (["b"], "b-base")):
        code, output = _cli("checkpoint", *args, "--data-root", str(root))
        assert code == 0 and output.strip() == str(folders[folder].resolve()), (args, output)
    code, output = _cli("checkpoint", "nope", "--data-root", str(root))
    assert code == 2 and "unknown run id 'nope'" in output
    for run_id, round_index, has in (("a", "99", "its decided rounds: 0, 1"),
                                     ("a", "2", "its decided rounds: 0, 1"),
                                     ("a", "-1", "its decided rounds: 0, 1"),
                                     ("b", "0", "no round is decided yet")):
        code, output = _cli("checkpoint", run_id, "--round", round_index, "--data-root", str(root))
        assert code == 2, (run_id, round_index, output)  # never an earlier round's folder
        assert output.splitlines() == [
            f"error: run {run_id!r} has not decided round {round_index} ({has}); leave out "
            "--round for the latest incumbent"], output
    code, output = _cli("checkpoint", "a", "--data-root", str(root / "elsewhere"))
    assert code == 2 and "no catalog" in output
    import shutil

    shutil.rmtree(folders["a0"])
    code, output = _cli("checkpoint", "a", "--data-root", str(root))
    assert code == 2 and "is missing" in output and "flywheel resume a" in output


# ---- the schedule ----------------------------------------------------------------------------


def test_schedule_help_keeps_its_brackets_and_cron_nicknames_work():
    code, output = _cli("schedule", "show", "--help")
    assert code == 0 and "schedule.cron" in output and "default:  cron" not in output
    code, output = _cli("schedule", "show", "--cron", "@daily")
    assert code == 0 and "00:00" in output and len(output.splitlines()) == 6, output
    assert load_config(None, {"schedule.cron": "@hourly"}).schedule.cron == "@hourly"
    code, output = _cli("schedule", "show", "--cron", "@reboot")
    assert code == 2 and "not a nickname Prefect reads" in output
