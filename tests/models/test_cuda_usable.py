"""`device = "auto"` resolves without importing torch on a Linux machine with no GPU driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHECK = textwrap.dedent("""
    import sys
    from models.runtime import cuda_usable

    print(cuda_usable(tuple(sys.argv[1:])), "torch" in sys.modules)
""")


def _check(*driver_paths: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHECK, *driver_paths], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the driver files are Linux's")
def test_no_gpu_driver_means_no_cuda_without_importing_torch(tmp_path):
    assert _check(str(tmp_path / "no-driver")) == ["False False"]
    driver = tmp_path / "nvidiactl"
    driver.touch()  # a driver is there: torch is asked
    import torch

    assert _check(str(driver)) == [f"{torch.cuda.is_available()} True"]


def test_on_this_machine_it_answers_as_torch_does():
    import torch

    from models.runtime import cuda_usable

    assert cuda_usable() == torch.cuda.is_available()
