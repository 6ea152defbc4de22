"""Every run of a data root at a glance, and the checkpoint each one promoted: `flywheel runs`
and `flywheel checkpoint RUN_ID`.

    {"run_id": "demo", "status": "completed", "last_stage_status": "completed",
     "created_at": 1.7e9, "updated_at": 1.7e9, "planned_rounds": 4, "decided_rounds": 4,
     "best_accuracy": 0.4, "incumbent": Incumbent(round=3, fingerprint="9f3c...", accuracy=0.4,
                                                  path="/data/runs/demo/round-003/checkpoint-9f3c...")}

The incumbent after round N is the candidate of round N when it was promoted, else the
incumbent that entered round N; before any round is decided it is the base model (round
None). A round the run has not decided has no incumbent: asking for one is `UndecidedRound`,
never the answer of an earlier round. Times are epoch seconds, as the catalog stores them
(`--json` prints them as ISO-8601, storage/json_output.py). Reads the catalog only (no torch,
no Prefect).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from storage.catalog import Catalog


@dataclass(frozen=True)
class Incumbent:
    """A run's promoted checkpoint: the round that promoted it (None: the base model), its
    fingerprint, held-out accuracy (None when not evaluated) and folder (None when unknown)."""

    round: int | None
    fingerprint: str
    accuracy: float | None
    path: str | None

    @property
    def model(self) -> str:
        """Which model it is: "base" (round None), else "candidate" (a round's promoted)."""
        return "base" if self.round is None else "candidate"

    def record(self) -> dict[str, Any]:
        """The incumbent as `--json` prints it: its fields, with `model` after `round`."""
        return {"round": self.round, "model": self.model, "fingerprint": self.fingerprint,
                "accuracy": self.accuracy, "path": self.path}


class UndecidedRound(ValueError):
    """`incumbent` of a round the run has not decided; the message names the rounds it has."""

    def __init__(self, run_id: str, round_index: int, decided: list[int]) -> None:
        has = (f"its decided rounds: {', '.join(map(str, decided))}" if decided
               else "no round is decided yet")
        super().__init__(f"run {run_id!r} has not decided round {round_index} ({has}); leave "
                         "out --round for the latest incumbent")


def checkpoint_path(catalog: Catalog, run_id: str, fingerprint: str,
                    config_json: str | None) -> str | None:
    """The folder of the run's checkpoint `fingerprint`: its recorded dataset, else (the base
    model of a `model.path` run, recorded by no stage) the run config's `model.path`."""
    rows = catalog.query(
        "SELECT d.path FROM datasets d JOIN stages s ON d.run_id = s.run_id"
        " AND d.fingerprint = s.fingerprint AND s.status = 'completed'"
        " WHERE d.run_id = ? AND d.fingerprint = ? AND d.kind = 'checkpoint' LIMIT 1",
        [run_id, fingerprint])
    if rows:
        return catalog.resolve(rows[0]["path"])
    model_path = (json.loads(config_json or "{}").get("model") or {}).get("path")
    return str(model_path) if model_path else None  # a local model folder: no dataset row


def _base(catalog: Catalog, run_id: str, config_json: str | None) -> Incumbent | None:
    base = catalog.query(
        "SELECT fingerprint FROM stages WHERE run_id = ? AND stage = 'base'"
        " AND status = 'completed' ORDER BY finished_at DESC LIMIT 1", [run_id])
    if not base:
        return None
    accuracy = catalog.query(
        "SELECT value FROM metrics WHERE run_id = ? AND stage = 'baseline'"
        " AND name = 'accuracy'", [run_id])
    fingerprint = base[0]["fingerprint"]
    return Incumbent(None, fingerprint, accuracy[0]["value"] if accuracy else None,
                     checkpoint_path(catalog, run_id, fingerprint, config_json))


def incumbent(catalog: Catalog, run_id: str, round_index: int | None = None) -> Incumbent | None:
    """The checkpoint that is the run's incumbent after `round_index` (None: its last decided
    round).

    Parameters
    ----------
    catalog
        The data root's catalog (it must exist).
    run_id
        The run.
    round_index
        The round; rounds after it are ignored.

    Returns
    -------
    Incumbent or None
        None when the run has neither a decided round nor a base model.

    Raises
    ------
    UndecidedRound
        `round_index` is not one of the run's decided rounds.
    """
    if round_index is not None:
        decided = decided_rounds(catalog, run_id)
        if round_index not in decided:
            raise UndecidedRound(run_id, round_index, decided)
    config = catalog.run_config_json(run_id)
    decided = catalog.query(
        "SELECT round, incumbent, candidate, incumbent_accuracy, candidate_accuracy, promoted"
        " FROM rounds WHERE run_id = ? AND (? IS NULL OR round <= ?) ORDER BY round DESC LIMIT 1",
        [run_id, round_index, round_index])
    if not decided:
        return _base(catalog, run_id, config)
    last = decided[0]
    promoted = bool(last["promoted"]) and last["candidate"] is not None
    fingerprint = last["candidate"] if promoted else last["incumbent"]
    accuracy = last["candidate_accuracy"] if promoted else last["incumbent_accuracy"]
    winner_round = last["round"] if promoted else _promoted_round(catalog, run_id, fingerprint)
    return Incumbent(winner_round, fingerprint, accuracy,
                     checkpoint_path(catalog, run_id, fingerprint, config))


def decided_rounds(catalog: Catalog, run_id: str) -> list[int]:
    """The rounds of `run_id` with a promotion decision, in order."""
    return [r["round"] for r in catalog.query(
        "SELECT round FROM rounds WHERE run_id = ? ORDER BY round", [run_id])]


def _promoted_round(catalog: Catalog, run_id: str, fingerprint: str) -> int | None:
    rows = catalog.query("SELECT min(round) AS r FROM rounds WHERE run_id = ? AND candidate = ?"
                         " AND promoted", [run_id, fingerprint])
    return rows[0]["r"] if rows else None


def runs_overview(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per run of the catalog, oldest first (the module docstring shows one).

    Parameters
    ----------
    catalog
        The data root's catalog (it must exist).

    Returns
    -------
    list of dict
        run_id, status (as recorded), last_stage_status (the newest stage row's; None without
        one), created_at, updated_at, planned_rounds (warm-up included), decided_rounds,
        best_accuracy (the best held-out accuracy of any checkpoint of the run, the base model's
        included) and incumbent (`incumbent`).
    """
    runs = catalog.query(
        "SELECT r.run_id, r.status, r.config_json, r.created_at, r.updated_at,"
        " (SELECT s.status FROM stages s WHERE s.run_id = r.run_id"
        "  ORDER BY s.started_at DESC LIMIT 1) AS last_stage_status,"
        " (SELECT count(*) FROM rounds d WHERE d.run_id = r.run_id) AS decided_rounds,"
        " (SELECT max(greatest(coalesce(d.candidate_accuracy, 0), d.incumbent_accuracy))"
        "  FROM rounds d WHERE d.run_id = r.run_id) AS best_round_accuracy"
        " FROM runs r ORDER BY r.created_at, r.run_id")
    out = []
    for run in runs:
        config = json.loads(run.pop("config_json") or "{}")
        best = run.pop("best_round_accuracy")
        winner = incumbent(catalog, run["run_id"])
        if best is None and winner is not None:
            best = winner.accuracy
        out.append({**run, "planned_rounds": int(config.get("rounds", 0)) + 1,
                    "best_accuracy": best, "incumbent": winner})
    return out
