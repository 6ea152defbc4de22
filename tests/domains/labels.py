"""Problem rows for verifier tests that only need a label: `judge(completions, labelled(...))`."""

from __future__ import annotations

from typing import Any


def labelled(references: list[str | None], text: str = "") -> list[dict[str, Any]]:
    """One problem row per reference (text `text`, level 1, no task or payload)."""
    return [{"text": text, "reference": r, "level": 1, "task": None, "payload": None}
            for r in references]
