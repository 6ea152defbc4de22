"""One entry point for `flywheel audit RUN QUERY ...`: checks the command-line arguments of a
named query (or `--sql`) and runs it on the audit snapshot."""

from __future__ import annotations

import duckdb

from storage.audit.lineage import lineage
from storage.audit.queries import (
    drift,
    drops_with_outcomes,
    funnel,
    labels,
    samples,
    sql,
    verifier,
)
from storage.audit.snapshot import AuditError, Result

QUERIES = ("funnel", "drops", "lineage", "drift", "labels", "verifier", "samples")


def answer(con: duckdb.DuckDBPyConnection, query: str | None, args: list[str], *,
           sql_text: str | None = None, where: str | None = None, limit: int = 20,
           round_index: int | None = None, rows: bool = False) -> Result:
    """Run a named query (or `sql_text`) with its command-line arguments.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    query
        One of `QUERIES`; None with `sql_text`.
    args
        The query's positional arguments: an id or checkpoint for `lineage`, a view for
        `samples`; the other queries take none.
    sql_text
        SQL to run instead of a named query (`--sql`).
    where
        A SQL condition on the rows of `samples` (`--where`).
    limit
        The most rows `samples` returns (`--limit`).
    round_index
        Only this round, for funnel, drops, drift, labels and verifier (`--round`).
    rows
        List each training row a checkpoint saw, for `lineage CHECKPOINT` (`--rows`).

    Returns
    -------
    The query's result.

    Raises
    ------
    AuditError
        No query or both a query and `sql_text`, an unknown query, arguments or options the
        query does not take, `lineage` without an id, or the query itself cannot answer;
        the message says which, and what to give instead.
    """
    if sql_text is not None:
        if query is not None:
            raise AuditError(f"give either a query ({query!r}) or --sql, not both")
        return sql(con, sql_text)
    if query is None:
        raise AuditError(f"name a query: {', '.join(QUERIES)}, or --sql \"...\"")
    if query not in QUERIES:
        msg = f"unknown query {query!r}: use one of {', '.join(QUERIES)}, or --sql \"...\""
        raise AuditError(msg)
    takes = {"lineage": 1, "samples": 1}.get(query, 0)
    if len(args) > takes:
        raise AuditError(f"{query}: unexpected argument(s) {' '.join(args[takes:])}")
    if where is not None and query != "samples":
        raise AuditError(f"--where works with `samples VIEW`, not with {query}")
    if round_index is not None and query in ("lineage", "samples"):
        msg = (f"--round works with funnel, drops, drift, labels and verifier; for {query} use "
               "--where")
        raise AuditError(msg)
    if rows and query != "lineage":
        raise AuditError("--rows works with `lineage CHECKPOINT`")
    if query == "lineage":
        if not args:
            raise AuditError("lineage: give a train row, rollout, problem or proposal id,"
                             " or a checkpoint")
        return lineage(con, args[0], rows=rows)
    if query == "samples":
        return samples(con, args[0] if args else None, where=where, limit=limit)
    return {"funnel": funnel, "drops": drops_with_outcomes, "drift": drift,
            "labels": labels, "verifier": verifier}[query](
        con, round_index=round_index)
