"""Lineage: where a row came from, and (through checkpoint_lineage.py) which rows a checkpoint
was trained on.

    flywheel audit RUN lineage TRAIN_ROW_ID | ROLLOUT_ID | PROBLEM_ID | PROPOSAL_ID
        the chain back to the proposer sample and the model that wrote it:
        train row -> rollout (+ verdict) -> problem (+ curriculum decision) -> proposal
        -> the checkpoint that sampled it (or the domain's seed generator in round 0),
        then forward: the training rows made from it and the checkpoints trained on them
    flywheel audit RUN lineage CHECKPOINT_FINGERPRINT | CHECKPOINT_FOLDER [--rows]
        the training rows the checkpoint saw, grouped by round and role (checkpoint_lineage.py)

Ids may be given as a unique prefix. Whether a checkpoint was trained on a row follows its train
stage's training plan (training_plan.py), with the replayed sample redrawn from what the stage
recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from storage.audit.checkpoint_lineage import checkpoint_lineage, find_checkpoint, train_checkpoints
from storage.audit.lookup import first_row
from storage.audit.snapshot import AuditError, Result, fetch
from storage.audit.training_plan import read_train_rows, training_plan

_HEX = re.compile(r"^[0-9a-f]{4,64}$")
ROW_COLUMNS = ["link", "kind", "id", "round", "detail"]
_ID_COLUMNS = (("train_rows", "train_row_id"), ("rollouts", "rollout_id"),
               ("problems", "problem_id"), ("proposals", "proposal_id"))


def lineage(con: duckdb.DuckDBPyConnection, target: str, *, rows: bool = False) -> Result:
    """Lineage of a row id or a checkpoint (fingerprint, prefix or folder) in the snapshot `con`.

    A checkpoint is looked for first; otherwise `target` is matched as an id prefix against
    train rows, rollouts, problems and proposals, in that order.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    target
        A train row, rollout, problem or proposal id (or a unique prefix of 4 or more hex
        characters), or a checkpoint's fingerprint (6 or more characters), folder or
        folder name.
    rows
        For a checkpoint: list every training row it saw instead of counts per round and
        role.

    Returns
    -------
    For a row, its chain (`row_lineage`); for a checkpoint, its training rows
    (`checkpoint_lineage`).

    Raises
    ------
    AuditError
        `target` is neither an id nor a checkpoint of this run, a prefix matches several
        ids or checkpoints, or no row has this id.
    """
    checkpoint = find_checkpoint(con, target)
    if checkpoint is not None:
        return checkpoint_lineage(con, checkpoint, rows=rows)
    key = target.strip().lower()
    if not _HEX.match(key):
        raise AuditError(f"lineage {target!r}: not an id (4-64 hex characters) nor a checkpoint "
                         "folder of this run")
    for view, column in _ID_COLUMNS:
        found = [r[0] for r in con.execute(
            f"SELECT DISTINCT {column} FROM {view} WHERE starts_with({column}, ?) LIMIT 6",
            [key]).fetchall()]
        if len(found) > 1 and key not in found:
            raise AuditError(f"lineage {target!r}: ambiguous prefix, {view}.{column} has "
                             f"{', '.join(found[:5])}, ... (give more characters)")
        if found:
            return row_lineage(con, view, key if key in found else found[0])
    raise AuditError(f"lineage {target!r}: no checkpoint, train row, rollout, problem or proposal"
                     " of this run has this id (try `flywheel audit RUN samples train_rows`)")



def _clip(text: Any, width: int = 40) -> str:
    text = repr(text) if isinstance(text, str) else str(text)
    return text if len(text) <= width else text[: width - 2] + "…'"


def _rejudged(con: duckdb.DuckDBPyConnection, rollout_id: str,
              round_index: int) -> list[dict[str, Any]]:
    """The rollout's verdicts in the run's `flywheel reverify` files (datasets of stage
    `reverify`, storage/catalog/reverify.py), one per re-judging, oldest fingerprint first."""
    from storage.catalog.reverify import REVERIFY_STAGE

    found = []
    for fingerprint, path in con.execute(
            "SELECT fingerprint, path FROM datasets WHERE stage = ? AND kind = 'verdicts'"
            " AND round = ? ORDER BY fingerprint", [REVERIFY_STAGE, round_index]).fetchall():
        row = first_row(con, "SELECT * FROM read_parquet(?) WHERE rollout_id = ?",
                        [path, rollout_id])
        if row is not None:
            found.append({**row, "fingerprint": fingerprint})
    return found


def _add_problem(con: duckdb.DuckDBPyConnection, add: Any, problem: dict[str, Any], *,
                 first: bool) -> None:
    """The problem's link and, where curate judged it, its curate decision."""
    add("start" if first else "problem it answers", "problem", problem["problem_id"],
        problem["round"], f"{_clip(problem['text'])} reference={_clip(problem['reference'])} "
        f"level={problem['level']} source={problem['source']}")
    decision = first_row(con, "SELECT * FROM curriculum WHERE problem_id = ? AND round = ?",
                         [problem["problem_id"], problem["round"]])
    if decision is not None:
        add("curate decision", "curriculum", decision["problem_id"], decision["round"],
            f"pass_rate={decision['pass_rate']} over"
            f" {decision['judged']}/{decision['samples']} judged, kept={decision['kept']}"
            f" drop_reason={decision['drop_reason']}")


