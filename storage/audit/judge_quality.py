"""How good an LLM judge's rewards look, from the `judgements` the verify stage stored
(tasks/judgements.py): the lines `flywheel audit RUN verifier` prints under its table.

Per round and judge, over the rollouts it judged:

    round 1 judge judge[/models/j:1-10:9f..]@1: 4096 answers, 3710 prompts, unparseable 0.012;
      scores 0.000x812 0.111x40 ... 1.000x2210; agrees with the references on 0.912 of 3977
      (judge passes a wrong answer 201, fails a right one 149)

`scores` counts each reward the judge gave (rounded to 3 places). The references check is
exact: an answer counts right when the extracted answer equals the problem's reference
string (verdicts.answer = problems.reference), the judge passes it at reward >= 0.5; only
rollouts whose problem has a reference and whose answer was extracted count. A pairwise judge
(`mode = "pairwise"`) also shows its position bias: the share of pairs whose two orders it
judged differently (each such pair is a tie):

      position-inconsistent 0.083 of 3977 pairs (both orders judged; a disagreement is a tie)
"""

from __future__ import annotations

from typing import Any

import duckdb

from storage.audit.snapshot import fetch

PASS = 0.5  # a judge's reward at which its answer counts as passed


def judge_lines(con: duckdb.DuckDBPyConnection, *, round_index: int | None = None) -> list[str]:
    """The judge-quality lines of each round (module docstring); none without judgements."""
    where = "" if round_index is None else " AND j.round = ?"
    params = [] if round_index is None else [round_index]
    rows = fetch(con, f"""
        SELECT j.round, j.judge, count(*) AS answers, count(DISTINCT j.judgement_id) AS prompts,
               count(*) FILTER (WHERE j.reward IS NULL) / count(*) AS unparseable,
               count(*) FILTER (WHERE p.reference IS NOT NULL AND v.answer IS NOT NULL
                                AND j.reward IS NOT NULL) AS checked,
               count(*) FILTER (WHERE p.reference IS NOT NULL AND v.answer IS NOT NULL
                                AND j.reward IS NOT NULL
                                AND (j.reward >= {PASS}) = (v.answer = p.reference)) AS agree,
               count(*) FILTER (WHERE j.reward >= {PASS} AND v.answer <> p.reference)
                   AS passes_wrong,
               count(*) FILTER (WHERE j.reward < {PASS} AND v.answer = p.reference)
                   AS fails_right,
               count(j.position_consistent) AS pairs,
               count(*) FILTER (WHERE NOT j.position_consistent) AS inconsistent
        FROM judgements j JOIN verdicts v USING (rollout_id)
        LEFT JOIN (SELECT problem_id, round, any_value(reference) AS reference FROM problems
                   GROUP BY ALL) p ON p.problem_id = j.problem_id AND p.round = j.round
        WHERE true{where} GROUP BY ALL ORDER BY j.round, j.judge""", params)
    scores = fetch(con, f"""
        SELECT j.round, j.judge, round(j.reward, 3) AS score, count(*) AS n
        FROM judgements j JOIN verdicts v USING (rollout_id)
        WHERE j.reward IS NOT NULL{where} GROUP BY ALL ORDER BY j.round, j.judge, score""",
                   params)
    return [line for row in rows for line in _lines(row, scores)]


def _lines(row: dict[str, Any], scores: list[dict[str, Any]]) -> list[str]:
    given = " ".join(f"{s['score']:.3f}x{s['n']}" for s in scores
                     if (s["round"], s["judge"]) == (row["round"], row["judge"]))
    lines = [f"round {row['round']} judge {row['judge']}: {row['answers']} answers, "
             f"{row['prompts']} prompts, unparseable {row['unparseable']:.3f}",
             f"  scores {given or '-'}"]
    if row["pairs"]:
        lines.append(f"  position-inconsistent {row['inconsistent'] / row['pairs']:.3f} of "
                     f"{row['pairs']} pairs (both orders judged; a disagreement is a tie)")
    if row["checked"]:
        lines.append(f"  agrees with the references on {row['agree'] / row['checked']:.3f} of "
                     f"{row['checked']} (passes a wrong answer {row['passes_wrong']}, fails a "
                     f"right one {row['fails_right']})")
    return lines
