"""The preset run configs shipped with the package (configs/*.toml, in the wheel as package
data), found by name: `flywheel run --config r-zero` reads the installed `configs/r-zero.toml`
wherever pip put it, so a preset works without a source checkout.

A `--config` value that is an existing file is always that file; only a value naming no file
is looked up among the presets.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def presets() -> dict[str, Path]:
    """{name: file} of every shipped preset, e.g. {"r-zero": .../configs/r-zero.toml}."""
    folder = files("configs")
    return {Path(entry.name).stem: Path(str(entry)) for entry in sorted(
        folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".toml")}


def config_file(value: Path | None) -> Path | None:
    """The file a `--config` value names: itself when it exists (or is None), else the preset
    of that name (`r-zero`, `r-zero.toml` or `configs/r-zero.toml`, as the README writes it),
    else itself (loading it then says "file not found")."""
    if value is None or value.exists() or value.parent not in (Path("."), Path("configs")):
        return value
    return presets().get(value.name.removesuffix(".toml"), value)
