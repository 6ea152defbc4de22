"""bench/learning.py's measurements of finished runs: per round held-out accuracy (overall, per
level, per task, per task and level), the problems each curriculum offered, tokens and steps,
read from the catalog through the audit's view of a run; and the wide held-out evaluation of
every run's final model, with what one constant answer scores per task beside it.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from tasks.curriculum.votes import majority_vote


def proposer_tokens(config: Any, texts: list[str]) -> int:
    """Tokens the proposer generated for `texts` (+1 end token where it stopped early)."""
    if config.model.path is None:
        from models.tiny import build_tokenizer

        tokenizer = build_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    cap = config.synthesize.max_new_tokens
    return sum(min(cap, len(ids) + 1)
               for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else 0


def measure(data_root: Path, run_id: str, config: Any) -> dict[str, Any]:
    """Per round: held-out accuracy (incumbent after the gate, candidate), tokens, steps. Files
    are read through the audit's view of the run (storage.audit.snapshot.open_run): only each
    stage's latest output counts, not those of a run earlier made with another config."""
    from storage.audit.snapshot import fetch, open_run

    con = open_run(data_root, run_id)
    try:
        decided = {r["round"]: r for r in fetch(con, "SELECT * FROM rounds ORDER BY round")}
        metrics: dict[tuple[int, str, str], float] = {
            (r["round"], r["stage"], r["name"]): r["value"]
            for r in fetch(con, "SELECT round, stage, name, value FROM metrics")}
        texts: dict[int, list[str]] = {}
        for r in fetch(con, "SELECT round, text FROM proposals WHERE source = 'proposer'"):
            texts.setdefault(r["round"], []).append(r["text"])
        offered: dict[tuple[int, int], tuple[int, int]] = {
            (r["round"], r["level"]): (r["problems"], r["kept"]) for r in fetch(
                con, "SELECT round, level, count(*) AS problems,"
                " count(*) FILTER (WHERE kept) AS kept "
                "FROM curriculum GROUP BY round, level")}
        by_task: dict[int, dict[str, int]] = {}  # problems rolled out per round, "task L<level>"
        for r in fetch(con, "SELECT c.round, p.task, c.level, count(*) AS problems"
                            " FROM curriculum c JOIN problems p USING (problem_id)"
                            " WHERE p.task IS NOT NULL GROUP BY ALL ORDER BY ALL"):
            by_task.setdefault(r["round"], {})[f"{r['task']} L{r['level']}"] = r["problems"]
    finally:
        con.close()
    baseline = metrics.get((0, "baseline", "accuracy"))
    evaluated = {name for (_, stage, name) in metrics if stage in ("evaluate", "baseline")}
    levels = sorted({int(name.rsplit("_", 1)[1]) for name in evaluated
                     if name.startswith("accuracy_level_")})
    tasks = sorted(name.removeprefix("accuracy_task_") for name in evaluated
                   if name.startswith("accuracy_task_") and "_level_" not in name)

    def gated(n: int, stage: str) -> tuple[dict[int, float | None], dict[str, float | None],
                                           dict[str, float]]:
        task_level = {f"{task} L{level}": metrics.get((n, stage,
                                                       f"accuracy_task_{task}_level_{level}"))
                      for task in tasks for level in levels}
        return ({level: metrics.get((n, stage, f"accuracy_level_{level}")) for level in levels},
                {task: metrics.get((n, stage, f"accuracy_task_{task}")) for task in tasks},
                {key: acc for key, acc in task_level.items() if acc is not None})

    rounds = []
    by_level, per_task, per_task_level = gated(0, "baseline")
    for n in range(config.rounds + 1):
        row = decided.get(n)
        if row is None:
            raise SystemExit(f"run {run_id}: round {n} was not decided"
                             f" (see `flywheel status {run_id} --data-root {data_root}`)")
        after = row["candidate_accuracy"] if row["promoted"] else row["incumbent_accuracy"]
        if row["promoted"]:  # the incumbent's per-level and per-task accuracy after the gate
            by_level, per_task, per_task_level = gated(n, "evaluate")
        rounds.append({
            "round": n, "accuracy": after, "candidate_accuracy": row["candidate_accuracy"],
            "promoted": bool(row["promoted"]), "reason": row.get("reason"),
            "accuracy_per_level": {str(level): acc for level, acc in by_level.items()},
            "accuracy_per_task": dict(per_task),
            "accuracy_per_task_level": dict(per_task_level),  # "task L<level>"
            "candidate_accuracy_per_task": {task: metrics.get((n, "evaluate",
                                                               f"accuracy_task_{task}"))
                                            for task in tasks},
            "rolled_out_per_level": {str(lv): c[0] for (m, lv), c in sorted(offered.items())
                                     if m == n},
            "kept_per_level": {str(lv): c[1] for (m, lv), c in sorted(offered.items()) if m == n},
            "rolled_out_per_task_level": by_task.get(n, {}),
            "rollout_tokens": int(metrics.get((n, "rollout", "generated_tokens"), 0)),
            "proposer_tokens": proposer_tokens(config, texts.get(n, [])),
            "trained_tokens": int(metrics.get((n, "train", "trained_tokens"), 0)),
            "train_steps": int(metrics.get((n, "train", "steps"), 0)),
            "kept": int(metrics.get((n, "curate", "kept"), 0)),
            "train_rows": int(metrics.get((n, "curate", "train_rows"), 0)),
        })
    final, warm = rounds[-1]["accuracy"], rounds[0]["accuracy"]
    return {"run_id": run_id, "baseline_accuracy": baseline, "rounds": rounds, "gain": final - warm,
            "generated_tokens": sum(r["rollout_tokens"] + r["proposer_tokens"]
                                    for r in rounds[1:]),
            "trained_tokens": sum(r["trained_tokens"] for r in rounds[1:]),
            "train_steps": sum(r["train_steps"] for r in rounds[1:])}


