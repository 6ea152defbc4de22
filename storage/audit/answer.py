"""One entry point for `flywheel audit RUN QUERY ...`: checks the command-line arguments of a
named query (or `--sql`) and runs it on the audit snapshot."""

from __future__ import annotations

import duckdb

from storage.audit.lineage import lineage
from storage.audit.queries import drift, drops, funnel, labels, samples, sql
from storage.audit.snapshot import AuditError, Result


QUERIES = ("funnel", "drops", "lineage", "drift", "labels", "samples")


def answer(con: duckdb.DuckDBPyConnection, query: str | None, args: list[str], *,
           sql_text: str | None = None, where: str | None = None, limit: int = 20,
           round_index: int | None = None, rows: bool = False) -> Result:
    """Run a named query (or `sql_text`) with its command-line arguments."""
    if sql_text is not None:
        if query is not None:
            raise AuditError(f"give either a query ({query!r}) or --sql, not both")
        return sql(con, sql_text)
    if query is None:
        raise AuditError(f"name a query: {', '.join(QUERIES)}, or --sql \"...\"")
    if query not in QUERIES:
        raise AuditError(f"unknown query {query!r}: use one of {', '.join(QUERIES)}, or --sql \"...\"")
    takes = {"lineage": 1, "samples": 1}.get(query, 0)
    if len(args) > takes:
        raise AuditError(f"{query}: unexpected argument(s) {' '.join(args[takes:])}")
    if where is not None and query != "samples":
        raise AuditError(f"--where works with `samples VIEW`, not with {query}")
    if round_index is not None and query in ("lineage", "samples"):
        raise AuditError(f"--round works with funnel, drops, drift and labels; for {query} use --where")
    if rows and query != "lineage":
        raise AuditError("--rows works with `lineage CHECKPOINT`")
    if query == "lineage":
        if not args:
            raise AuditError("lineage: give a train row, rollout, problem or proposal id, or a checkpoint")
        return lineage(con, args[0], rows=rows)
    if query == "samples":
        return samples(con, args[0] if args else None, where=where, limit=limit)
    return {"funnel": funnel, "drops": drops, "drift": drift, "labels": labels}[query](
        con, round_index=round_index)
