"""The one shape of every JSON output of the `flywheel` command (`status --json`, `runs --json`,
`audit --format json`), so that a script reads them all the same way. It lives in `storage`
so the audit's rendering (storage/audit/) uses it as the commands in flows/ do.

    {"run_id": "demo", "status": "completed", "created_at": "2025-06-01T09:30:12.345Z",
     "incumbent": {"round": null, "model": "base", "accuracy": 0.1, ...},
     "rounds": [{"round": null, "model": "base", "held_out_accuracy": 0.1, ...},
                {"round": 0, "model": "candidate", "held_out_accuracy": 0.3, ...}]}

- keys are snake_case field names, never a table's display labels (`held_out_accuracy`, not
  "held-out acc"); the producers name them so (storage/audit/round_summary.py `SUMMARY_FIELDS`,
  storage/runs.py), and tests/flows/test_operator_json.py checks every output (an `audit
  --sql` row is keyed by the query's own column names);
- a round is an integer or null, never "base": a separate `model` field says whose row it is
  ("base" for the base model, "candidate" for a round's candidate);
- a time is an ISO-8601 UTC string (`iso_utc`): the catalog stores times as epoch seconds, and
  every field named `*_at` is one, so the rule lives here once rather than in each command;
- NaN and infinities are null (JSON has neither); dataclasses become objects, paths strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def iso_utc(seconds: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds: `2025-06-01T09:30:12.345Z`."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_ready(value: Any, key: str = "") -> Any:
    """`value` with the rules of the module docstring applied, all the way down.

    Parameters
    ----------
    value
        What a command prints: dicts, lists, dataclasses, numbers, strings, None.
    key
        The field `value` is stored under (a `*_at` number is a time).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {name: json_ready(item, name) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if key.endswith("_at") and isinstance(value, int | float) and not isinstance(value, bool):
        return iso_utc(value)
    if isinstance(value, Path):
        return str(value)
    return value


def to_json(value: Any) -> str:
    """`value` as indented JSON text (`json_ready`); anything else unknown becomes its str."""
    return json.dumps(json_ready(value), indent=2, default=str, allow_nan=False)
