"""Every input file a run reads is checked before the run writes anything: a bad one is one line
on stderr naming the file (and the line, byte offset or key) and the fix, exit 2, and the data
root stays as it was (no run folder, no catalog, no recorded config).

The files: the config TOML (not UTF-8, not TOML), a run's recorded `config.json` (not JSON, not
an object, not UTF-8) for `resume` and `config show RUN`, the dataset domain's JSONL and
Parquet files (a line that is `42` or `null`, a malformed line named by its own line number, a
question that is a JSON object, a question or answer past its length limit, a held-out file
that is the train file), the model folder (weights of random bytes, named by `model.path`) and
the reasoning-gym task names. Dataset and task errors were a failed stage (exit 4) 12-28 s
into a run; the CLI now builds the run's domain in its preflight (flows/cli.py
`_check_before_start`). Commands run in process (typer's CliRunner); no model is loaded.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.environment import CLI_DEFAULTS

GOOD_ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20)]


@pytest.fixture(autouse=True)
def _restore_process_state(monkeypatch):
    """`run` and `resume` set environment defaults and signal handlers for the process they
    expect to own; give both back after each test."""
    for key, value in CLI_DEFAULTS.items():
        monkeypatch.setenv(key, os.environ.get(key, value))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))} if root.exists() else {}


def _refused(args: list[str], data_root: Path) -> str:
    """The one stderr line of a command that must be refused before it writes anything."""
    before = _tree(data_root)
    code, stdout, stderr = _cli(*args, "--data-root", str(data_root))
    assert code == 2, (code, stdout, stderr)
    assert stdout == "" and len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("error: ") and "Traceback" not in stderr
    assert _tree(data_root) == before  # no run folder, no catalog, no config record
    return stderr.strip()


def _jsonl(path: Path, *lines: bytes) -> str:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def _rows(path: Path, rows: list[dict]) -> str:
    return _jsonl(path, *(json.dumps(r).encode() for r in rows))


def _dataset_run(tmp_path: Path, **dataset) -> list[str]:
    config = tmp_path / "run.toml"
    config.write_text("[domain]\nname = \"dataset\"\nmin_level = 1\nmax_level = 1\n\n"
                      "[domain.dataset]\n" + "".join(f"{key} = {json.dumps(value)}\n"
                                                     for key, value in dataset.items()))
    return ["run", "--run-id", "r1", "--config", str(config)]


GOOD = json.dumps(GOOD_ROWS[0]).encode()


@pytest.mark.parametrize(
    ("lines", "needle"),
    [((GOOD, b"42"), "train.jsonl line 2: a number, not a JSON object"),
     ((GOOD, b"null"), "train.jsonl line 2: null, not a JSON object"),
     ((GOOD, b"", b"", b'{"question": "x" "answer": "1"}'),
      "train.jsonl line 4: not JSON (Expecting ',' delimiter at column 18)"),
     ((GOOD, b'{"question": {"text": "What is 2 + 2?"}, "answer": "4"}'),
      "train.jsonl line 2: the question (column 'question') is a JSON object, not text"),
     ((GOOD, json.dumps({"question": "x" * 1_000_000, "answer": "1"}).encode()),
      "train.jsonl line 2: the question is 1,000,000 characters, more than "
      "domain.dataset.max_question_chars = 8,000"),
     ((GOOD, json.dumps({"question": "x", "answer": "1" * 2001}).encode()),
      "train.jsonl line 2: the answer is 2,001 characters, more than "
      "domain.dataset.max_answer_chars = 2,000")])
def test_a_bad_dataset_line_is_refused_before_the_run_starts(tmp_path, lines, needle):
    train = _jsonl(tmp_path / "train.jsonl", *lines, *(json.dumps(r).encode()
                                                       for r in GOOD_ROWS[1:]))
    line = _refused(_dataset_run(tmp_path, paths=[train]), tmp_path / "data")
    assert line.startswith(f"error: dataset error: {train} line ") and needle in line


def test_a_heldout_file_equal_to_the_train_file_names_both_and_the_key(tmp_path):
    train = _rows(tmp_path / "train.jsonl", GOOD_ROWS)
    line = _refused(_dataset_run(tmp_path, paths=[train], heldout_path=train), tmp_path / "d")
    assert (f"domain.dataset.heldout_path = {train!r} is the training file {train!r} of "
            "domain.dataset.paths") in line
    assert "set domain.dataset.heldout_path to a separate file" in line


def test_missing_dataset_files_and_no_files_are_refused(tmp_path):
    line = _refused(_dataset_run(tmp_path, paths=[str(tmp_path / "nope.jsonl")]), tmp_path / "d")
    assert f"{tmp_path / 'nope.jsonl'}: no such file (check domain.dataset.paths)" in line
    line = _refused(_dataset_run(tmp_path, paths=[]), tmp_path / "d")
    assert "domain.dataset.paths is empty" in line


def test_an_unknown_reasoning_gym_task_is_refused_before_the_run_starts(tmp_path):
    line = _refused(["run", "--run-id", "r1", "--set", "domain.name=reasoning_gym",
                     "--set", "domain.reasoning_gym.tasks={basic_arithmetc = 1.0}"],
                    tmp_path / "d")
    assert "domain.reasoning_gym.tasks names 'basic_arithmetc'" in line
    assert "close: ['basic_arithmetic'" in line


def test_a_config_that_is_not_utf8_names_the_file_and_byte_offset(tmp_path):
    config = tmp_path / "run.toml"
    config.write_bytes(b"rounds = 1\n# caf\xe9\n")
    line = _refused(["run", "--config", str(config)], tmp_path / "d")
    assert line == (f"error: config error in {config}: not UTF-8 text at byte offset 16 (line 2):"
                    " 0xe9; save the file as UTF-8")


def _model_folder(tmp_path: Path, weights: bytes) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_weights_of_random_bytes_are_refused_naming_model_path(tmp_path):
    folder = _model_folder(tmp_path, os.urandom(4096))
    line = _refused(["run", "--run-id", "r1", "--set", f"model.path={folder}"], tmp_path / "d")
    assert line.startswith(f"error: model.path = {str(folder)!r}: model.safetensors is not a "
                           "safetensors file (")
    assert "download the file again" in line


@pytest.mark.parametrize(("text", "needle"), [
    ("{not json", "the recorded config is not JSON (Expecting property name enclosed in double "
                  "quotes: line 1 column 2 (char 1))"),
    ("42", "the recorded config is a number, not a JSON object"),
    ('["rounds", 1]', "the recorded config is an array, not a JSON object"),
    (b"{\"rounds\": \xff}", "the recorded config cannot be read ('utf-8' codec can't decode "
                            "byte 0xff in position 11")])
def test_a_damaged_recorded_config_is_one_line_for_resume_and_config_show(tmp_path, text,
                                                                          needle):
    data_root = tmp_path / "d"
    record = data_root / "runs" / "r1" / "config.json"
    record.parent.mkdir(parents=True)
    record.write_bytes(text if isinstance(text, bytes) else text.encode())
    for args in (["resume", "r1"], ["config", "show", "r1"]):
        line = _refused(args, data_root)
        assert line.startswith(f"error: config error in {record}: ") and needle in line, line
        assert "restore that file, or give the config again: `flywheel resume r1 --config FILE`" \
            in line
    # --config replaces the damaged record: the run gets as far as checking its own inputs
    train = _jsonl(tmp_path / "train.jsonl", b"null")
    config = _dataset_run(tmp_path, paths=[train])[-1]
    line = _refused(["resume", "r1", "--config", config], data_root)
    assert f"{train} line 1: null, not a JSON object" in line


def _safetensors(path: Path) -> bytes:
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(path))
    return path.read_bytes()


@pytest.mark.parametrize(("damage", "needle"), [
    (lambda f: (f / "model.safetensors").write_bytes(_safetensors(f / "model.safetensors")[:-8]),
     "model.safetensors is not a safetensors file (Error while deserializing header: incomplete "
     "metadata"),
    (lambda f: (f / "model.safetensors").write_bytes(b""), "header too small"),
    (lambda f: ((f / "model.safetensors").unlink(),
                (f / "pytorch_model.bin").write_bytes(os.urandom(64))),
     "pytorch_model.bin is not a torch.save checkpoint"),
    (lambda f: (f / "model.safetensors.index.json").write_text(
        '{"weight_map": {"w": "../model.safetensors"}}'),
     "model.safetensors.index.json names the shard '../model.safetensors', which is not a file "
     "of the folder"),
    (lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": {}}'),
     "model.safetensors.index.json has no weight_map"),
    (lambda f: (f / "config.json").write_text("42"), "config.json is not valid JSON: not an "
                                                     "object"),
    (lambda f: (f / "config.json").write_text("{}"), "config.json has no model_type"),
    (lambda f: (f / "tokenizer.json").write_bytes(b"\xff\xfe"), "tokenizer.json is not valid "
                                                                "JSON ("),
])
def test_a_damaged_model_folder_names_model_path_and_the_file(tmp_path, damage, needle):
    from models.preflight import ModelUnfit, check_model_folder

    folder = _model_folder(tmp_path, b"")
    _safetensors(folder / "model.safetensors")
    check_model_folder(str(folder))  # whole: it passes
    damage(folder)
    with pytest.raises(ModelUnfit) as info:
        check_model_folder(str(folder))
    assert str(info.value).startswith(f"model.path = {str(folder)!r}: ") and needle in str(
        info.value), info.value
    assert "\n" not in str(info.value)


def test_a_legacy_and_a_zip_torch_checkpoint_pass(tmp_path):
    import torch

    from models.preflight import check_model_folder

    folder = _model_folder(tmp_path, b"")
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model-00002-of-00002.bin",
               _use_new_zipfile_serialization=False)
    check_model_folder(str(folder))