def row_lineage(con: duckdb.DuckDBPyConnection, view: str, row_id: str) -> Result:
    """The chain of one row back to the proposer sample and the model that wrote it, then
    forward to the training rows made from it and the checkpoints trained on them.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    view
        Where `row_id` is: "train_rows", "rollouts", "problems" or "proposals".
    row_id
        The row's full id.

    Returns
    -------
    One row per link (`ROW_COLUMNS`), starting with the row itself; the note lists the kinds
    along the chain.
    """
    out: list[dict[str, Any]] = []

    def add(link: str, kind: str, id_: Any, round_: Any, detail: str) -> None:
        out.append({"link": link, "kind": kind, "id": id_, "round": round_, "detail": detail})

    train = rollout = problem = proposal = None
    if view == "train_rows":
        train = first_row(con, "SELECT * FROM train_rows WHERE train_row_id = ?", [row_id])
        reference = train["role"] == "solver" and train["rollout_id"] is None
        add("start", "train_row", train["train_row_id"], train["round"],
            f"role={train['role']} weight={train['weight']:.3f} "
            f"{_clip(train['prompt'])} -> {_clip(train['completion'])}"
            + (" (completion = the executed reference, no rollout)" if reference else ""))
        if train["rollout_id"] is not None:
            rollout = first_row(con, "SELECT * FROM rollouts WHERE rollout_id = ? AND round = ?",
                                [train["rollout_id"], train["round"]])
        problem_key = (train["problem_id"], train["round"])
    elif view == "rollouts":
        rollout = first_row(con, "SELECT * FROM rollouts WHERE rollout_id = ?", [row_id])
    elif view == "problems":
        problem = first_row(con, "SELECT * FROM problems WHERE problem_id = ? ORDER BY round",
                            [row_id])
    else:
        proposal = first_row(con, "SELECT * FROM proposals WHERE proposal_id = ?", [row_id])

    if rollout is not None:
        add("start" if not out else "answer it was trained on", "rollout", rollout["rollout_id"],
            rollout["round"], f"sample {rollout['sample_index']} by checkpoint "
            f"{(rollout['checkpoint'] or '-')[:12]}: {_clip(rollout['completion'])}")
        _add_hint(add, train, rollout)
        verdict = first_row(con, "SELECT * FROM verdicts WHERE rollout_id = ? AND round = ?",
                            [rollout["rollout_id"], rollout["round"]])
        if verdict is not None:
            add("its verdict", "verdict", verdict["rollout_id"], verdict["round"],
                f"answer={_clip(verdict['answer'])} reward={verdict['reward']}"
                f" method={verdict['method']}")
        for again in _rejudged(con, rollout["rollout_id"], rollout["round"]):
            add("judged again", "verdict", again["rollout_id"], again["round"],
                f"reward={again['reward']} method={again['method']} "
                f"(flywheel reverify {again['fingerprint'][:12]})")
        problem_key = (rollout["problem_id"], rollout["round"])
    if problem is None and (train is not None or rollout is not None):
        problem = first_row(con, "SELECT * FROM problems WHERE problem_id = ? AND round = ?",
                            list(problem_key))
    if problem is not None:
        _add_problem(con, add, problem, first=not out)
        proposal = first_row(con, "SELECT * FROM proposals WHERE proposal_id = ?",
                             [problem["proposal_id"]])
    if proposal is not None:
        add("start" if not out else "proposer sample", "proposal", proposal["proposal_id"],
            proposal["round"], f"{_clip(proposal['prompt'])} -> {_clip(proposal['text'])} "
            f"source={proposal['source']} drop_reason={proposal['drop_reason']}")
        writer = proposer_of(con, proposal)
        add("written by", "model", writer["id"], proposal["round"], writer["detail"])
    _add_forward(con, out, train=train, rollout=rollout, problem=problem, proposal=proposal)
    kinds = " -> ".join(r["kind"] for r in out if r["link"] not in ("trained into", "used by"))
    return Result(f"lineage of {view[:-1]} {row_id}", ROW_COLUMNS, out, [kinds])


def _add_hint(add: Any, train: dict[str, Any] | None, rollout: dict[str, Any]) -> None:
    """The hint a training row's answer was sampled with, where its rollout's prompt is not the
    row's (curate.rationalize_with = "hint", tasks/rationalize.py)."""
    if train is not None and rollout["prompt"] != train["prompt"]:
        add("sampled with a hint", "rollout", rollout["rollout_id"], rollout["round"],
            f"its prompt went on: {_clip(_beyond(rollout['prompt'], train['prompt']))} "
            "(curate.rationalize_with = 'hint'; trained without it)")


