"""Damage a gate cannot see is caught: `flywheel validate` compares every recorded output with its
catalog row (storage/integrity.py) and exits 5 naming each damaged file and how, and `flywheel
status` of a completed run whose files were damaged since says `damaged`, not `completed`.

The run here is built in-process: a problems and a verdicts Parquet file and a checkpoint folder
(safetensors weights, config.json, tokenizer files), each recorded by the catalog as a stage
would record it. The gates of `validate` (Great Expectations, many seconds to import) are
replaced by a fake that passes, so what fails is the comparison alone; tests/validators/ test
the gates.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog
from storage.datasets import WrittenDataset, dataset_path, round_dir, write_atomic
from storage.fingerprint import checkpoint_checksum
from storage.integrity import check_run, output_damage
from tests.security.checkpoints import save_checkpoint

RUN = "r"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A completed run: round 0 synthesize (problems), verify (verdicts, rewards 1, 0, 1) and
    train (a checkpoint folder)."""
    root = tmp_path_factory.mktemp("pristine") / "data"
    catalog = Catalog(root)
    catalog.ensure_run(RUN, "{}")
    problems = write_atomic("problems", [
        {"problem_id": f"p{i}", "run_id": RUN, "round": 0, "text": f"{i}+1",
         "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}",
         "task": None, "payload": None} for i in range(3)],
        dataset_path(root, RUN, 0, "problems", "a" * 32))
    verdicts = write_atomic("verdicts", [
        {"rollout_id": f"o{i}", "run_id": RUN, "round": 0, "problem_id": f"p{i}",
         "answer": str(i + 1), "reward": float(i != 1), "method": "reference", "label": None,
         "agreement": None, "outcome": None, "verifier": "reference"} for i in range(3)],
        dataset_path(root, RUN, 0, "verdicts", "b" * 32))
    folder = round_dir(root, RUN, 0) / f"checkpoint-{'c' * 12}"
    save_checkpoint(folder)
    checkpoint = WrittenDataset("checkpoint", folder, 3, checkpoint_checksum(folder))
    for stage, fingerprint, output in (("synthesize", "a" * 32, problems),
                                       ("verify", "b" * 32, verdicts),
                                       ("train", "c" * 32, checkpoint)):
        catalog.record_completed(run_id=RUN, round_index=0, stage=stage, fingerprint=fingerprint,
                                 started_at=time.time(), outputs=[output], inputs={}, metrics={})
    catalog.set_run_status(RUN, "completed")
    return root


@pytest.fixture
def data_root(pristine, tmp_path, monkeypatch):
    """A copy of the pristine run to damage (times kept, as `cp -a` keeps them; the catalog
    records paths relative to its data root, so the copy reads its own files)."""
    root = tmp_path / "data"
    shutil.copytree(pristine, root)
    monkeypatch.setattr("validators.gate.validate_stored", lambda *args, **kwargs: [])
    return root


def _verdicts(root: Path) -> Path:
    return dataset_path(root, RUN, 0, "verdicts", "b" * 32)


def _weights(root: Path) -> Path:
    return round_dir(root, RUN, 0) / f"checkpoint-{'c' * 12}" / "model.safetensors"


def _later(path: Path) -> None:
    """Date `path` a second after now: an edit made after the run. (A file system stamps files
    with a clock coarser than `time.time()`, so an edit milliseconds after the catalog row
    could carry an earlier time.)"""
    later = time.time() + 1
    os.utime(path, (later, later))


def _flip_reward(root: Path) -> Path:
    """Rewrite the verdicts with the first reward 1 -> 0: in range, same rows, same schema."""
    path = _verdicts(root)
    table = pq.read_table(path)
    rewards = table.column("reward").to_pylist()
    assert rewards[0] == 1.0
    column = table.schema.get_field_index("reward")
    table = table.set_column(column, table.schema.field(column), [[0.0, *rewards[1:]]])
    pq.write_table(table, path)
    _later(path)
    return path


def _cli(*args: str, root: Path):
    return CliRunner().invoke(app, [*args, "--data-root", str(root)])


def test_an_intact_run_validates_and_is_completed(data_root):
    assert check_run(Catalog(data_root), RUN).damaged == []
    checked = _cli("validate", RUN, root=data_root)
    assert checked.exit_code == 0, checked.output
    assert "3 recorded outputs compared with the catalog, 0 damaged" in checked.stdout
    shown = _cli("status", RUN, root=data_root)
    assert shown.exit_code == 0 and shown.stdout.splitlines()[0] == f"run {RUN}: completed"
    listed = _cli("runs", "--json", root=data_root)
    assert [r["status"] for r in json.loads(listed.stdout) if r["run_id"] == RUN] == ["completed"]


def test_a_reward_flipped_in_range_is_a_changed_checksum(data_root):
    path = _flip_reward(data_root)
    checked = _cli("validate", RUN, root=data_root)
    assert checked.exit_code == 5, checked.output
    damaged = [line for line in checked.stdout.splitlines() if line.startswith("DAMAGED")]
    assert len(damaged) == 1, checked.stdout
    assert damaged[0].startswith(f"DAMAGED  round 0 verify: {path}: changed since it was "
                                 "recorded (sha256 "), damaged
    assert "3 recorded outputs compared with the catalog, 1 damaged" in checked.stdout
    shown = _cli("status", RUN, root=data_root)
    assert shown.exit_code == 5, shown.output
    first = shown.stdout.splitlines()[0]
    assert first.startswith(f"run {RUN}: damaged: round 0 verify: {path}: changed since"), first
    assert f"`flywheel validate {RUN}`" in first


