"""The named per-round audit queries. Each takes a snapshot connection from `audit.open_run` and
returns a `Result`. The lineage queries live in `lineage.py` and `checkpoint_lineage.py`, the
user's own (`samples`, `sql`) in `custom_queries.py`, the report's per-round figures in
`round_metrics.py` (their names import from here as well).

    funnel    per round: proposed -> valid -> novel -> judged -> kept -> trained, the training
              rows of the round by role, rows replayed into its training, held-out accuracy
    drops     per round and reason: how many proposals / curriculum problems were dropped, with
              examples (proposal text; problem text with its pass rate); failed gates too
    drift     per round: difficulty level mix, mean problem length, mean completion tokens,
              pass-rate distribution (quantiles, share at 0 and at 1, mean over kept problems)
    labels    per round: majority-vote answer of each problem's rollouts vs its executor
              reference, where both exist (pseudo-label precision, as TTRL / EVE log it), over
              all problems and over the kept ones. The vote is recomputed from `answer`, not read
              from `verdicts.label`: that column holds the reference when verify.labels =
              "reference", and files written without it read null; the tie rule is the one
              verify uses (tasks/curriculum/votes.py), so with majority labels the two agree
"""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.custom_queries import VIEWS, samples, sql
from storage.audit.judge_quality import judge_lines
from storage.audit.round_metrics import (
    TASK_ACCURACY_SQL,
    heldout_accuracy_metrics,
    pass_rate_counts,
    round_promotions,
    task_accuracy,
)
from storage.audit.snapshot import Result, fetch, format_cell

__all__ = ["FUNNEL_COLUMNS", "TASK_ACCURACY_SQL", "VIEWS", "drift", "drops", "drops_with_outcomes",
           "funnel", "heldout_accuracy_metrics", "labels", "pass_rate_counts", "round_promotions",
           "round_states", "samples", "sql", "task_accuracy", "verifier"]

FUNNEL_COLUMNS = ["round", "proposed", "valid", "novel", "judged", "kept", "trained",
                  "train_rows", "solver_rows", "proposer_rows", "replayed_rows", "heldout_accuracy",
                  "promoted", "state"]


def _round_filter(column: str, round_index: int | None) -> tuple[str, list[Any]]:
    return ("", []) if round_index is None else (f" WHERE {column} = ?", [round_index])


