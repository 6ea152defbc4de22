"""Checkpoint lineage: which training rows a checkpoint saw, and the checkpoints it descends from.

    flywheel audit RUN lineage CHECKPOINT_FINGERPRINT | CHECKPOINT_FOLDER [--rows]
        the training rows the checkpoint saw, grouped by round and role

A checkpoint is named by its fingerprint (or a prefix of 6 or more characters), its folder or
the folder's name. The rows it saw are those of its train stage's training plan
(training_plan.py: this round's train_rows file, plus the redrawn replay sample of earlier
rounds' files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from storage.audit.lookup import first_row
from storage.audit.snapshot import AuditError, Result, fetch
from storage.audit.training_plan import (
    selected_rows_sql,
    train_rows_path,
    train_stage,
    training_plan,
)
from storage.train_stages import TRAIN_STAGES

CHECKPOINT_COLUMNS = ["round", "role", "relation", "rows_in_file", "rows_selected", "rows_trained"]


def find_checkpoint(con: duckdb.DuckDBPyConnection, target: str) -> dict[str, Any] | None:
    """The checkpoint named by a fingerprint (or prefix) or a folder path, or None.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    target
        A folder path or name (contains "/" or starts with "checkpoint-"), else a
        fingerprint or a prefix of at least 6 characters.

    Returns
    -------
    The checkpoint's dataset row (round, stage, fingerprint, path, rows); None when nothing
    matches.

    Raises
    ------
    AuditError
        `target` matches several checkpoints.
    """
    checkpoints = fetch(con, "SELECT d.round, d.stage, d.fingerprint, d.path, d.rows"
                        " FROM datasets d WHERE d.kind = 'checkpoint' ORDER BY d.round, d.stage")
    text = target.strip().rstrip("/")
    if "/" in text or text.startswith("checkpoint-"):
        resolved, name = str(Path(text).resolve()), Path(text).name
        hits = [c for c in checkpoints if c["path"] == resolved or Path(c["path"]).name == name]
    else:
        hits = [c for c in checkpoints
                if len(text) >= 6 and c["fingerprint"].startswith(text.lower())]
    if len(hits) > 1:
        names = ", ".join(c["fingerprint"][:12] for c in hits)
        msg = f"lineage {target!r}: matches several checkpoints ({names}); give more characters"
        raise AuditError(msg)
    return hits[0] if hits else None


def train_checkpoints(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The checkpoints of the run's current train stages.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Their dataset rows (round, stage, fingerprint, path, rows), ordered by round.
    """
    return fetch(con, "SELECT d.round, d.stage, d.fingerprint, d.path, d.rows FROM datasets d"
                 " JOIN current_files c USING (fingerprint, kind) WHERE d.kind = 'checkpoint'"
                 " AND list_contains(?, d.stage) ORDER BY d.round, d.stage", [list(TRAIN_STAGES)])


def checkpoint_lineage(con: duckdb.DuckDBPyConnection, checkpoint: dict[str, Any], *,
                       rows: bool = False) -> Result:
    """The training rows a checkpoint saw, per round and role, or one by one.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    checkpoint
        The checkpoint's dataset row (from `find_checkpoint`).
    rows
        List every selected row (train_row_id, round, role, relation, weight) instead of
        counts.

    Returns
    -------
    Without `rows`: per (round, role, relation) of the files it read, the rows in the file,
    selected and trained (weight > 0), newest round first; selected and trained are None
    for replayed files when the sample could not be reproduced. Notes give its path,
    ancestry and trainer metrics.

    Raises
    ------
    AuditError
        A train_rows file it read is missing from disk or from the catalog.
    """
    fingerprint = checkpoint["fingerprint"]
    plan = training_plan(con, checkpoint)
    notes = [(f"checkpoint {fingerprint} ({checkpoint['stage']} stage of round"
              f" {checkpoint['round']}): {checkpoint['path']}"),
             "ancestry: " + " <- ".join(_ancestry(con, fingerprint))]
    if checkpoint["stage"] not in TRAIN_STAGES:
        notes.append("built from the config, trained on no rows")
    m = plan.metrics
    if m:
        notes.append(f"trainer: {int(m.get('steps', 0))} steps over"
                     f" {int(m.get('train_rows', 0))} selected rows"
                     f" ({int(m.get('replayed_rows', 0))} replayed from earlier rounds)")
    unknown = plan.picked is None
    if unknown:
        why = ("the train stage recorded no replay settings" if plan.settings is None
               else "recorded metrics disagree")
        notes.append(f"the replayed sample could not be reproduced ({why}); "
                     "rows_selected of replay rounds is unknown")
    title = f"training rows seen by checkpoint {fingerprint[:12]}"
    selected, params = selected_rows_sql(con, plan)
    if rows:
        listed = fetch(con, selected, params)
        return Result(title, ["train_row_id", "round", "role", "relation", "weight"], listed, notes)
    files = ([(plan.own, "this round")] * (plan.own is not None)
             + [(fp, "replayed") for _, fp in plan.replay])
    in_files = fetch(
        con, "SELECT round, role, relation, count(*) AS n FROM read_parquet(?, filename = true)"
        " JOIN (SELECT unnest(?::VARCHAR[]) AS filename, unnest(?::VARCHAR[]) AS relation)"
        " USING (filename) GROUP BY ALL",
        [[train_rows_path(con, fp) for fp, _ in files]] * 2
        + [[r for _, r in files]]) if files else []
    chosen = {(r["round"], r["role"], r["relation"]): r for r in fetch(
        con, f"SELECT round, role, relation, count(*) AS n, count(*) FILTER (WHERE weight > 0)"
        f" AS trained FROM ({selected}) GROUP BY ALL", params)}
    ordered = []
    for r in sorted(in_files, key=lambda r: (-r["round"], r["role"])):
        key = (r["round"], r["role"], r["relation"])
        hit = chosen.get(key, {"n": 0, "trained": 0})
        gone = unknown and r["relation"] == "replayed"
        ordered.append({"round": r["round"], "role": r["role"], "relation": r["relation"],
                        "rows_in_file": r["n"], "rows_selected": None if gone else hit["n"],
                        "rows_trained": None if gone else hit["trained"]})
    return Result(title, CHECKPOINT_COLUMNS, ordered, notes)


def _ancestry(con: duckdb.DuckDBPyConnection, fingerprint: str) -> list[str]:
    chain, seen = [], set()
    while fingerprint and fingerprint not in seen:
        seen.add(fingerprint)
        made = first_row(con, "SELECT round, stage FROM datasets WHERE kind = 'checkpoint'"
                         " AND fingerprint = ?", [fingerprint])
        if made is None:
            chain.append(f"{fingerprint[:12]} (outside this run)")
            break
        chain.append(f"{fingerprint[:12]} ({made['stage']} r{made['round']})")
        stage = train_stage(con, fingerprint)
        fingerprint = json.loads(stage["inputs_json"] or "{}").get("checkpoint") if stage else None
    return chain