def test_a_checkpoint_without_its_weights_is_damaged(data_root):
    _weights(data_root).unlink()
    checked = _cli("validate", RUN, "--format", "json", root=data_root)
    assert checked.exit_code == 5, checked.output
    report = json.loads(checked.stdout)
    assert report["ok"] is False and report["outputs_compared"] == 3
    (damage,) = report["damaged"]
    assert damage["problem"] == "no_weights" and damage["kind"] == "checkpoint"
    assert damage["path"] == str(_weights(data_root).parent)
    assert "model.safetensors" in damage["detail"]
    shown = _cli("status", RUN, "--json", root=data_root)
    assert shown.exit_code == 5, shown.output
    assert json.loads(shown.stdout)["status"] == "damaged"
    listed = _cli("runs", "--json", root=data_root)  # the list says what `status` says
    assert [r["status"] for r in json.loads(listed.stdout) if r["run_id"] == RUN] == ["damaged"]


def test_validate_names_every_damaged_file_and_checks_only_the_stage_asked(data_root):
    _flip_reward(data_root)
    problems = dataset_path(data_root, RUN, 0, "problems", "a" * 32)
    problems.unlink()
    checked = _cli("validate", RUN, "--format", "json", root=data_root)
    assert checked.exit_code == 5, checked.output
    assert [(d["stage"], d["problem"]) for d in json.loads(checked.stdout)["damaged"]] == [
        ("synthesize", "missing"), ("verify", "checksum")]
    only_train = _cli("validate", RUN, "--stage", "train", root=data_root)
    assert only_train.exit_code == 0, only_train.output
    assert "1 recorded outputs compared with the catalog, 0 damaged" in only_train.stdout


def test_validate_format_is_text_or_json(data_root):
    result = _cli("validate", RUN, "--format", "yaml", root=data_root)
    assert result.exit_code == 2 and "--format 'yaml': use text or json" in result.stderr


def test_status_hashes_only_files_changed_since_they_were_recorded(data_root):
    """The cost of `status`: a file whose time was set back is not hashed there (so an edit
    that hid its time is left to `validate`, which hashes every file)."""
    path = _verdicts(data_root)
    stamp = path.stat()
    _flip_reward(data_root)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert _cli("status", RUN, root=data_root).exit_code == 0
    assert _cli("validate", RUN, root=data_root).exit_code == 5


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-40])


def _overwrite_one_weight(path: Path) -> None:
    """The last 4 bytes (a float of the tensor) changed: the header still reads."""
    data = bytearray(path.read_bytes())
    data[-4:] = b"\x00\x00\x80\x7f"
    path.write_bytes(bytes(data))


CHECKPOINT_DAMAGE = [
    ("weights truncated", lambda f: _truncate(f / "model.safetensors"), "weights_unreadable"),
    ("weights overwritten", lambda f: (f / "model.safetensors").write_bytes(b"\x01" * 4096),
     "weights_unreadable"),
    ("a weight changed", lambda f: _overwrite_one_weight(f / "model.safetensors"), "checksum"),
    ("config.json deleted", lambda f: (f / "config.json").unlink(), "config"),
    ("config.json not JSON", lambda f: (f / "config.json").write_bytes(b"\xff{"), "config"),
    ("config.json a list", lambda f: (f / "config.json").write_text("[]"), "config"),
    ("tokenizer.json deleted", lambda f: (f / "tokenizer.json").unlink(), "tokenizer"),
    ("tokenizer_config.json deleted", lambda f: (f / "tokenizer_config.json").unlink(),
     "tokenizer"),
    ("folder deleted", shutil.rmtree, "missing"),
]


@pytest.mark.parametrize(("damage", "problem"), [(d, p) for _, d, p in CHECKPOINT_DAMAGE],
                         ids=[name for name, _, _ in CHECKPOINT_DAMAGE])
def test_each_kind_of_checkpoint_damage_is_named(data_root, damage, problem):
    damage(_weights(data_root).parent)
    found = check_run(Catalog(data_root), RUN).damaged
    assert [(d.stage, d.problem) for d in found] == [("train", problem)], found


PARQUET_DAMAGE = [
    ("deleted", lambda p: p.unlink(), "missing"),
    ("truncated", _truncate, "unreadable"),
    ("a row dropped", lambda p: pq.write_table(pq.read_table(p).slice(1), p), "row_count"),
]


@pytest.mark.parametrize(("damage", "problem"), [(d, p) for _, d, p in PARQUET_DAMAGE],
                         ids=[name for name, _, _ in PARQUET_DAMAGE])
def test_each_kind_of_parquet_damage_is_named(data_root, damage, problem):
    damage(_verdicts(data_root))
    info = Catalog(data_root).completed_datasets(RUN, "b" * 32)["verdicts"]
    assert output_damage("verdicts", info)[0] == problem
