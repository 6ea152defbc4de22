"""Lineage: where a row came from, and which rows a checkpoint was trained on.

    flywheel audit RUN lineage TRAIN_ROW_ID | ROLLOUT_ID | PROBLEM_ID | PROPOSAL_ID
        the chain back to the proposer sample and the model that wrote it:
        train row -> rollout (+ verdict) -> problem (+ curriculum decision) -> proposal
        -> the checkpoint that sampled it (or the domain's seed generator in round 0),
        then forward: the training rows made from it and the checkpoints trained on them
    flywheel audit RUN lineage CHECKPOINT_FINGERPRINT | CHECKPOINT_FOLDER [--rows]
        the training rows the checkpoint saw, grouped by round and role

Ids may be given as a unique prefix. Which rows a checkpoint saw comes from its train stage's
`inputs_json` (the fingerprints of this round's `train_rows` and of each earlier round's, keys
`train_rows` and `replay_round_N`). All of this round's rows are trained; from earlier rounds
the train stage replays a seeded sample (`tasks.train.replayed_rows`) of a pool of
their rows (solver rows only with `train.replay_proposer_rows = false`). The audit redraws it
with the same rule (storage/seeds.py `replay_indices`) from what the train stage recorded as
metrics, `replay_seed`, `replay_ratio` and `replay_proposer_rows` (0/1), and checks it against
the stage's `train_rows` / `replayed_rows` metrics; when these are missing (a stage recorded
before them) or disagree, the replayed rows are reported as unknown rather than guessed. Rows
of weight 0 are selected but not trained on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from storage.audit.snapshot import AuditError, Result, fetch
from storage.seeds import replay_indices

_HEX = re.compile(r"^[0-9a-f]{4,64}$")
ROW_COLUMNS = ["link", "kind", "id", "round", "detail"]
CHECKPOINT_COLUMNS = ["round", "role", "relation", "rows_in_file", "rows_selected", "rows_trained"]
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


# ---- rows ------------------------------------------------------------------------------------


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any] | None:
    found = fetch(con, sql + " LIMIT 1", params)
    return found[0] if found else None


def _clip(text: Any, width: int = 40) -> str:
    text = repr(text) if isinstance(text, str) else str(text)
    return text if len(text) <= width else text[: width - 2] + "…'"


def _add_problem(con: duckdb.DuckDBPyConnection, add: Any, problem: dict[str, Any], *,
                 first: bool) -> None:
    """The problem's link and, where curate judged it, its curate decision."""
    add("start" if first else "problem it answers", "problem", problem["problem_id"],
        problem["round"], f"{_clip(problem['text'])} reference={_clip(problem['reference'])} "
        f"level={problem['level']} source={problem['source']}")
    decision = _one(con, "SELECT * FROM curriculum WHERE problem_id = ? AND round = ?",
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
        train = _one(con, "SELECT * FROM train_rows WHERE train_row_id = ?", [row_id])
        reference = train["role"] == "solver" and train["rollout_id"] is None
        add("start", "train_row", train["train_row_id"], train["round"],
            f"role={train['role']} weight={train['weight']:.3f} "
            f"{_clip(train['prompt'])} -> {_clip(train['completion'])}"
            + (" (completion = the executed reference, no rollout)" if reference else ""))
        if train["rollout_id"] is not None:
            rollout = _one(con, "SELECT * FROM rollouts WHERE rollout_id = ? AND round = ?",
                           [train["rollout_id"], train["round"]])
        problem_key = (train["problem_id"], train["round"])
    elif view == "rollouts":
        rollout = _one(con, "SELECT * FROM rollouts WHERE rollout_id = ?", [row_id])
    elif view == "problems":
        problem = _one(con, "SELECT * FROM problems WHERE problem_id = ? ORDER BY round", [row_id])
    else:
        proposal = _one(con, "SELECT * FROM proposals WHERE proposal_id = ?", [row_id])

    if rollout is not None:
        add("start" if not out else "answer it was trained on", "rollout", rollout["rollout_id"],
            rollout["round"], f"sample {rollout['sample_index']} by checkpoint "
            f"{(rollout['checkpoint'] or '-')[:12]}: {_clip(rollout['completion'])}")
        verdict = _one(con, "SELECT * FROM verdicts WHERE rollout_id = ? AND round = ?",
                       [rollout["rollout_id"], rollout["round"]])
        if verdict is not None:
            add("its verdict", "verdict", verdict["rollout_id"], verdict["round"],
                f"answer={_clip(verdict['answer'])} reward={verdict['reward']}"
                f" method={verdict['method']}")
        problem_key = (rollout["problem_id"], rollout["round"])
    if problem is None and (train is not None or rollout is not None):
        problem = _one(con, "SELECT * FROM problems WHERE problem_id = ? AND round = ?",
                       list(problem_key))
    if problem is not None:
        _add_problem(con, add, problem, first=not out)
        proposal = _one(con, "SELECT * FROM proposals WHERE proposal_id = ?",
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
    stage = _one(con, "SELECT inputs_json FROM stages WHERE stage = 'synthesize' AND round = ?"
                 " AND status = 'completed' ORDER BY finished_at DESC", [proposal["round"]])
    fingerprint = json.loads(stage["inputs_json"] or "{}").get("checkpoint") if stage else None
    if fingerprint is None:
        return {"id": "-", "detail": "unknown (no completed synthesize stage recorded)"}
    made = _one(con, "SELECT round, stage, path FROM datasets WHERE kind = 'checkpoint'"
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
            admitted = _one(con, "SELECT * FROM problems WHERE proposal_id = ?",
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
            if fingerprint is not None and fingerprint == plan.own:
                hits, how = hits + 1, "this round"
            elif fingerprint in plan.offsets:
                if plan.picked is None:
                    how = "in its replay pool; the sample could not be reproduced"
                    continue
                if fingerprint not in ids:
                    table = _read(con, fingerprint, ["train_row_id", "role"]).to_pylist()
                    ids[fingerprint] = {r["train_row_id"]: i for i, r in enumerate(
                        r for r in table if plan.in_pool(r["role"]))}
                position = ids[fingerprint].get(row["train_row_id"])  # None: never in the pool
                if position is not None and plan.offsets[fingerprint] + position in plan.picked_set:
                    hits, how = hits + 1, "replayed"
        if how:
            out.append({"link": "trained into", "kind": "checkpoint",
                        "id": checkpoint["fingerprint"], "round": checkpoint["round"],
                        "detail": f"{hits} of these rows ({how}); {checkpoint['path']}"})


# ---- checkpoints -----------------------------------------------------------------------------


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
                 " AND d.stage = 'train' ORDER BY d.round")


def _train_stage(con: duckdb.DuckDBPyConnection, fingerprint: str) -> dict[str, Any] | None:
    return _one(con, "SELECT round, inputs_json FROM stages WHERE fingerprint = ?"
                " AND status = 'completed' ORDER BY finished_at DESC", [fingerprint])


@dataclass(frozen=True)
class ReplaySettings:
    """What a train stage recorded about its replay sample (its metrics)."""

    seed: int  # replay_seed: the train stage's seed
    ratio: float  # replay_ratio: `train.replay_ratio`
    proposer_rows: bool  # replay_proposer_rows: whether proposer rows were in the pool

    @classmethod
    def recorded(cls, metrics: dict[str, float]) -> ReplaySettings | None:
        """The replay settings among a train stage's metrics.

        Parameters
        ----------
        metrics
            The train stage's recorded metrics by name.

        Returns
        -------
        The settings; None when the stage did not record them.
        """
        try:
            return cls(seed=int(metrics["replay_seed"]), ratio=metrics["replay_ratio"],
                       proposer_rows=bool(metrics["replay_proposer_rows"]))
        except KeyError:
            return None


@dataclass
class TrainingPlan:
    """Which train_rows files a train stage read and which of their rows it selected.

    own      fingerprint of this round's train_rows (all of its rows are selected)
    replay   (round, fingerprint) of earlier rounds' files, in the order they form the pool
    offsets  fingerprint -> index of the file's first row in the pool
    picked   pool indices replayed, in draw order; None when not reproducible
    picked_set  `picked` as a set (empty when not reproducible)
    metrics  the train stage's recorded metrics
    settings the replay settings among them; None when the stage did not record them
    proposer_rows  whether proposer rows are in the pool (`settings.proposer_rows`; true when
             not recorded, so the pool counts every row of a replayed file)
    """

    own: str | None = None
    replay: list[tuple[int, str]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    picked: list[int] | None = field(default_factory=list)
    picked_set: frozenset[int] = frozenset()
    metrics: dict[str, float] = field(default_factory=dict)
    settings: ReplaySettings | None = None
    proposer_rows: bool = True

    def in_pool(self, role: str) -> bool:
        """Whether a replayed file's row of `role` is part of the replay pool.

        Parameters
        ----------
        role
            The row's role ("solver" or "proposer").

        Returns
        -------
        False only for proposer rows when the pool leaves them out.
        """
        return self.proposer_rows or role != "proposer"

    def pool_filter(self) -> str:
        """SQL condition on `role` for the rows of a replayed file that form the pool.

        Returns
        -------
        "true", or "role <> 'proposer'" when the pool leaves proposer rows out.
        """
        return "true" if self.proposer_rows else "role <> 'proposer'"


def training_plan(con: duckdb.DuckDBPyConnection, checkpoint: dict[str, Any], *,
                  draw: bool = True) -> TrainingPlan:
    """The checkpoint's training plan; with draw=False the replay sample is left undrawn.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    checkpoint
        A checkpoint's dataset row (from `find_checkpoint` or `train_checkpoints`).
    draw
        Redraw the replay sample from the train stage's recorded replay settings and check it
        against its recorded row counts.

    Returns
    -------
    The plan; an empty one for a checkpoint not made by a completed train stage. Its `picked`
    is None (not reproducible) when the stage replayed earlier rounds but recorded no replay
    settings, or when the redrawn sample disagrees with its row counts.

    Raises
    ------
    AuditError
        The train stage read a train_rows file the catalog does not list, or a replayed
        file is missing from disk.
    """
    stage = _train_stage(con, checkpoint["fingerprint"])
    if stage is None or checkpoint["stage"] != "train":
        return TrainingPlan()
    inputs = json.loads(stage["inputs_json"] or "{}")
    sizes = dict(con.execute(
        "SELECT fingerprint, rows FROM datasets WHERE kind = 'train_rows'").fetchall())
    metrics = {r["name"]: r["value"] for r in fetch(
        con, "SELECT name, value FROM metrics WHERE stage = 'train' AND round = ?",
        [stage["round"]])}
    settings = ReplaySettings.recorded(metrics)
    plan = TrainingPlan(own=inputs.get("train_rows"), replay=sorted(
        (int(key.rsplit("_", 1)[1]), fp) for key, fp in inputs.items()
        if key.startswith("replay_round_")), metrics=metrics, settings=settings,
        proposer_rows=settings is None or settings.proposer_rows)
    for fingerprint in [plan.own] + [fp for _, fp in plan.replay]:
        if fingerprint is not None and fingerprint not in sizes:
            raise AuditError(f"train stage {checkpoint['fingerprint'][:12]} read train_rows"
                             f" {fingerprint[:12]}, which the catalog does not list (was the"
                             " catalog edited?)")
    pool_size = 0
    for _, fingerprint in plan.replay:
        plan.offsets[fingerprint] = pool_size
        pool_size += sizes[fingerprint] if plan.proposer_rows else con.execute(
            f"SELECT count(*) FROM read_parquet(?) WHERE {plan.pool_filter()}",
            [_path(con, fingerprint)]).fetchone()[0]
    own_size = sizes[plan.own] if plan.own else 0
    if not draw or not plan.replay:  # round 0 replays nothing: nothing to redraw
        return plan
    if settings is None:
        plan.picked = None
        return plan
    picked = replay_indices(pool_size, own_size, ratio=settings.ratio, seed=settings.seed)
    reproduced = (metrics.get("replayed_rows") == len(picked)
                  and metrics.get("train_rows") == own_size + len(picked))
    plan.picked = picked if reproduced else None
    plan.picked_set = frozenset(picked) if reproduced else frozenset()
    return plan


def _path(con: duckdb.DuckDBPyConnection, fingerprint: str) -> str:
    found = _one(con, "SELECT path FROM datasets WHERE fingerprint = ? AND kind = 'train_rows'",
                 [fingerprint])
    if found is None or not Path(found["path"]).exists():
        raise AuditError(f"train_rows file of stage {fingerprint[:12]} is missing "
                         f"({found['path'] if found else 'not recorded'}); rerun `flywheel resume`")
    return found["path"]


def _read(con: duckdb.DuckDBPyConnection, fingerprint: str, columns: list[str]) -> pa.Table:
    # ParquetFile, not pq.read_table: the latter imports pandas (half a second of start-up)
    return pq.ParquetFile(_path(con, fingerprint)).read(columns=columns)


def selected_rows_sql(con: duckdb.DuckDBPyConnection, plan: TrainingPlan) -> tuple[str, list[Any]]:
    """SQL (and its parameters) for the rows a train stage selected: train_row_id, round, role,
    weight, relation ('this round' | 'replayed'), in the order the train stage listed them
    (this round's file, then the replayed rows in the order they were drawn).
    Evaluated by DuckDB over the Parquet files, so a pool of millions of rows stays cheap.

    Parameters
    ----------
    con
        A snapshot from `open_run` (to find the files).
    plan
        The train stage's plan, from `training_plan`.

    Returns
    -------
    The SQL and its parameters; a query with no rows when the plan selects none (or the
    replayed sample could not be reproduced, when only replayed rows would remain).

    Raises
    ------
    AuditError
        A train_rows file of the plan is missing from disk.
    """
    parts, params = [], []
    if plan.own is not None:
        parts.append("SELECT train_row_id, round, role, weight, 'this round' AS relation,"
                     " file_row_number AS draw FROM read_parquet(?, file_row_number = true)")
        params.append(_path(con, plan.own))
    if plan.replay and plan.picked:
        parts.append(
            "SELECT p.train_row_id, p.round, p.role, p.weight, 'replayed', d.draw FROM"
            " (SELECT *, row_number() OVER (PARTITION BY filename ORDER BY file_row_number) - 1"
            " AS pool_row"
            " FROM read_parquet(?, filename = true, file_row_number = true)"
            f" WHERE {plan.pool_filter()}) p"
            " JOIN (SELECT unnest(?::VARCHAR[]) AS filename, unnest(?::BIGINT[]) AS first) f"
            " USING (filename)"
            " JOIN (SELECT unnest(?::BIGINT[]) AS pool_index,"
            " generate_subscripts(?::BIGINT[], 1) AS draw) d"
            " ON d.pool_index = f.first + p.pool_row")
        paths = [_path(con, fp) for _, fp in plan.replay]
        params += [paths, paths, [plan.offsets[fp] for _, fp in plan.replay], plan.picked,
                   plan.picked]
    if not parts:
        return ("SELECT NULL::VARCHAR AS train_row_id, NULL::BIGINT AS round,"
                " NULL::VARCHAR AS role, NULL::DOUBLE AS weight, NULL::VARCHAR AS relation"
                " WHERE false"), []
    union = " UNION ALL ".join(f"({part})" for part in parts)
    return (f"SELECT train_row_id, round, role, weight, relation FROM ({union})"
            " ORDER BY relation DESC, draw"), params


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
    if checkpoint["stage"] != "train":
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
        [[_path(con, fp) for fp, _ in files]] * 2 + [[r for _, r in files]]) if files else []
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
        made = _one(con, "SELECT round, stage FROM datasets WHERE kind = 'checkpoint'"
                    " AND fingerprint = ?", [fingerprint])
        if made is None:
            chain.append(f"{fingerprint[:12]} (outside this run)")
            break
        chain.append(f"{fingerprint[:12]} ({made['stage']} r{made['round']})")
        stage = _train_stage(con, fingerprint)
        fingerprint = json.loads(stage["inputs_json"] or "{}").get("checkpoint") if stage else None
    return chain
