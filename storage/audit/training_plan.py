"""Training plans: which train_rows files a train stage read and which of their rows it selected.

Which rows a checkpoint saw comes from its train stage's `inputs_json` (the fingerprints of this
round's `train_rows` and of each earlier round's, keys `train_rows` and `replay_round_N`). All
of this round's rows are trained; from earlier rounds the train stage replays a seeded sample
(`tasks.train.replayed_rows`) of a pool of their rows (solver rows only with
`train.replay_proposer_rows = false`). The audit redraws it with the same rule (storage/seeds.py
`replay_indices`) from what the train stage recorded as metrics, `replay_seed`, `replay_ratio`
and `replay_proposer_rows` (0/1), and checks it against the stage's `train_rows` /
`replayed_rows` metrics; when these are missing (a stage recorded before them) or disagree, the
replayed rows are reported as unknown rather than guessed. Rows of weight 0 are selected but not
trained on. Beside a separate proposer (`[proposer] separate`) the solver's `train` stage takes
the solver rows only and `train-proposer` the proposer rows only, its own and the pool's alike;
the stage records whose as `trained_roles` (0 both, 1 solver, 2 proposer; 0 when not recorded).

    plan = training_plan(con, checkpoint)   # own, replay [(round, fingerprint)], picked, ...
    sql, params = selected_rows_sql(con, plan)
    fetch(con, sql, params)   # [{"train_row_id", "round", "role", "weight", "relation"}, ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from storage.audit.lookup import first_row
from storage.audit.snapshot import AuditError, fetch
from storage.seeds import replay_indices
from storage.train_stages import TRAIN_STAGES

ROLES = {0: "both", 1: "solver", 2: "proposer"}  # the `trained_roles` metric


def train_stage(con: duckdb.DuckDBPyConnection, fingerprint: str) -> dict[str, Any] | None:
    """The latest completed stage execution that made a checkpoint.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    fingerprint
        The checkpoint's fingerprint (its stage's).

    Returns
    -------
    {"round", "inputs_json"} of the stage; None when no completed stage has this fingerprint.
    """
    return first_row(con, "SELECT round, inputs_json FROM stages WHERE fingerprint = ?"
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
    roles    whose rows the stage trains: both, solver or proposer (`trained_roles`)
    """

    own: str | None = None
    replay: list[tuple[int, str]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    picked: list[int] | None = field(default_factory=list)
    picked_set: frozenset[int] = frozenset()
    metrics: dict[str, float] = field(default_factory=dict)
    settings: ReplaySettings | None = None
    proposer_rows: bool = True
    roles: str = "both"

    def trains(self, role: str) -> bool:
        """Whether the stage takes rows of `role` at all (its own file's and the pool's)."""
        return self.roles in ("both", role)

    def own_filter(self) -> str:
        """SQL condition on `role` for the rows of this round's file the stage takes."""
        return "true" if self.roles == "both" else f"role = '{self.roles}'"

    def in_pool(self, role: str) -> bool:
        """Whether a replayed file's row of `role` is part of the replay pool.

        Parameters
        ----------
        role
            The row's role ("solver" or "proposer").

        Returns
        -------
        False for proposer rows when the pool leaves them out, and for a role the stage does
        not train.
        """
        return self.trains(role) and (self.proposer_rows or role != "proposer")

    def pool_filter(self) -> str:
        """SQL condition on `role` for the rows of a replayed file that form the pool.

        Returns
        -------
        "true", or the conditions that leave proposer rows, or another role's, out.
        """
        conditions = [c for c in (self.own_filter(),
                                  "true" if self.proposer_rows else "role <> 'proposer'")
                      if c != "true"]
        return " AND ".join(conditions) or "true"


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
    stage = train_stage(con, checkpoint["fingerprint"])
    if stage is None or checkpoint["stage"] not in TRAIN_STAGES:
        return TrainingPlan()
    inputs = json.loads(stage["inputs_json"] or "{}")
    sizes = dict(con.execute(
        "SELECT fingerprint, rows FROM datasets WHERE kind = 'train_rows'").fetchall())
    metrics = {r["name"]: r["value"] for r in fetch(
        con, "SELECT name, value FROM metrics WHERE stage = ? AND round = ?",
        [checkpoint["stage"], stage["round"]])}
    settings = ReplaySettings.recorded(metrics)
    plan = TrainingPlan(own=inputs.get("train_rows"), replay=sorted(
        (int(key.rsplit("_", 1)[1]), fp) for key, fp in inputs.items()
        if key.startswith("replay_round_")), metrics=metrics, settings=settings,
        proposer_rows=settings is None or settings.proposer_rows,
        roles=ROLES.get(int(metrics.get("trained_roles", 0)), "both"))
    for fingerprint in [plan.own] + [fp for _, fp in plan.replay]:
        if fingerprint is not None and fingerprint not in sizes:
            raise AuditError(f"train stage {checkpoint['fingerprint'][:12]} read train_rows"
                             f" {fingerprint[:12]}, which the catalog does not list (was the"
                             " catalog edited?)")
    pool_size = 0
    for _, fingerprint in plan.replay:
        plan.offsets[fingerprint] = pool_size
        pool_size += sizes[fingerprint] if plan.pool_filter() == "true" else con.execute(
            f"SELECT count(*) FROM read_parquet(?) WHERE {plan.pool_filter()}",
            [train_rows_path(con, fingerprint)]).fetchone()[0]
    own_size = (0 if not plan.own else sizes[plan.own] if plan.roles == "both" else con.execute(
        f"SELECT count(*) FROM read_parquet(?) WHERE {plan.own_filter()}",
        [train_rows_path(con, plan.own)]).fetchone()[0])
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


def train_rows_path(con: duckdb.DuckDBPyConnection, fingerprint: str) -> str:
    """The path of a train_rows file.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    fingerprint
        The file's fingerprint.

    Returns
    -------
    The path the catalog records for it.

    Raises
    ------
    AuditError
        The catalog does not list the file, or it is missing from disk.
    """
    found = first_row(con, "SELECT path FROM datasets WHERE fingerprint = ?"
                      " AND kind = 'train_rows'", [fingerprint])
    if found is None or not Path(found["path"]).exists():
        raise AuditError(f"train_rows file of stage {fingerprint[:12]} is missing "
                         f"({found['path'] if found else 'not recorded'}); rerun `flywheel resume`")
    return found["path"]


def read_train_rows(con: duckdb.DuckDBPyConnection, fingerprint: str,
                    columns: list[str]) -> pa.Table:
    """Columns of a train_rows file, in file order.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    fingerprint
        The file's fingerprint.
    columns
        The columns to read.

    Returns
    -------
    The file's rows as an Arrow table.

    Raises
    ------
    AuditError
        The file is not listed or missing (`train_rows_path`).
    """
    # ParquetFile, not pq.read_table: the latter imports pandas (half a second of start-up)
    return pq.ParquetFile(train_rows_path(con, fingerprint)).read(columns=columns)


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
                     " file_row_number AS draw FROM read_parquet(?, file_row_number = true)"
                     f" WHERE {plan.own_filter()}")
        params.append(train_rows_path(con, plan.own))
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
        paths = [train_rows_path(con, fp) for _, fp in plan.replay]
        params += [paths, paths, [plan.offsets[fp] for _, fp in plan.replay], plan.picked,
                   plan.picked]
    if not parts:
        return ("SELECT NULL::VARCHAR AS train_row_id, NULL::BIGINT AS round,"
                " NULL::VARCHAR AS role, NULL::DOUBLE AS weight, NULL::VARCHAR AS relation"
                " WHERE false"), []
    union = " UNION ALL ".join(f"({part})" for part in parts)
    return (f"SELECT train_row_id, round, role, weight, relation FROM ({union})"
            " ORDER BY relation DESC, draw"), params