def funnel(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None) -> Result:
    """Per round: how many items survive each step from proposer sample to training row.

    proposed  proposer (or seed generator) samples            rows of `proposals`
    valid     samples the domain could parse                  drop_reason != 'invalid'
    novel     valid, not a duplicate, not a held-out item     rows of `problems`
    judged    problems with at least one scored rollout       curriculum.judged > 0
    kept      problems inside the difficulty band             curriculum.kept
    trained   problems with a solver training row             distinct train_rows.problem_id

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.

    Returns
    -------
    One row per round that ran a stage other than base/baseline, with `FUNNEL_COLUMNS`:
    the counts above (0 where a step has no rows), the round's training rows by role, the
    rows replayed into its training, its held-out accuracy, whether it promoted, and its
    state (`round_states`; "not started" when it has none).
    """
    where, params = _round_filter("round", round_index)
    rows = fetch(con, f"""
        WITH rounds_seen AS (
            SELECT DISTINCT round FROM stages WHERE stage NOT IN ('base', 'baseline')),
        p AS (SELECT round, count(*) AS proposed,
                     count(*) FILTER (WHERE drop_reason IS DISTINCT FROM 'invalid') AS valid
              FROM proposals GROUP BY round),
        q AS (SELECT round, count(*) AS novel FROM problems GROUP BY round),
        c AS (SELECT round, count(*) FILTER (WHERE judged > 0) AS judged,
                     count(*) FILTER (WHERE kept) AS kept FROM curriculum GROUP BY round),
        t AS (SELECT round, count(*) AS train_rows,
                     count(DISTINCT problem_id) FILTER (WHERE role = 'solver') AS trained,
                     count(*) FILTER (WHERE role = 'solver') AS solver_rows,
                     count(*) FILTER (WHERE role = 'proposer') AS proposer_rows
              FROM train_rows GROUP BY round),
        m AS (SELECT round,
                     max(value) FILTER (WHERE stage = 'train' AND name = 'replayed_rows')
                         AS replayed_rows,
                     max(value) FILTER (WHERE stage = 'evaluate' AND name = 'accuracy')
                         AS heldout_accuracy,
                     max(value) FILTER (WHERE stage = 'promote' AND name = 'promoted') AS promoted
              FROM metrics GROUP BY round)
        SELECT round, coalesce(proposed, 0) AS proposed, coalesce(valid, 0) AS valid,
               coalesce(novel, 0) AS novel, coalesce(judged, 0) AS judged,
               coalesce(kept, 0) AS kept,
               coalesce(trained, 0) AS trained, coalesce(train_rows, 0) AS train_rows,
               coalesce(solver_rows, 0) AS solver_rows, coalesce(proposer_rows, 0) AS proposer_rows,
               CAST(replayed_rows AS BIGINT) AS replayed_rows, heldout_accuracy,
               CAST(promoted AS BOOLEAN) AS promoted
        FROM rounds_seen LEFT JOIN p USING (round) LEFT JOIN q USING (round)
        LEFT JOIN c USING (round)
        LEFT JOIN t USING (round) LEFT JOIN m USING (round){where}
        ORDER BY round""", params)
    states = round_states(con)
    for row in rows:
        row["state"] = states.get(row["round"], "not started")
    notes = [("proposed -> valid (parsed) -> novel (not duplicate/held-out) -> judged -> kept"
              " (in band) -> trained (problems with a solver row); replayed_rows: earlier"
              " rounds' rows trained again")]
    return Result("funnel", FUNNEL_COLUMNS, rows, notes)


