"""Bad input: one-line error naming the key or path, non-zero exit, nothing written."""

import subprocess
import sys

import pytest


def _flywheel(*args, cwd):
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("toml", "args", "needle"),
    [
        ("bogus = 1\n", [], "unknown key `bogus`"),
        ("", ["--rounds", "-1"], "`rounds` = -1"),
        ("[rollout]\nsamples_per_problem = 0\n", [], "`rollout.samples_per_problem` = 0"),
        (None, [], "file not found"),
    ],
)
def test_bad_config_is_one_line_and_writes_nothing(tmp_path, toml, args, needle):
    config = tmp_path / "run.toml"
    if toml is not None:
        config.write_text(toml)
    data_root = tmp_path / "data"
    result = _flywheel("run", "--config", str(config), "--data-root", str(data_root), *args,
                       cwd=tmp_path)
    assert result.returncode == 2
    assert needle in result.stderr
    assert str(config) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not data_root.exists()


def test_bad_run_id_and_unknown_run(tmp_path):
    result = _flywheel("run", "--run-id", "../escape", "--data-root", str(tmp_path / "d"),
                       cwd=tmp_path)
    assert result.returncode == 2 and "--run-id" in result.stderr
    assert not (tmp_path / "d").exists()
    result = _flywheel("status", "nope", "--data-root", str(tmp_path / "d"), cwd=tmp_path)
    assert result.returncode == 2 and "no catalog" in result.stderr
