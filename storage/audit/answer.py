"""One entry point for `flywheel audit RUN QUERY ...`: checks the command-line arguments of a
named query (or `--sql`), runs it on the audit snapshot and prints it, within a time limit.

    print_answer(con, None, [], sql_text="SELECT * FROM rollouts", fmt="csv", timeout=60,
                 echo=typer.echo)

DuckDB runs a query in C++ and does not look at Python's signals meanwhile, so a query in the
main thread ignores Ctrl-C until it ends. The query therefore runs in a worker thread while the
main thread waits, which Ctrl-C does interrupt; on Ctrl-C or past the time limit the main
thread stops the query with `con.interrupt()` (DuckDB checks it between vectors, within
milliseconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import duckdb

from storage.audit.custom_queries import SAMPLES_LIMIT, SQL_LIMIT, write_sql_csv
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
from storage.audit.snapshot import FORMATS, AuditError, Result, render

QUERIES = ("funnel", "drops", "lineage", "drift", "labels", "verifier", "samples")
STOP_WAIT_S = 5.0  # how long a stopped query may take to end before the command ends anyway

T = TypeVar("T")


class QueryTimeout(AuditError):
    """The query ran past `--timeout` and was stopped."""


def answer(con: duckdb.DuckDBPyConnection, query: str | None, args: list[str], *,
           sql_text: str | None = None, where: str | None = None, limit: int | None = None,
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
        The most rows returned by `samples` or `sql_text` (`--limit`); None: `SAMPLES_LIMIT`
        or `SQL_LIMIT`.
    round_index
        Only this round, for funnel, drops, drift, labels and verifier (`--round`).
    rows
        List each training row a checkpoint saw, for `lineage CHECKPOINT` (`--rows`).

    Returns
    -------
    The query's result (`cut` says how many rows the limit left out).

    Raises
    ------
    AuditError
        No query or both a query and `sql_text`, an unknown query, arguments or options the
        query does not take, `lineage` without an id, or the query itself cannot answer;
        the message says which, and what to give instead.
    """
    _check(query, args, sql_text=sql_text, where=where, limit=limit, round_index=round_index,
           rows=rows)
    if sql_text is not None:
        return sql(con, sql_text, limit=_limit(query, limit))
    if query == "lineage":
        return lineage(con, args[0], rows=rows)
    if query == "samples":
        return samples(con, args[0] if args else None, where=where, limit=_limit(query, limit))
    return {"funnel": funnel, "drops": drops_with_outcomes, "drift": drift,
            "labels": labels, "verifier": verifier}[query](
        con, round_index=round_index)


def print_answer(con: duckdb.DuckDBPyConnection, query: str | None, args: list[str], *,
                 fmt: str, timeout: float, echo: Callable[..., Any], sql_text: str | None = None,
                 limit: int | None = None, **options: Any) -> None:
    """Answer (see `answer`) and print in `fmt`, stopping the query past `timeout` seconds
    or at Ctrl-C.

    `--sql` with `--format csv` is written as its rows arrive (`write_sql_csv`), so an export
    of millions of rows never sits in memory. Rows the limit cut are named in the table's
    notes, and for JSON and CSV (whose output must stay parseable) in a line on stderr.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    query, args, sql_text, limit, options
        As for `answer` (`options`: where, round_index, rows).
    fmt
        One of `FORMATS`.
    timeout
        The most seconds the query may run (`--timeout`).
    echo
        Prints a line: `echo(text, nl=True, err=False)`, as `typer.echo`.

    Raises
    ------
    AuditError
        As `answer`, or `fmt` or `timeout` is invalid.
    QueryTimeout
        The query ran past `timeout` (it was stopped).
    KeyboardInterrupt
        Ctrl-C (the query was stopped).
    """
    if fmt not in FORMATS:
        raise AuditError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not timeout > 0:
        raise AuditError(f"--timeout {timeout:g}: give the most seconds a query may run, above 0")
    _check(query, args, sql_text=sql_text, limit=limit, **options)
    shown = _limit(query, limit)

    def work() -> int:
        if sql_text is not None and fmt == "csv":
            return write_sql_csv(con, sql_text, lambda text: echo(text, nl=False), limit=shown)
        result = answer(con, query, args, sql_text=sql_text, limit=limit, **options)
        echo(render(result, fmt))
        return result.cut

    cut = run_bounded(con, work, timeout=timeout)
    if cut and fmt != "table":
        echo(f"note: {cut} more row{'s' * (cut != 1)} not printed (--limit {shown}; raise it to"
             " see them)", err=True)