def round_states(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """Per round: 'decided' (promote completed), '<status> at <stage>' when the latest attempt
    of a stage did not complete (failed, gate_failed, ...), else 'in progress'.

    Parameters
    ----------
    con
        A snapshot from `open_run`.

    Returns
    -------
    Round -> state, for every round with a stage other than base/baseline.
    """
    latest = con.execute(
        "SELECT round, stage, arg_max(status, started_at) FROM stages"
        " WHERE stage NOT IN ('base', 'baseline') GROUP BY round, stage ORDER BY round").fetchall()
    states: dict[int, str] = {}
    for round_index, stage, status in latest:
        if status != "completed":
            states[round_index] = f"{status} at {stage}"
        elif stage == "promote":
            states.setdefault(round_index, "decided")
        else:
            states.setdefault(round_index, "in progress")
    for round_index, stage, status in latest:
        if stage == "promote" and status == "completed" and states[round_index] == "in progress":
            states[round_index] = "decided"
    return states


def drops(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None,
          examples: int = 3) -> Result:
    """Dropped proposals and curriculum problems per round and reason, with examples; failed
    gates.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.
    examples
        How many examples per (round, reason): proposal texts, problem texts with their pass
        rate and level, or the stages whose gate failed.

    Returns
    -------
    Rows of dataset ("proposals", "curriculum" or "gates"), round, reason, count, share (of
    the round's proposals or curriculum problems; null for gates) and examples.
    """
    where, params = _round_filter("round", round_index)
    and_round = where.replace(" WHERE", " AND")
    k = int(examples)
    rows = fetch(con, f"""
        WITH totals AS (
            SELECT 'proposals' AS dataset, round, count(*) AS total FROM proposals{where}
            GROUP BY round
            UNION ALL
            SELECT 'curriculum', round, count(*) FROM curriculum{where} GROUP BY round),
        dropped AS (
            SELECT 'proposals' AS dataset, round, drop_reason AS reason, count(*) AS count,
                   arg_min(text, proposal_id, {k}) AS examples
            FROM proposals WHERE drop_reason IS NOT NULL{and_round} GROUP BY round, drop_reason
            UNION ALL
            SELECT 'curriculum', round, drop_reason, count(*), arg_min(problem_id, problem_id, {k})
            FROM curriculum WHERE drop_reason IS NOT NULL{and_round} GROUP BY round, drop_reason)
        SELECT dataset, round, reason, count, count / total AS share, examples
        FROM dropped JOIN totals USING (dataset, round)
        ORDER BY round, dataset DESC, count DESC, reason""", params * 4)
    # a dropped problem's example: its text, pass rate and level (looked up for the few shown)
    shown = [pid for r in rows if r["dataset"] == "curriculum" for pid in r["examples"]]
    described = {
        r["problem_id"]: (f"{r['text'] or r['problem_id']} (p={format_cell(r['pass_rate'])},"
                          f" level {r['level']})")
        for r in fetch(con, """
        SELECT c.problem_id, c.round, p.text, c.pass_rate, c.level FROM curriculum c
        LEFT JOIN problems p ON p.problem_id = c.problem_id AND p.run_id = c.run_id
            AND p.round = c.round
        WHERE c.problem_id IN (SELECT unnest(?::VARCHAR[]))""", [shown])
    } if shown else {}
    for r in rows:
        if r["dataset"] == "curriculum":
            r["examples"] = [described.get(pid, pid) for pid in r["examples"]]
    gate_rows = fetch(con, f"""
        SELECT 'gates' AS dataset, round, 'gate_failed:' || kind AS reason, count(*) AS count,
               NULL AS share, list(stage ORDER BY checked_at)[1:{int(examples)}] AS examples
        FROM gates WHERE NOT success{and_round}
        GROUP BY round, kind ORDER BY round""", params
    ) if _has_columns(con, "gates", "success") else []
    notes = ["share: of all proposals (or curriculum problems) of the round"]
    return Result("drops", ["dataset", "round", "reason", "count", "share", "examples"],
                  rows + gate_rows, notes)


def _has_columns(con: duckdb.DuckDBPyConnection, table: str, *columns: str) -> bool:
    names = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    return set(columns) <= names


def drift(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None) -> Result:
    """Per round: difficulty level mix, text length, completion length, pass-rate distribution.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.

    Returns
    -------
    One row per round with problems: their count, mean level, share per level (`level_N`,
    one column per level of the run), mean text length, mean completion tokens of the
    round's rollouts, and the pass-rate mean, quartiles, share at 0 and at 1 over judged
    problems and mean over kept ones.
    """
    where, params = _round_filter("round", round_index)
    levels = [r[0] for r in con.execute(
        "SELECT DISTINCT level FROM problems WHERE level IS NOT NULL ORDER BY level").fetchall()]
    level_columns = [f"level_{level}" for level in levels]
    mix = "".join(f", count(*) FILTER (WHERE level = {int(level)}) / count(*) AS level_{int(level)}"
                  for level in levels)
    rows = fetch(con, f"""
        WITH q AS (SELECT round, count(*) AS problems, avg(level) AS mean_level,
                          avg(length(text)) AS mean_text_chars{mix}
                   FROM problems GROUP BY round),
        r AS (SELECT round, avg(completion_tokens) AS mean_completion_tokens FROM rollouts
              GROUP BY round),
        c AS (SELECT round, avg(pass_rate) AS pass_rate_mean,
                     quantile_cont(pass_rate, 0.25) AS pass_rate_p25,
                     quantile_cont(pass_rate, 0.5) AS pass_rate_p50,
                     quantile_cont(pass_rate, 0.75) AS pass_rate_p75,
                     count(*) FILTER (WHERE pass_rate = 0) / count(pass_rate) AS share_p0,
                     count(*) FILTER (WHERE pass_rate = 1) / count(pass_rate) AS share_p1,
                     avg(pass_rate) FILTER (WHERE kept) AS kept_pass_rate_mean
              FROM curriculum GROUP BY round)
        SELECT * FROM q LEFT JOIN r USING (round) LEFT JOIN c USING (round){where}
        ORDER BY round""", params)
    columns = ["round", "problems", "mean_level", *level_columns, "mean_text_chars",
               "mean_completion_tokens", "pass_rate_mean", "pass_rate_p25", "pass_rate_p50",
               "pass_rate_p75", "share_p0", "share_p1", "kept_pass_rate_mean"]
    notes = ["level_N: share of the round's problems at level N; pass rates over judged problems"]
    return Result("drift", columns, rows, notes)


def verifier(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None) -> Result:
    """How each round's verdicts were judged: by which verifier, how many were judged, why the
    rest were not (`method`: none, no_answer, verifier_timeout, verifier_error), the reward
    distribution, and one example answer per reason it could not judge; with an LLM judge, its
    scores and its agreement with the references (storage/audit/judge_quality.py).

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.

    Returns
    -------
    One row per (round, verifier): verdicts, judged, unjudged by reason, the mean reward and the
    shares of rewards 0, 1 and in between (over judged verdicts), and the sandbox outcomes.
    """
    where, params = _round_filter("round", round_index)
    has_verifier = _has_columns(con, "verdicts", "verifier")
    name = "coalesce(verifier, '(not recorded)')" if has_verifier else "'(not recorded)'"
    rows = fetch(con, f"""
        SELECT round, {name} AS verifier, count(*) AS verdicts, count(reward) AS judged,
               count(*) FILTER (WHERE reward IS NULL AND method = 'none') AS no_label,
               count(*) FILTER (WHERE reward IS NULL AND method = 'no_answer') AS no_answer,
               count(*) FILTER (WHERE reward IS NULL AND method = 'verifier_timeout')
                   AS verifier_timeout,
               count(*) FILTER (WHERE reward IS NULL AND method = 'verifier_error')
                   AS verifier_error,
               avg(reward) AS mean_reward,
               count(*) FILTER (WHERE reward = 0) / nullif(count(reward), 0) AS share_0,
               count(*) FILTER (WHERE reward = 1) / nullif(count(reward), 0) AS share_1,
               count(*) FILTER (WHERE reward > 0 AND reward < 1) / nullif(count(reward), 0)
                   AS share_partial,
               string_agg(DISTINCT outcome, ',' ORDER BY outcome) AS outcomes
        FROM verdicts{where} GROUP BY ALL ORDER BY round, verifier""", params)
    examples = fetch(con, f"""
        SELECT round, method, any_value(answer) AS answer, any_value(rollout_id) AS rollout_id
        FROM verdicts WHERE reward IS NULL{where.replace(' WHERE', ' AND')}
        GROUP BY ALL ORDER BY round, method""", params)
    notes = ["judged: verdicts with a reward; unjudged by reason: no_label (no reference or "
             "majority answer), no_answer (none extracted), verifier_timeout and verifier_error "
             "(the verifier failed: an infrastructure failure, never a 0; gated by "
             "gates.max_verifier_failure_share); shares over judged verdicts"]
    notes += [f"round {e['round']} {e['method']}: e.g. rollout {e['rollout_id']} answer "
              f"{e['answer']!r}" for e in examples]
    notes += judge_lines(con, round_index=round_index)  # an LLM judge's scores and agreement
    columns = ["round", "verifier", "verdicts", "judged", "no_label", "no_answer",
               "verifier_timeout", "verifier_error", "mean_reward", "share_0", "share_1",
               "share_partial", "outcomes"]
    return Result("verifier", columns, rows, notes)


def labels(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None) -> Result:
    """Majority-vote pseudo-labels vs executor references, per round, where both exist.

    The vote is over the answers extracted from a problem's rollouts (unextractable answers do
    not vote); a tie goes to the smallest answer and is counted in `tied`.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.

    Returns
    -------
    One row per round: problems with a reference and a vote, how many majority answers
    equal the reference (count and share), the mean vote share of the majority answer,
    ties, confident votes (more than half) and their agreement, kept problems and theirs.
    """
    where, params = _round_filter("m.round", round_index)
    rows = fetch(con, f"""
        WITH votes AS (
            SELECT run_id, round, problem_id, answer, count(*) AS n
            FROM verdicts WHERE answer IS NOT NULL GROUP BY ALL),
        best AS (  -- most votes first, then the smallest answer; top2: the two largest counts
            SELECT run_id, round, problem_id, min({{'neg': -n, 'answer': answer}}) AS pick,
                   arg_max(n, n, 2) AS top2, sum(n) AS voters
            FROM votes GROUP BY ALL),
        m AS (
            SELECT run_id, round, problem_id, pick.answer AS answer, -pick.neg AS n, voters,
                   coalesce(top2[2] = top2[1], false) AS tied FROM best)
        SELECT m.round, count(*) AS problems,
               count(*) FILTER (WHERE m.answer = p.reference) AS agree,
               count(*) FILTER (WHERE m.answer = p.reference) / count(*) AS agreement,
               avg(m.n / m.voters) AS mean_vote_share,
               count(*) FILTER (WHERE m.tied) AS tied,
               count(*) FILTER (WHERE 2 * m.n > m.voters) AS confident,
               count(*) FILTER (WHERE 2 * m.n > m.voters AND m.answer = p.reference)
                   / nullif(count(*) FILTER (WHERE 2 * m.n > m.voters), 0) AS confident_agreement,
               count(*) FILTER (WHERE c.kept) AS kept,
               count(*) FILTER (WHERE c.kept AND m.answer = p.reference)
                   / nullif(count(*) FILTER (WHERE c.kept), 0) AS kept_agreement
        FROM m JOIN problems p ON p.problem_id = m.problem_id AND p.run_id = m.run_id
            AND p.round = m.round
        LEFT JOIN curriculum c ON c.problem_id = m.problem_id AND c.run_id = m.run_id
            AND c.round = m.round
        WHERE p.reference IS NOT NULL{where.replace(' WHERE', ' AND')}
        GROUP BY m.round ORDER BY m.round""", params)
    columns = ["round", "problems", "agree", "agreement", "mean_vote_share", "tied", "confident",
               "confident_agreement", "kept", "kept_agreement"]
    notes = [("problems: with a reference and at least one extracted answer; confident: the"
              " majority answer has more than half the votes; kept: in the curriculum (with"
              " verify.labels = majority, kept_agreement is the precision of the labels"
              " trained on)")]
    return Result("labels", columns, rows, notes)


def drops_with_outcomes(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None,
                        examples: int = 3) -> Result:
    """`drops`, then the verdicts whose sandbox run failed, per round and outcome.

    The proposals' rows already give the sandbox outcome of a proposer program that did not run
    (its `drop_reason`: timeout, crash, forbidden, ...); these rows add the solver's answers that
    the sandbox ran (abduction inputs, induction functions) and that did not end `ok`. Verdict
    files written without the `outcome` column add nothing.

    Parameters
    ----------
    con
        A snapshot from `open_run`.
    round_index
        Only this round; None: every round.
    examples
        How many answers to show per (round, outcome).

    Returns
    -------
    The rows of `drops`, then rows of dataset "verdicts": round, reason (the outcome), count,
    share (of the round's verdicts the sandbox ran) and example answers.
    """
    result = drops(con, round_index=round_index, examples=examples)
    if not _has_columns(con, "verdicts", "outcome"):
        return result
    where, params = _round_filter("round", round_index)
    and_round = where.replace(" WHERE", " AND")
    rows = fetch(con, f"""
        WITH ran AS (SELECT round, count(*) AS total FROM verdicts
                     WHERE outcome IS NOT NULL{and_round} GROUP BY round)
        SELECT 'verdicts' AS dataset, round, outcome AS reason, count(*) AS count,
               count(*) / any_value(total) AS share,
               arg_min(answer, rollout_id, {int(examples)}) AS examples
        FROM verdicts JOIN ran USING (round)
        WHERE outcome IS NOT NULL AND outcome <> 'ok'{and_round}
        GROUP BY round, outcome ORDER BY round, count DESC, outcome""", params * 2)
    notes = [*result.notes, "verdicts: answers the sandbox ran that did not end ok; share of "
                            "the round's verdicts the sandbox ran"]
    return Result(result.title, result.columns, result.rows + rows, notes)