def final_checkpoint_and_problems(data_root: Path, run_id: str) -> tuple[Path, set[str]]:
    """The run's incumbent after its last gate (its folder), and the text of every problem it
    trained on or rolled out (all rounds, the warm-up's seed problems included)."""
    from storage.audit.snapshot import open_run

    con = open_run(data_root, run_id)
    try:
        last = con.execute("SELECT CASE WHEN promoted THEN candidate ELSE incumbent END FROM rounds"
                           " ORDER BY round DESC LIMIT 1").fetchone()[0]
        path = con.execute("SELECT path FROM datasets WHERE kind = 'checkpoint'"
                           " AND fingerprint = ?", [last]).fetchone()[0]
        texts = {row[0] for row in con.execute("SELECT text FROM problems").fetchall()}
    finally:
        con.close()
    return data_root / path, texts  # an absolute path stays as it is


def wide_items(domain: Any, per_level: int, *, seen: set[str], gate: list[Any],
               attempts: int = 50) -> list[Any]:
    """Up to `per_level` distinct problems per level that are not in `seen`: the gate's held-out
    items first (no run trains on them; a task mix's tasks taken in turn, so that a small
    `per_level` still holds every task), then fresh generator draws (seeded; `attempts` draws per
    wanted item at most, since a small level such as one-digit sums runs out)."""
    rng = random.Random("learning-bench-wide-eval")
    items, taken = [], set(seen)
    for level in domain.levels:
        chosen: list[Any] = []
        for p in in_turn([q for q in gate if q.level == level]):
            if p.text not in taken and len(chosen) < per_level:
                chosen.append(p)
                taken.add(p.text)
        for _ in range(per_level * attempts):
            if len(chosen) >= per_level:
                break
            p = domain.generate(rng, level)
            if p.text not in taken:
                chosen.append(p)
                taken.add(p.text)
        items += chosen
    return items


def in_turn(items: list[Any]) -> list[Any]:
    """`items` with their tasks taken in turn (the first of each task, then the second, ...),
    each task's in their order; items without a task count as one task."""
    by_task: dict[Any, list[Any]] = {}
    for p in items:
        by_task.setdefault(getattr(p, "task", None), []).append(p)
    return [p for group in itertools.zip_longest(*by_task.values()) for p in group
            if p is not None]


def constant_answer_accuracy(items: list[Any]) -> dict[str, float]:
    """Per task, the accuracy of a model that gives every item of the task the task's most
    common reference (the references' majority vote's agreement): what answering one constant
    scores. A task's accuracy at or below it says nothing of learning it (a model that answers
    "1" to every letter_counting item scores the share of items whose count is 1)."""
    by_task: dict[str, list[str]] = {}
    for p in items:
        if getattr(p, "task", None) and p.reference is not None:
            by_task.setdefault(p.task, []).append(p.reference.strip())
    return {task: majority_vote(refs).agreement for task, refs in sorted(by_task.items())}


def wide_eval(runs: list[tuple[Path, str]], config: Any, per_level: int) -> dict[str, Any]:
    """Every run's final incumbent on a wider held-out set (wide_items: up to `per_level` items
    per level that no run saw, so no arm was trained on an item). `runs`: (data root, run id)
    pairs. Greedy answers,
    as the evaluate stage gives; accuracy overall and, for a task mix, per task. The set's size
    cuts the evaluation noise of the set the gate uses."""
    from domains import get_domain
    from domains.base import problem_row
    from models.backends import SamplingParams, make_backend

    domain = get_domain(config.domain.name, config)
    finals, seen = {}, set()
    for data_root, run_id in runs:
        finals[run_id], texts = final_checkpoint_and_problems(data_root, run_id)
        seen |= texts
    items = wide_items(domain, per_level, seen=seen,
                       gate=domain.heldout(config.domain.heldout_per_level))
    prompts = [domain.solver_prompt(p.text) for p in items]
    tasks = sorted({p.task for p in items if getattr(p, "task", None)})
    out: dict[str, Any] = {"items_per_level": {str(lv): sum(p.level == lv for p in items)
                                               for lv in domain.levels},
                           "items_per_task": {t: sum(p.task == t for p in items) for t in tasks},
                           "constant_answer_accuracy": constant_answer_accuracy(items),
                           "accuracy": {}, "accuracy_per_task": {}, "modal_answer_share": {}}
    for run_id, path in finals.items():
        backend = make_backend("transformers", path)
        try:
            outputs = backend.generate(prompts, SamplingParams(
                n=1, temperature=1.0, seed=0, greedy=True,
                max_new_tokens=config.evaluate.max_new_tokens))
        finally:
            backend.close()
        completions = [domain.cut(o[0].text) for o in outputs]
        scores = domain.score(completions, [problem_row(p) for p in items])
        right = [s == 1.0 for s in scores]
        out["accuracy"][run_id] = sum(right) / len(items)
        out["accuracy_per_task"][run_id] = {
            t: sum(r for r, p in zip(right, items, strict=True) if p.task == t)
            / out["items_per_task"][t] for t in tasks}
        out["modal_answer_share"][run_id] = {  # 1.0: the model answers one constant
            t: majority_vote([domain.extract(c) for c, p in zip(completions, items, strict=True)
                              if p.task == t]).agreement
            for t in tasks}
    return out
