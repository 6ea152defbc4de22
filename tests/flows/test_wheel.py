"""The presets ship in a non-editable install: a wheel built from the source tree holds every
configs/*.toml, and installed from it (not from the checkout) `--config r-zero` finds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("configs", "domains", "flows", "models", "schedules", "storage", "tasks", "validators")


@pytest.mark.slow
def test_a_wheel_ships_the_presets_and_an_install_from_it_finds_them(tmp_path):
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", str(source), "-w", str(tmp_path / "dist")], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("flywheel-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".toml")}
    assert shipped == {f"configs/{p.name}" for p in (REPO / "configs").glob("*.toml")}
    templates = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".j2")}
    assert templates == {f"storage/audit/templates/{p.name}"  # the report's HTML
                         for p in (REPO / "storage" / "audit" / "templates").glob("*.j2")}

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, timeout=300)
    probe = ("import json, configs, configs.presets as p; from configs import load_config; "
             "print(json.dumps([configs.__file__, str(p.config_file(__import__('pathlib')"
             ".Path('r-zero'))), load_config(p.config_file(__import__('pathlib').Path("
             "'r-zero'))).verify.labels]))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    module, preset, labels = json.loads(out)
    assert Path(module).is_relative_to(site), "imported the checkout, not the installed wheel"
    assert Path(preset) == site / "configs" / "r-zero.toml" and labels == "majority"
