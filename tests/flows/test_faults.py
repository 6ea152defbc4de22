"""What can be checked before a run starts fails before it writes anything: exit 2, one line
naming the path or key and the fix, no traceback, no catalog row and no run folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage.catalog import Catalog


def _flywheel(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def _setup(case: str, tmp: Path) -> tuple[str, Path]:
    """(the run config's TOML, the data root) with one fault in place."""
    root = tmp / "data"
    toml = "rounds = 0\n"
    if case == "missing model folder":
        toml += f"[model]\npath = {str(tmp / 'nowhere')!r}\n"
    elif case == "empty model folder":
        (tmp / "empty").mkdir()
        toml += f"[model]\npath = {str(tmp / 'empty')!r}\n"
    elif case == "model too large":
        toml += "[model]\nhidden_size = 4096\nnum_layers = 64\n"
    elif case == "cuda without a GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        toml += "[train]\ndevice = 'cuda'\n"
    elif case == "data root is a file":
        root.write_text("not a folder")
    elif case == "truncated catalog":
        catalog = Catalog(root)
        catalog.ensure_run("earlier", "{}")
        catalog.path.write_bytes(catalog.path.read_bytes()[:4096])
    else:
        raise AssertionError(case)
    return toml, root


CASES = {
    "missing model folder": "no such folder",
    "empty model folder": "no config.json there",
    "model too large": "B parameters; training it needs about",
    "data root is a file": "is a file, not a folder",
    "cuda without a GPU": "torch sees no CUDA device",
    "truncated catalog": "cannot be read",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fault_found_before_the_start_is_one_line_and_writes_nothing(tmp_path, case):
    toml, root = _setup(case, tmp_path)
    config = tmp_path / "run.toml"
    config.write_text(toml)
    before = sorted(p.name for p in root.iterdir()) if root.is_dir() else None
    result = _flywheel("run", "--config", str(config), "--run-id", "faulty", "--data-root",
                       str(root), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: ") and CASES[case] in lines[0], lines
    after = sorted(p.name for p in root.iterdir()) if root.is_dir() else None
    assert after == before, "nothing was written: no catalog, no run folder, no lock"


def test_resume_of_a_truncated_catalog_is_one_line(tmp_path):
    _, root = _setup("truncated catalog", tmp_path)
    result = _flywheel("resume", "earlier", "--data-root", str(root), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: catalog ") and "cannot be read" in result.stderr