def run_bounded(con: duckdb.DuckDBPyConnection, work: Callable[[], T], *, timeout: float) -> T:
    """`work()` (queries on `con`) in a worker thread, stopped past `timeout` seconds or at
    Ctrl-C (module docstring).

    Parameters
    ----------
    con
        The connection `work` queries.
    work
        What to run; its result is returned, its exception raised here.
    timeout
        The most seconds it may run.

    Returns
    -------
    What `work` returned.

    Raises
    ------
    QueryTimeout
        It ran past `timeout`; the query was interrupted.
    KeyboardInterrupt
        Ctrl-C while it ran; the query was interrupted.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join: a join that Ctrl-C interrupts marks the
    # thread as ended while it still runs (Python 3.11, bpo-45274)

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the main thread, raised there
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="audit-query", daemon=True).start()
    try:
        # a lock wait, which Ctrl-C interrupts with KeyboardInterrupt (`--timeout inf` too)
        finished = done.wait(min(timeout, threading.TIMEOUT_MAX))
    except KeyboardInterrupt:
        _stop(con, done)
        raise
    if not finished:
        _stop(con, done)
        raise QueryTimeout(f"the query ran past --timeout {timeout:g} s and was stopped "
                           "(narrow it with WHERE or LIMIT, or give a longer --timeout)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _stop(con: duckdb.DuckDBPyConnection, done: threading.Event) -> None:
    """Interrupt `con` until the worker is `done` (at most `STOP_WAIT_S`): an interrupt that
    lands between two statements of a query is lost, so it is repeated."""
    deadline = time.monotonic() + STOP_WAIT_S
    while not done.is_set() and time.monotonic() < deadline:
        con.interrupt()
        done.wait(0.05)


def _limit(query: str | None, limit: int | None) -> int:
    """The most rows printed: `--limit`, else the query's own default."""
    return limit if limit is not None else SAMPLES_LIMIT if query == "samples" else SQL_LIMIT


def _check(query: str | None, args: list[str], *, sql_text: str | None, limit: int | None,
           where: str | None = None, round_index: int | None = None, rows: bool = False) -> None:
    """The command line's query and options, checked before anything runs (see `answer`)."""
    if sql_text is not None and query is not None:
        raise AuditError(f"give either a query ({query!r}) or --sql, not both")
    if sql_text is None and query is None:
        raise AuditError(f"name a query: {', '.join(QUERIES)}, or --sql \"...\"")
    if query is not None and query not in QUERIES:
        msg = f"unknown query {query!r}: use one of {', '.join(QUERIES)}, or --sql \"...\""
        raise AuditError(msg)
    takes = {"lineage": 1, "samples": 1}.get(query or "", 0)
    if len(args) > takes:
        raise AuditError(f"{query or '--sql'}: unexpected argument(s) {' '.join(args[takes:])}")
    if where is not None and query != "samples":
        raise AuditError(f"--where works with `samples VIEW`, not with {query or '--sql'}")
    if limit is not None and query not in ("samples", None):
        raise AuditError(f"--limit works with `samples VIEW` and --sql, not with {query}")
    if limit is not None and limit < 1:
        raise AuditError(f"--limit {limit}: must be at least 1")
    if round_index is not None and query in ("lineage", "samples", None):
        instead = "--where" if query else "WHERE round = N in the SQL"
        raise AuditError(f"--round works with funnel, drops, drift, labels and verifier; for "
                         f"{query or '--sql'} use {instead}")
    if rows and query != "lineage":
        raise AuditError("--rows works with `lineage CHECKPOINT`")
    if query == "lineage" and not args:
        raise AuditError("lineage: give a train row, rollout, problem or proposal id,"
                         " or a checkpoint")
