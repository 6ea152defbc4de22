"""`flywheel config diff` takes what `run --config` takes: a preset by its name, besides files and
run ids; a recorded run of the same id comes first."""

from __future__ import annotations

from typer.testing import CliRunner

from configs import load_config
from configs.presets import presets
from flows.cli import app
from storage.catalog import Catalog


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_diff_of_two_presets_by_name(tmp_path):
    code, output = _cli("config", "diff", "tiny-cpu", "r-zero", "--data-root", str(tmp_path))
    assert code == 0, output
    tiny, r_zero = load_config(presets()["tiny-cpu"]), load_config(presets()["r-zero"])
    assert tiny.train.proposer.algorithm != r_zero.train.proposer.algorithm
    assert (f"train.proposer.algorithm: \"{tiny.train.proposer.algorithm}\" -> "
            f"\"{r_zero.train.proposer.algorithm}\"") in output.splitlines(), output
    code, same = _cli("config", "diff", "r-zero", "configs/r-zero.toml", "--data-root",
                      str(tmp_path))
    assert (code, same.strip()) == (0, "no differences")
    code, shown = _cli("config", "show", "r-zero", "--data-root", str(tmp_path))
    (tmp_path / "shown.toml").write_text(shown)
    assert code == 0 and load_config(tmp_path / "shown.toml") == r_zero


def test_a_run_named_like_a_preset_is_the_run(tmp_path):
    recorded = load_config(None, {"rounds": 7})
    Catalog(tmp_path).ensure_run("r-zero", recorded.model_dump_json())
    code, output = _cli("config", "diff", "r-zero", "tiny-cpu", "--data-root", str(tmp_path))
    assert code == 0 and "rounds: 7 -> " in output, output
    code, output = _cli("config", "diff", "no-such-name", "tiny-cpu", "--data-root",
                        str(tmp_path))
    assert code == 2 and "unknown run id 'no-such-name'" in output