def _beyond(sampled: str, trained: str) -> str:
    """What `sampled` holds from where it stops matching `trained` (a hinted prompt's hint)."""
    common = next((i for i, (a, b) in enumerate(zip(sampled, trained, strict=False)) if a != b),
                  min(len(sampled), len(trained)))
    return sampled[common:]


def proposer_of(con: duckdb.DuckDBPyConnection, proposal: dict[str, Any]) -> dict[str, str]:
    """The model that wrote a proposal: the synthesize stage's input checkpoint of its round.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    proposal
        A row of `proposals`.

    Returns
    -------
    {"id", "detail"}: the domain's generator for seed, generator and pool proposals;
    otherwise the checkpoint's fingerprint and where it was made ("-" when no completed
    synthesize stage of the round is recorded).
    """
    generator = {"seed": "the domain's generator (round-0 warm-up seed)",
                 "generator": "the domain's generator (synthesize.source = generator)",
                 "pool": ("the domain's generator (the fixed prompt pool,"
                          " synthesize.source = pool)")}
    if proposal["source"] in generator:
        return {"id": proposal["source"], "detail": generator[proposal["source"]]}
    stage = first_row(con, "SELECT inputs_json FROM stages WHERE stage = 'synthesize' AND round = ?"
                      " AND status = 'completed' ORDER BY finished_at DESC", [proposal["round"]])
    fingerprint = json.loads(stage["inputs_json"] or "{}").get("checkpoint") if stage else None
    if fingerprint is None:
        return {"id": "-", "detail": "unknown (no completed synthesize stage recorded)"}
    made = first_row(con, "SELECT round, stage, path FROM datasets WHERE kind = 'checkpoint'"
                     " AND fingerprint = ?", [fingerprint])
    where = (f"{made['stage']} stage of round {made['round']}, {made['path']}" if made
             else "not in this run")
    return {"id": fingerprint, "detail": f"proposer = checkpoint {fingerprint[:12]} ({where})"}


def _add_forward(con: duckdb.DuckDBPyConnection, out: list[dict[str, Any]], *, train: Any,
                 rollout: Any, problem: Any, proposal: Any) -> None:
    """What was made from the start row: training rows, and the checkpoints trained on them."""
    if train is not None:
        made = [train]
    elif rollout is not None:
        made = fetch(con, "SELECT * FROM train_rows WHERE rollout_id = ? AND round = ?",
                     [rollout["rollout_id"], rollout["round"]])
    elif problem is not None:
        made = fetch(con, "SELECT * FROM train_rows WHERE problem_id = ? AND round = ?"
                     " ORDER BY role, train_row_id", [problem["problem_id"], problem["round"]])
    else:
        made = []
        if (proposal is not None and proposal["problem_id"] is not None
                and proposal["drop_reason"] is None):
            admitted = first_row(con, "SELECT * FROM problems WHERE proposal_id = ?",
                                 [proposal["proposal_id"]])
            if admitted is not None:
                out.append({"link": "used by", "kind": "problem", "id": admitted["problem_id"],
                            "round": admitted["round"], "detail": _clip(admitted["text"])})
    for row in made if train is None else []:
        out.append({"link": "used by", "kind": "train_row", "id": row["train_row_id"],
                    "round": row["round"],
                    "detail": f"role={row['role']} weight={row['weight']:.3f}"})
    if not made:
        return
    # the file each row is in (this run's current train_rows file of its round)
    file_of = dict(con.execute(
        "SELECT round, fingerprint FROM current_files WHERE kind = 'train_rows'").fetchall())
    ids: dict[str, list[str]] = {}
    for checkpoint in train_checkpoints(con):
        plan = training_plan(con, checkpoint, draw=False)
        if any(file_of.get(row["round"]) in plan.offsets for row in made):
            plan = training_plan(con, checkpoint)  # replays from these rows' file: draw the sample
        hits, how = 0, ""
        for row in made:
            fingerprint = file_of.get(row["round"])
            if not plan.trains(row["role"]):  # the other model's row (a separate proposer)
                continue
            if fingerprint is not None and fingerprint == plan.own:
                hits, how = hits + 1, "this round"
            elif fingerprint in plan.offsets:
                if plan.picked is None:
                    how = "in its replay pool; the sample could not be reproduced"
                    continue
                if fingerprint not in ids:
                    table = read_train_rows(con, fingerprint, ["train_row_id", "role"]).to_pylist()
                    ids[fingerprint] = {r["train_row_id"]: i for i, r in enumerate(
                        r for r in table if plan.in_pool(r["role"]))}
                position = ids[fingerprint].get(row["train_row_id"])  # None: never in the pool
                if position is not None and plan.offsets[fingerprint] + position in plan.picked_set:
                    hits, how = hits + 1, "replayed"
        if how:
            out.append({"link": "trained into", "kind": "checkpoint",
                        "id": checkpoint["fingerprint"], "round": checkpoint["round"],
                        "detail": f"{hits} of these rows ({how}); {checkpoint['path']}"})
