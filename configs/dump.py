"""A run config written back as TOML (`flywheel config show`) and as dotted keys (`config diff`).

    rounds = 3
    seed = 0

    [model]
    # path = (unset)
    hidden_size = 64

    [train.warmup]
    max_steps = 600

TOML has no null: an unset key (None) is written as a comment, so the text loads back to the
same config (`load_config`). Arrays of tables are written inline.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def toml_value(value: Any) -> str:
    """One TOML value: a string, number, boolean, array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()
                               if v is not None) + "}"
    msg = f"cannot write {value!r} ({type(value).__name__}) as TOML"
    raise TypeError(msg)


def to_toml(data: dict[str, Any], *, prefix: str = "") -> str:
    """`data` (nested dicts of JSON values, as `RunConfig.model_dump(mode="json")` gives) as a
    TOML document: a section's plain keys first, then its sub-sections as `[a.b]` tables."""
    lines = []
    for name, value in data.items():
        if isinstance(value, dict):
            continue
        lines.append(f"# {_key(name)} = (unset)" if value is None
                     else f"{_key(name)} = {toml_value(value)}")
    for name, value in data.items():
        if isinstance(value, dict):
            table = f"{prefix}{_key(name)}"
            lines.extend(["", f"[{table}]", to_toml(value, prefix=f"{table}.").rstrip("\n")])
    text = "\n".join(line for line in lines)
    return text.lstrip("\n") + "\n"


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train.warmup.max_steps": 600, ...}: every leaf of nested dicts under its dotted key."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out
