"""bench/learning.py's summary of its measured runs: per arm the accuracy per round, gains,
per-level totals and compute spread over seeds, the gain ratios between arms and the paired
differences of gains (same seed) with their 95 % t-interval; and the printed report of it.
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


def paired(diffs: list[float], seeds: list[int]) -> dict[str, Any]:
    """Spread of per-seed differences (default - baseline), how many favour default, and the 95%
    Student-t confidence interval of their mean (None for fewer than 2 seeds). An interval that
    contains 0 means the seeds do not tell the arms apart."""
    out: dict[str, Any] = {**spread(diffs), "seeds": seeds,
                           "default_wins": sum(d > 0 for d in diffs), "ci95": None}
    if len(diffs) > 1:
        from scipy.stats import t  # imported here: only the paired summaries need it

        half = float(t.ppf(0.975, len(diffs) - 1)) * out["sd"] / len(diffs) ** 0.5
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def per_level_totals(by_seed: dict[int, dict[str, Any]],
                     key: str) -> dict[str, dict[str, float | None]]:
    """Problems per level summed over rounds >= 1, spread over seeds."""
    levels = sorted({lv for r in by_seed.values() for n in r["rounds"][1:] for lv in n[key]},
                    key=int)
    return {lv: spread([sum(n[key].get(lv, 0) for n in r["rounds"][1:]) for r in by_seed.values()])
            for lv in levels}


def summarize(runs: dict[str, dict[int, dict[str, Any]]], rounds: int) -> dict[str, Any]:
    arms = {}
    for arm, by_seed in runs.items():
        seeds = sorted(by_seed)
        arms[arm] = {
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
    out: dict[str, Any] = {"arms": arms, "ratios": {}, "paired_gain_difference": {},
                           "warmup_accuracy": warmups,
                           "warmups_identical": all(len(set(w.values())) == 1
                                                    for w in warmups.values())}
    if "default" in runs:
        for other, label in (("uniform", "default/uniform"),
                             ("no_self_play", "default/no_self_play")):
            if other not in runs:
                continue
            out["ratios"][label] = ratio(arms["default"]["gain"]["mean"],
                                         arms[other]["gain"]["mean"])
            common = sorted(set(runs["default"]) & set(runs[other]))
            out["paired_gain_difference"][f"default-{other}"] = paired(
                [runs["default"][s]["gain"] - runs[other][s]["gain"] for s in common], common)
    return out


def wide_summary(accuracy: dict[str, float], arms: list[str], seeds: list[int]) -> dict[str, Any]:
    """Final wide-set accuracy per arm over seeds, and default minus each baseline paired by seed
    (the warm-up is the same for every arm of a seed, so these are differences of gains)."""
    of = {arm: {s: accuracy[f"learning-{arm}-s{s}"] for s in seeds} for arm in arms}
    out: dict[str, Any] = {"final_accuracy": {arm: spread(list(v.values()))
                                              for arm, v in of.items()},
                           "paired_difference": {}}
    for other in (a for a in arms if a != "default" and "default" in arms):
        out["paired_difference"][f"default-{other}"] = paired(
            [of["default"][s] - of[other][s] for s in seeds], seeds)
    return out


def report_wide(wide: dict[str, Any]) -> None:
    items = wide["items_per_level"]
    print(f"\nwide held-out set ({sum(items.values())} items never seen by any run; per level "
          + " ".join(f"L{lv} {n}" for lv, n in items.items())
          + "): final accuracy (mean±sd over seeds)")
    for arm, stat in wide["final_accuracy"].items():
        print(f"  {arm:<14}{_fmt(stat)}")
    for label, d in wide["paired_difference"].items():
        print(f"  paired difference {label}: {_fmt_paired(d)}")


def _fmt_paired(d: dict[str, Any]) -> str:
    interval = "" if d["ci95"] is None else f", 95% CI [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
    return (f"{_fmt(d)} (min {d['min']:.3f}, max {d['max']:.3f}{interval}); "
            f"default higher in {d['default_wins']}/{len(d['seeds'])} seeds")


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
        print(f"paired gain difference {label}: {_fmt_paired(d)}")
