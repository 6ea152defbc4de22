"""Does the flywheel's curriculum beat a uniform curriculum and plain SFT, at equal compute?

Three arms, each run for every seed (`seed` config key) on one base config, warm-up plus
--rounds self-improvement rounds, in-process one after another:

    default        the config as given: the proposer writes problems, the solver trains on its
                   verified answers to the kept ones and on the references of too-hard ones
                   (curate.solver_targets; the flywheel's own curriculum)
    uniform        synthesize.source = "generator": every round `synthesize.proposals` fresh
                   domain-generator problems, levels min_level..max_level in equal shares,
                   same stages otherwise (rollout, verify, band, verified answers, references)
    no_self_play   synthesize.source = "generator" and curate.solver_targets = "reference":
                   SFT on the same kind of generator problems with their executed references,
                   every problem kept (like the warm-up); rollouts still run (pass rates are
                   recorded) but are not trained on

Both baselines set curate.proposer_rows = false (they have no proposer, so every trained token
of rounds >= 1 goes to the solver: the stronger baseline); curate.warmup_proposer_rows stays
on, so the warm-up is identical in every arm for a seed (checked: the JSON's round-0
accuracies match). Equal compute:
- trained tokens: train.epochs is raised to its maximum so that every round trains exactly
  train.max_steps steps of train.batch_size rows in every arm (--no-equal-steps keeps the
  config's epochs); the trainer's `trained_tokens` are printed per arm.
- generated tokens: the same `synthesize.proposals` problems requested and the same k samples
  per problem in every arm; the default arm also spends proposer tokens (one batch a round), and
  while fewer than `synthesize.min_novel_share` of its problems are novel (a proposer repeats the
  problems it was trained on) the generator fills the shortfall (synthesize.top_up), so that it
  rolls out about as many problems as a baseline does (the generator's draws are mostly novel).
  Printed per arm:
  rollout tokens (the rollout stage's `generated_tokens`) and proposer tokens (tokens of the
  proposer samples, from the proposals files, + 1 for the end token when it fit).
The warm-up (round 0) is the same in every arm for a given seed.

Printed: held-out accuracy after every round per arm (the incumbent after the promotion gate,
mean and sample standard deviation over seeds; the candidates' accuracy is in the JSON), the
last round's accuracy per difficulty level (where the gains come from), the problems rolled
out and kept per level (what each curriculum offered and what the band let through), each
arm's final gain = accuracy after the last round - accuracy after the warm-up, the ratios of
mean final gains default/uniform and default/no_self_play, and the paired differences of gains
(same seed) with their spread and the 95% t-interval of their mean. JSON:
bench/results/learning.json (--out).

Prefect: PREFECT_API_URL when set, else Prefect's temporary server, started once for the
process and shared by every run. Runs are named `learning-<arm>-s<seed>` under --data-root
(default: a new temporary folder); a data root that already holds a run of the same config
skips its finished stages (fingerprints), so an interrupted benchmark continues where it was.
`--arm-root ARM=DIR` keeps one arm's runs in another data root: an arm whose stage configs did
not change since an earlier benchmark then reuses its finished stages there (its runs take
seconds) instead of training again.

    python bench/learning.py [--seeds 0 1 2] [--rounds 3] [--arms default uniform no_self_play]
                             [--config configs/tiny-cpu.toml] [--overrides key=value ...]
                             [--data-root DIR] [--arm-root ARM=DIR ...] [--no-equal-steps]
                             [--report-only]
                             [--out bench/results/learning.json]

--report-only runs nothing and measures the runs already in --data-root (e.g. after changing
what the report prints).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "uniform": {"synthesize.source": "generator", "curate.proposer_rows": False},
    "no_self_play": {"synthesize.source": "generator", "curate.solver_targets": "reference",
                     "curate.proposer_rows": False},
}
MAX_EPOCHS = 1000.0  # train.epochs' upper bound: with it, train.max_steps always binds


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values are TOML (1, 0.5, true, "text"), bare words are strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--overrides {item!r}: expected key=value, e.g. train.max_steps=50")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key.strip()] = value
    return out


def parse_arm_roots(items: list[str], arms: list[str]) -> dict[str, Path]:
    """`ARM=DIR` pairs -> {arm: data root} for arms kept outside --data-root."""
    out: dict[str, Path] = {}
    for item in items:
        arm, sep, folder = item.partition("=")
        if not sep or arm not in arms or not folder:
            raise SystemExit(f"--arm-root {item!r}: expected ARM=DIR with ARM one of"
                             f" {', '.join(arms)}")
        out[arm] = Path(folder)
    return out


def arm_overrides(arm: str, base: dict[str, Any], *, seed: int, rounds: int,
                  equal_steps: bool) -> dict[str, Any]:
    out = {**base, **ARMS[arm], "seed": seed, "rounds": rounds}
    if equal_steps:
        out["train.epochs"] = MAX_EPOCHS
    return out


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
    finally:
        con.close()
    baseline = metrics.get((0, "baseline", "accuracy"))
    levels = sorted({int(name.rsplit("_", 1)[1]) for (_, stage, name) in metrics
                     if stage == "evaluate" and name.startswith("accuracy_level_")})
    rounds = []
    by_level = {level: metrics.get((0, "baseline", f"accuracy_level_{level}")) for level in levels}
    for n in range(config.rounds + 1):
        row = decided.get(n)
        if row is None:
            raise SystemExit(f"run {run_id}: round {n} was not decided"
                             f" (see `flywheel status {run_id} --data-root {data_root}`)")
        after = row["candidate_accuracy"] if row["promoted"] else row["incumbent_accuracy"]
        if row["promoted"]:  # the incumbent's per-level accuracy after the gate
            by_level = {level: metrics.get((n, "evaluate", f"accuracy_level_{level}"))
                        for level in levels}
        rounds.append({
            "round": n, "accuracy": after, "candidate_accuracy": row["candidate_accuracy"],
            "promoted": bool(row["promoted"]), "reason": row.get("reason"),
            "accuracy_per_level": {str(level): acc for level, acc in by_level.items()},
            "rolled_out_per_level": {str(lv): c[0] for (m, lv), c in sorted(offered.items())
                                     if m == n},
            "kept_per_level": {str(lv): c[1] for (m, lv), c in sorted(offered.items()) if m == n},
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
    """The run's incumbent after its last gate, and the text of every problem it trained on or
    rolled out (all rounds, the warm-up's seed problems included)."""
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
    return Path(path), texts


def wide_items(domain: Any, per_level: int, *, seen: set[str], gate: list[Any],
               attempts: int = 50) -> list[Any]:
    """Up to `per_level` distinct problems per level that are not in `seen`: the gate's held-out
    items first (no run trains on them), then fresh generator draws (seeded; `attempts` draws per
    wanted item at most, since a small level such as one-digit sums runs out)."""
    rng = random.Random("learning-bench-wide-eval")
    items, taken = [], set(seen)
    for level in domain.levels:
        chosen: list[Any] = []
        for p in (q for q in gate if q.level == level):
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


def wide_eval(runs: list[tuple[Path, str]], config: Any, per_level: int) -> dict[str, Any]:
    """Every run's final incumbent on a wider held-out set (wide_items: up to `per_level` items
    per level that no run saw, so no arm was trained on an item). `runs`: (data root, run id)
    pairs. Greedy answers, as the evaluate stage gives. The set's size cuts the evaluation noise
    of the 40-per-level set the gate uses."""
    from domains import get_domain
    from domains.base import problem_row
    from models.backends import SamplingParams, make_backend

    domain = get_domain(config.domain.name)
    finals, seen = {}, set()
    for data_root, run_id in runs:
        finals[run_id], texts = final_checkpoint_and_problems(data_root, run_id)
        seen |= texts
    items = wide_items(domain, per_level, seen=seen,
                       gate=domain.heldout(config.domain.heldout_per_level))
    prompts = [domain.solver_prompt(p.text) for p in items]
    out: dict[str, Any] = {"items_per_level": {str(lv): sum(p.level == lv for p in items)
                                               for lv in domain.levels},
                           "accuracy": {}}
    for run_id, path in finals.items():
        backend = make_backend("transformers", path)
        try:
            outputs = backend.generate(prompts, SamplingParams(
                n=1, temperature=1.0, seed=0, greedy=True,
                max_new_tokens=config.evaluate.max_new_tokens))
        finally:
            backend.close()
        scores = domain.score([domain.cut(o[0].text) for o in outputs],
                              [problem_row(p) for p in items])
        out["accuracy"][run_id] = sum(s == 1.0 for s in scores) / len(items)
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3,
                        help="self-improvement rounds after the warm-up")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--config", type=Path, default=None,
                        help="base config (default: the built-in tiny CPU run)")
    parser.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="dotted config keys applied to every arm,"
                             " e.g. domain.seed_problems=500")
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--arm-root", nargs="*", default=[], metavar="ARM=DIR",
                        help="keep an arm's runs in another data root,"
                             " e.g. no_self_play=/data/earlier: its runs there are continued"
                             " (finished stages of the same config skipped),"
                             " so arms whose config did not change need not run again")
    parser.add_argument("--no-equal-steps", dest="equal_steps", action="store_false",
                        help="keep the config's train.epochs (steps may then differ between arms)")
    parser.add_argument("--wide-eval", type=int, default=400, metavar="N",
                        help="also evaluate every run's final model on up to N held-out items"
                             " per level that no run saw (0 = off)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: measure and print the runs already in --data-root")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "learning.json")
    args = parser.parse_args()
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                       "TRANSFORMERS_VERBOSITY": "error", "PREFECT_LOGGING_LEVEL": "WARNING",
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                       "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
                       "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(key, value)

    from configs import ConfigError, load_config

    base = parse_overrides(args.overrides)
    configs = {}
    try:
        for arm in args.arms:
            for seed in args.seeds:
                configs[arm, seed] = load_config(args.config, arm_overrides(
                    arm, base, seed=seed, rounds=args.rounds, equal_steps=args.equal_steps))
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None

    from flows.environment import set_defaults

    set_defaults()  # the CLI's kernel pins, before the runs import torch
    from flows.run import RunSpec, flywheel_flow

    if args.report_only and args.data_root is None:
        raise SystemExit("--report-only reads the runs of a --data-root: name it")
    data_root = args.data_root or Path(tempfile.mkdtemp(prefix="flywheel-learning-"))
    roots = {arm: data_root for arm in args.arms} | parse_arm_roots(args.arm_root, args.arms)
    print(f"data root {data_root};"
          f" Prefect API {os.environ.get('PREFECT_API_URL') or 'temporary server'}")
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    seconds: dict[str, float] = {}
    started = time.time()
    for seed in args.seeds:  # seed-major: a partial benchmark still compares the arms
        for arm in args.arms:
            run_id = f"learning-{arm}-s{seed}"
            t0 = time.time()
            if not args.report_only:
                flywheel_flow(RunSpec(data_root=str(roots[arm]), run_id=run_id,
                                      config=configs[arm, seed]))
            seconds[run_id] = round(time.time() - t0, 1)
            runs[arm][seed] = measure(roots[arm], run_id, configs[arm, seed])
            acc = " ".join(f"{r['accuracy']:.3f}" for r in runs[arm][seed]["rounds"])
            print(f"{run_id}: {seconds[run_id]:.0f} s, accuracy per round {acc}", flush=True)

    summary = summarize(runs, args.rounds)
    report(summary, args.rounds)
    if args.wide_eval:
        wide = wide_eval([(roots[arm], f"learning-{arm}-s{seed}")
                          for arm in args.arms for seed in args.seeds],
                         configs[args.arms[0], args.seeds[0]], args.wide_eval)
        summary["wide_eval"] = {**wide, **wide_summary(wide["accuracy"], args.arms, args.seeds)}
        report_wide(summary["wide_eval"])
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": str(args.config) if args.config else "<built-in tiny CPU run>",
        "overrides": base, "equal_steps": args.equal_steps, "seeds": args.seeds,
        "rounds": args.rounds,
        "arms": {arm: ARMS[arm] for arm in args.arms}, "data_root": str(data_root),
        "arm_roots": {arm: str(root) for arm, root in roots.items() if root != data_root},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "wall_s": round(time.time() - started, 1), "run_wall_s": seconds,
        "summary": summary,
        "runs": {arm: {str(seed): r for seed, r in by_seed.items()}
                 for arm, by_seed in runs.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
