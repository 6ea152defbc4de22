"""bench/learning.py's summary of its measured runs: per arm the accuracy per round, gains,
per-level totals, learning curves per task and per task and level, the draws per task, and
compute spread over seeds, the gain ratios between a reference arm and the others and the
paired differences of gains (same seed) with their 95 % t-interval; and the printed report of
it, the pre-registered comparison last.
"""

from __future__ import annotations

import statistics
from typing import Any


def spread(values: list[float]) -> dict[str, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "sd": None, "min": None, "max": None}
    return {"mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def interval(values: list[float | None]) -> dict[str, Any]:
    """`spread` of the values and the 95% Student-t confidence interval of their mean (None for
    fewer than 2 values)."""
    out: dict[str, Any] = {**spread(values), "ci95": None}
    n = sum(v is not None for v in values)
    if n > 1:
        from scipy.stats import t  # imported here: only the intervals need it

        half = float(t.ppf(0.975, n - 1)) * out["sd"] / n ** 0.5
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
    return out


def paired(diffs: list[float], seeds: list[int]) -> dict[str, Any]:
    """Spread of per-seed differences (reference arm - other arm), in how many seeds the
    reference is higher (`wins`), and the 95% Student-t confidence interval of their mean (None
    for fewer than 2 seeds). An interval that contains 0 means the seeds do not tell the arms
    apart."""
    return {**interval(diffs), "seeds": seeds, "wins": sum(d > 0 for d in diffs)}


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def per_level_totals(by_seed: dict[int, dict[str, Any]],
                     key: str) -> dict[str, dict[str, float | None]]:
    """Problems per level summed over rounds >= 1, spread over seeds."""
    levels = sorted({lv for r in by_seed.values() for n in r["rounds"][1:] for lv in n[key]},
                    key=int)
    return {lv: spread([sum(n[key].get(lv, 0) for n in r["rounds"][1:]) for r in by_seed.values()])
            for lv in levels}


def task_curves(by_seed: dict[int, dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Per task: held-out accuracy after each round (the incumbent after the gate) with its 95%
    interval over seeds, and the gain (last round - warm-up) with its interval; the same per
    level of the task under `levels`."""
    seeds = sorted(by_seed)

    def curve(key: str, name: str) -> dict[str, Any]:
        def acc(seed: int, n: int) -> float | None:
            return by_seed[seed]["rounds"][n].get(key, {}).get(name)

        return {"accuracy_per_round": [interval([acc(s, n) for s in seeds])
                                       for n in range(rounds + 1)],
                "gain": interval([None if acc(s, rounds) is None or acc(s, 0) is None
                                  else acc(s, rounds) - acc(s, 0) for s in seeds])}

    def names(key: str) -> list[str]:
        return sorted({t for s in seeds for t in by_seed[s]["rounds"][0].get(key, {})})

    task_levels = names("accuracy_per_task_level")  # "task L<level>"
    return {task: {**curve("accuracy_per_task", task),
                   "levels": {tl.rsplit(" ", 1)[1]: curve("accuracy_per_task_level", tl)
                              for tl in task_levels if tl.rsplit(" ", 1)[0] == task}}
            for task in names("accuracy_per_task")}


def task_draws(by_seed: dict[int, dict[str, Any]], rounds: int) -> list[dict[str, float]]:
    """Per round >= 1: each task's share of the problems rolled out (mean over seeds): how a
    curriculum moved its draws between tasks."""
    out = []
    for n in range(1, rounds + 1):
        shares: dict[str, list[float]] = {}
        for run in by_seed.values():
            counts: dict[str, int] = {}
            for key, count in run["rounds"][n].get("rolled_out_per_task_level", {}).items():
                task = key.rsplit(" ", 1)[0]
                counts[task] = counts.get(task, 0) + count
            total = sum(counts.values())
            for task, count in counts.items():
                shares.setdefault(task, []).append(count / total)
        out.append({task: sum(v) / len(by_seed) for task, v in sorted(shares.items())})
    return out


def summarize(runs: dict[str, dict[int, dict[str, Any]]], rounds: int, *,
              reference: str = "default") -> dict[str, Any]:
    """Per arm the spread over seeds of accuracy, gains, per-level and per-task figures and
    compute; the ratio of mean gains and the paired gain differences of `reference` against
    every other arm."""
    arms = {}
    for arm, by_seed in runs.items():
        seeds = sorted(by_seed)
        arms[arm] = {
            "tasks": task_curves(by_seed, rounds),
            "task_draws_per_round": task_draws(by_seed, rounds),
            "accuracy_per_round": [spread([by_seed[s]["rounds"][n]["accuracy"] for s in seeds])
                                   for n in range(rounds + 1)],
            "gain": spread([by_seed[s]["gain"] for s in seeds]),
            "final_accuracy_per_level": {
                level: spread([by_seed[s]["rounds"][-1]["accuracy_per_level"].get(level)
                               for s in seeds])
                for level in by_seed[seeds[0]]["rounds"][-1]["accuracy_per_level"]},
            "generated_tokens": spread([by_seed[s]["generated_tokens"] for s in seeds]),
            "trained_tokens": spread([by_seed[s]["trained_tokens"] for s in seeds]),
            "train_steps": spread([by_seed[s]["train_steps"] for s in seeds]),
            "rolled_out_per_level": per_level_totals(by_seed, "rolled_out_per_level"),
            "kept_per_level": per_level_totals(by_seed, "kept_per_level"),
        }
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    warmups = {s: {arm: by_seed[s]["rounds"][0]["accuracy"]
                   for arm, by_seed in runs.items() if s in by_seed}
               for s in seeds}
    out: dict[str, Any] = {"arms": arms, "reference": reference, "ratios": {},
                           "paired_gain_difference": {}, "warmup_accuracy": warmups,
                           "warmups_identical": all(len(set(w.values())) == 1
                                                    for w in warmups.values())}
    for other in (a for a in runs if a != reference and reference in runs):
        out["ratios"][f"{reference}/{other}"] = ratio(arms[reference]["gain"]["mean"],
                                                      arms[other]["gain"]["mean"])
        common = sorted(set(runs[reference]) & set(runs[other]))
        out["paired_gain_difference"][f"{reference}-{other}"] = paired(
            [runs[reference][s]["gain"] - runs[other][s]["gain"] for s in common], common)
    return out


def wide_summary(wide: dict[str, Any], arms: list[str], seeds: list[int], *,
                 reference: str = "default") -> dict[str, Any]:
    """Final wide-set accuracy per arm over seeds (overall and per task, with intervals), and
    `reference` minus each other arm paired by seed (the warm-up is the same for every arm of a
    seed, so these are differences of gains)."""
    def of(arm: str, seed: int, task: str | None = None) -> float:
        run_id = f"learning-{arm}-s{seed}"
        return (wide["accuracy"][run_id] if task is None
                else wide["accuracy_per_task"][run_id][task])

    tasks = sorted(wide.get("items_per_task", {}))
    modal = wide.get("modal_answer_share", {})
    out: dict[str, Any] = {
        "final_accuracy": {arm: interval([of(arm, s) for s in seeds]) for arm in arms},
        "final_accuracy_per_task": {arm: {t: interval([of(arm, s, t) for s in seeds])
                                          for t in tasks} for arm in arms},
        "modal_answer_share_per_task": {} if not modal else {
            arm: {t: interval([modal[f"learning-{arm}-s{s}"][t] for s in seeds]) for t in tasks}
            for arm in arms},
        "paired_difference": {}, "paired_difference_per_task": {}}
    for other in (a for a in arms if a != reference and reference in arms):
        label = f"{reference}-{other}"
        out["paired_difference"][label] = paired(
            [of(reference, s) - of(other, s) for s in seeds], seeds)
        out["paired_difference_per_task"][label] = {
            t: paired([of(reference, s, t) - of(other, s, t) for s in seeds], seeds)
            for t in tasks}
    return out


def report_wide(wide: dict[str, Any]) -> None:
    items = wide["items_per_level"]
    print(f"\nwide held-out set ({sum(items.values())} items never seen by any run; per level "
          + " ".join(f"L{lv} {n}" for lv, n in items.items())
          + "): final accuracy (mean±sd over seeds)")
    for arm, stat in wide["final_accuracy"].items():
        print(f"  {arm:<16}{_fmt(stat)}")
    for label, d in wide["paired_difference"].items():
        print(f"  paired difference {label}: {_fmt_paired(d, label)}")
    per_task = wide.get("final_accuracy_per_task", {})
    tasks = sorted({t for by_task in per_task.values() for t in by_task})
    if tasks:
        print("  per task, final accuracy (mean [95% CI] over seeds; items per task: "
              + " ".join(f"{t} {wide['items_per_task'][t]}" for t in tasks) + ")")
        width = max(len(t) for t in tasks) + 4
        print("  " + "arm".ljust(16) + "".join(t.rjust(width + 12) for t in tasks))
        for arm, by_task in per_task.items():
            print("  " + arm.ljust(16) + "".join(_fmt_ci(by_task[t]).rjust(width + 12)
                                                 for t in tasks))
        constant = wide.get("constant_answer_accuracy", {})
        print("  " + "one constant".ljust(16) + "".join(
            (f"{constant[t]:.3f}" if t in constant else "-").rjust(width + 12) for t in tasks))
        modal = wide.get("modal_answer_share_per_task", {})
        if modal:
            print("  share of the model's most common answer (1.000: it answers one constant)")
            for arm, by_task in modal.items():
                print("  " + arm.ljust(16) + "".join(_fmt_ci(by_task[t]).rjust(width + 12)
                                                     for t in tasks))


def _fmt_ci(stat: dict[str, Any]) -> str:
    if stat["mean"] is None:
        return "-"
    if stat.get("ci95") is None:
        return f"{stat['mean']:.3f}"
    return f"{stat['mean']:.3f} [{stat['ci95'][0]:.2f},{stat['ci95'][1]:.2f}]"


def _fmt_paired(d: dict[str, Any], label: str) -> str:
    interval = "" if d["ci95"] is None else f", 95% CI [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
    return (f"{_fmt(d)} (min {d['min']:.3f}, max {d['max']:.3f}{interval}); "
            f"{label.split('-', 1)[0]} higher in {d['wins']}/{len(d['seeds'])} seeds")


def _fmt(stat: dict[str, float | None], digits: int = 3) -> str:
    if stat["mean"] is None:
        return "-"
    return f"{stat['mean']:.{digits}f}±{stat['sd']:.{digits}f}"


def report(summary: dict[str, Any], rounds: int) -> None:
    arms = summary["arms"]
    width = max(len(a) for a in arms) + 2
    print("\nheld-out accuracy after each round (incumbent after the gate; mean±sd over seeds)")
    print("arm".ljust(width) + "".join(f"{'r' + str(n):>14}" for n in range(rounds + 1))
          + f"{'gain':>14}")
    for arm, s in arms.items():
        print(arm.ljust(width) + "".join(f"{_fmt(a):>14}" for a in s["accuracy_per_round"])
              + f"{_fmt(s['gain']):>14}")
    levels = list(next(iter(arms.values()))["final_accuracy_per_level"])
    print(f"\nheld-out accuracy per level after round {rounds} (mean±sd over seeds)")
    print("arm".ljust(width) + "".join(f"{'L' + level:>14}" for level in levels))
    for arm, s in arms.items():
        print(arm.ljust(width) + "".join(f"{_fmt(s['final_accuracy_per_level'][level]):>14}"
                                         for level in levels))
    print("\nproblems rolled out -> kept per level, rounds >= 1 summed (mean over seeds)")
    for arm, s in arms.items():
        print(arm.ljust(width) + "  ".join(
            f"L{lv} {s['rolled_out_per_level'][lv]['mean']:.0f}"
            f"->{s['kept_per_level'][lv]['mean']:.0f}"
            for lv in s["rolled_out_per_level"]))
    print("\ncompute in rounds >= 1 (per run, mean±sd over seeds)")
    print("arm".ljust(width) + f"{'generated tokens':>22}{'trained tokens':>22}{'train steps':>16}")
    for arm, s in arms.items():
        print(arm.ljust(width) + f"{_fmt(s['generated_tokens'], 0):>22}"
              f"{_fmt(s['trained_tokens'], 0):>22}"
              f"{_fmt(s['train_steps'], 0):>16}")
    print()
    if not summary["warmups_identical"]:
        print("WARNING: the arms' warm-ups differ"
              f" (round-0 accuracy per seed: {summary['warmup_accuracy']})")
    for label, value in summary["ratios"].items():
        print(f"final-gain ratio {label}: "
              + ("n/a (denominator gain <= 0)" if value is None else f"{value:.2f}"))
    for label, d in summary["paired_gain_difference"].items():
        print(f"paired gain difference {label}: {_fmt_paired(d, label)}")
    report_tasks(arms, rounds, summary.get("constant_answer_accuracy"))


def report_tasks(arms: dict[str, Any], rounds: int,
                 constant: dict[str, float] | None = None) -> None:
    """Per task: accuracy after each round and the gain per arm (beside what one constant answer
    scores on the same items, `constant`), and each arm's draws."""
    tasks = sorted({t for s in arms.values() for t in s["tasks"]})
    if not tasks:
        return
    width = max(len(a) for a in arms) + 2
    print("\nheld-out accuracy per task, and below it per level of the task, after each round"
          " (incumbent after the gate; mean [95% CI] over seeds)")
    for task in tasks:
        floor = (constant or {}).get(task)
        print(f"  {task}" + ("" if floor is None
                             else f" (one constant answer scores {floor:.3f} on these items)"))
        for arm, s in arms.items():
            curve = s["tasks"].get(task)
            if curve is None:
                continue
            print("    " + arm.ljust(width)
                  + "".join(f"{_fmt_ci(a):>20}" for a in curve["accuracy_per_round"])
                  + f"   gain {_fmt_ci(curve['gain'])}")
            for level, at in curve.get("levels", {}).items():
                print("      " + level.ljust(width - 2)
                      + "".join(f"{_fmt_ci(a):>20}" for a in at["accuracy_per_round"])
                      + f"   gain {_fmt_ci(at['gain'])}")
    print("\nshare of the problems rolled out per task, rounds 1.. (mean over seeds)")
    for arm, s in arms.items():
        for n, shares in enumerate(s["task_draws_per_round"], start=1):
            print("  " + arm.ljust(width) + f"r{n}  "
                  + "  ".join(f"{t} {v:.2f}" for t, v in shares.items()))


def report_primary(summary: dict[str, Any], *, reference: str, primary: str, plan: str,
                   split: str, record: dict[str, Any] | None) -> None:
    """The pre-registered comparison: `reference` - `primary` final gain, paired by seed."""
    label = f"{reference}-{primary}"
    d = summary["paired_gain_difference"][label]
    record = record or {}
    if record.get("uncommitted") or not record.get("plan_commit"):
        status = "NOT pre-registered: uncommitted " + ", ".join(record.get("uncommitted")
                                                               or [plan])
    elif record.get("changed_since_plan"):
        status = ("NOT pre-registered: changed since the plan's commit "
                  + ", ".join(record["changed_since_plan"]))
    else:
        status = f"plan committed in {record['plan_commit'][:12]}, run at {record['head'][:12]}"
    print(f"\nPRIMARY ({plan}, {split} seeds {d['seeds']}; {status})")
    print(f"  final-gain difference {label}: {_fmt_paired(d, label)}")
    wide = summary.get("wide_eval", {}).get("paired_difference", {}).get(label)
    if wide is not None:
        print(f"  on the wide held-out set, final accuracy {label}: {_fmt_paired(wide, label)}")
