"""Does the flywheel's curriculum beat a uniform curriculum and plain SFT, at equal compute?

Arms, each run for every seed (`seed` config key) on one base config, warm-up plus --rounds
self-improvement rounds, in-process one after another (default: the first three):

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
    bandit         for a reasoning_gym task mix: synthesize.source = "generator" with the
                   (task, level) bandit (synthesize.level_scheduler = "bandit",
                   synthesize.bandit.arms = "task_level"): each round's generator problems are
                   drawn per (task, level) from softmax(Q / temperature), Q the mean |advantage|
                   of that pair's problems in earlier rounds (SEC)
    fixed_schedule synthesize.source = "generator", synthesize.level_scheduler = "fixed": round r
                   draws level min_level + r - 1 only (capped at max_level), tasks uniform
    proposer       for a config whose default is the generator (a reasoning_gym mix): the
                   model writes the problems (synthesize.source = "proposer") and, since its
                   problems have no reference, their labels are the majority of the k samples
                   (verify.labels = "majority"), so the solver trains on answers that agree with
                   it (curate.solver_targets = "verified": there is no reference to rationalize);
                   it trains proposer rows (curate.proposer_rows).
                   Its warm-up must teach the proposer role too: the plan sets
                   curate.warmup_proposer_rows = true for every arm, so warm-ups stay identical

The generator arms set curate.proposer_rows = false (they have no proposer, so every trained token
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
The warm-up (round 0) is the same in every arm for a given seed, and it is computed once: the
seed's first arm runs it, and every later arm of that seed (in the same data root) starts as a
fork of that run (storage/fork.py), given each of its round-0 stages whose fingerprint its own
config gives too (tasks/fingerprints.py), data and catalog rows, so its rounds replay the
warm-up's rows as their own; a stage whose settings differ in the arm (no_self_play's curate
holds curate.solver_targets) and those after it compute as usual. A forked arm ends where it
would have alone (tests/storage/test_fork.py: the same round-1 checkpoint). The JSON's
`shared_warmup` names, per run, the run it forked and the stages it was given.

--reference ARM (default: default) is the arm whose gain every other arm's is subtracted from,
seed by seed. --plan FILE --split tuning|test runs a pre-registered plan (bench/learning_plan.py:
config, overrides, arms, rounds, reference and primary arm, tuning and test seeds, wide set, all
fixed in the file); its test seeds run only while the plan and this bench's files
are committed and unmodified, and the report ends with the primary comparison (reference -
primary final gain, paired by seed, 95 % t-interval) and the commit it ran at.

Printed: held-out accuracy after every round per arm (the incumbent after the promotion gate,
mean and sample standard deviation over seeds; the candidates' accuracy is in the JSON), the
last round's accuracy per difficulty level (where the gains come from), the problems rolled
out and kept per level (what each curriculum offered and what the band let through), each
arm's final gain = accuracy after the last round - accuracy after the warm-up, the ratios of
mean final gains reference/other, and the paired differences of gains (same seed) with their
spread and the 95% t-interval of their mean; for a task mix also each task's accuracy after
every round and its gain (95% intervals over seeds), and each arm's share of problems per task
per round (how the bandit moved its draws). JSON: bench/results/learning.json (--out; with
--plan bench/results/<plan>-<split>.json).

Prefect: PREFECT_API_URL when set, else Prefect's temporary server, started once for the
process and shared by every run. Runs are named `learning-<arm>-s<seed>` under --data-root
(default: a new temporary folder); a data root that already holds a run of the same config
skips its finished stages (fingerprints), so an interrupted benchmark continues where it was.
`--arm-root ARM=DIR` keeps one arm's runs in another data root: an arm whose stage configs did
not change since an earlier benchmark then reuses its finished stages there (its runs take
seconds) instead of training again.

    python bench/learning.py [--seeds 0 1 2] [--rounds 3] [--arms default uniform no_self_play]
                             [--config configs/tiny-cpu.toml] [--overrides key=value ...]
                             [--reference ARM]
                             [--data-root DIR] [--arm-root ARM=DIR ...] [--no-equal-steps]
                             [--report-only]
                             [--out bench/results/learning.json]
    python bench/learning.py --plan bench/plans/reasoning-gym-curriculum.toml --split tuning

--report-only runs nothing and measures the runs already in --data-root (e.g. after changing
what the report prints).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.learning_measure import constant_answer_accuracy, measure, wide_eval  # noqa: E402
from bench.learning_summary import (  # noqa: E402
    report,
    report_primary,
    report_wide,
    summarize,
    wide_summary,
)

ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "uniform": {"synthesize.source": "generator", "curate.proposer_rows": False},
    "no_self_play": {"synthesize.source": "generator", "curate.solver_targets": "reference",
                     "curate.proposer_rows": False},
    "bandit": {"synthesize.source": "generator", "synthesize.level_scheduler": "bandit",
               "synthesize.bandit.arms": "task_level", "curate.proposer_rows": False},
    "fixed_schedule": {"synthesize.source": "generator", "synthesize.level_scheduler": "fixed",
                       "curate.proposer_rows": False},
    "proposer": {"synthesize.source": "proposer", "verify.labels": "majority",
                 "curate.solver_targets": "verified", "curate.proposer_rows": True},
}
DEFAULT_ARMS = ["default", "uniform", "no_self_play"]
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


def share_warmup(data_root: Path, source: str, target: str, config: Any) -> dict[str, Any]:
    """Start `target` as a fork of `source` (storage/fork.py): its round-0 stages whose
    fingerprints `config` gives too. A target already started (an interrupted benchmark run
    again) is left to resume as it is."""
    from storage.fork import RunExists, fork_stages
    from tasks.fingerprints import stage_fingerprints

    try:
        stages = fork_stages(data_root, source=source, target=target,
                             fingerprints=stage_fingerprints(config, rounds=0).values())
    except RunExists:
        return {"from": None, "stages": []}
    names = [stage for _, stage, _ in stages]
    print(f"{target}: starts with {len(names)} warm-up stages of {source}"
          f" ({', '.join(names) or 'none alike'})", flush=True)
    return {"from": source, "stages": names}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, default=None,
                        help="a pre-registered plan (bench/learning_plan.py): it fixes the config,"
                             " overrides, arms, rounds, reference arm and wide set")
    parser.add_argument("--split", choices=["tuning", "test"], default=None,
                        help="with --plan: run its tuning seeds or its test seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="seeds to run (default 0 1 2; not with --plan)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="self-improvement rounds after the warm-up (default 3)")
    parser.add_argument("--arms", nargs="+", default=None, choices=list(ARMS),
                        help=f"default: {' '.join(DEFAULT_ARMS)}")
    parser.add_argument("--reference", default=None, choices=list(ARMS),
                        help="the arm whose gain every other arm's is subtracted from, by seed"
                             " (default: default, else the first arm)")
    parser.add_argument("--config", type=Path, default=None,
                        help="base config (default: the built-in tiny CPU run)")
    parser.add_argument("--overrides", nargs="*", default=None, metavar="KEY=VALUE",
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
    parser.add_argument("--wide-eval", type=int, default=None, metavar="N",
                        help="also evaluate every run's final model on up to N held-out items"
                             " per level that no run saw (0 = off; default 400)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: measure and print the runs already in --data-root")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON (default bench/results/learning.json, with --plan"
                             " bench/results/<plan>-<split>.json)")
    args = parser.parse_args()
    fixed = ("seeds", "rounds", "arms", "reference", "config", "overrides", "wide_eval")
    if args.plan is None:
        if args.split is not None:
            parser.error("--split needs --plan")
        defaults = {"seeds": [0, 1, 2], "rounds": 3, "arms": DEFAULT_ARMS, "overrides": [],
                    "wide_eval": 400}
        for key, value in defaults.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        args.overrides = parse_overrides(args.overrides)
        args.reference = args.reference or ("default" if "default" in args.arms
                                            else args.arms[0])
        args.registration = None
        args.out = args.out or ROOT / "bench" / "results" / "learning.json"
        return args
    given = [f"--{key.replace('_', '-')}" for key in fixed if getattr(args, key) is not None]
    if given:
        parser.error(f"{', '.join(given)}: the plan {args.plan} fixes these; edit the plan")
    if args.split is None:
        parser.error("--plan needs --split tuning or --split test")
    from bench.learning_plan import check_registered, load_plan, registration

    plan = load_plan(args.plan, list(ARMS))
    args.registration = registration(plan)
    if not args.report_only:
        check_registered(plan, args.split, args.registration)
    args.seeds, args.rounds, args.arms = plan.seeds(args.split), plan.rounds, plan.arms
    args.reference, args.config, args.overrides = plan.reference, plan.config, plan.overrides
    args.wide_eval, args.primary = plan.wide_eval, plan.primary
    args.out = args.out or ROOT / "bench" / "results" / f"{args.plan.stem}-{args.split}.json"
    return args


def main() -> None:
    args = parse_args()
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                       "TRANSFORMERS_VERBOSITY": "error", "PREFECT_LOGGING_LEVEL": "WARNING",
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                       "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
                       "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(key, value)

    from configs import ConfigError, load_config

    base = args.overrides

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
    from domains import get_domain
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
    shared: dict[str, dict[str, Any]] = {}
    for seed in args.seeds:  # seed-major: a partial benchmark still compares the arms
        for arm in args.arms:
            run_id = f"learning-{arm}-s{seed}"
            t0 = time.time()
            if not args.report_only:
                first = args.arms[0]
                if arm != first and roots[arm] == roots[first]:
                    shared[run_id] = share_warmup(roots[arm], f"learning-{first}-s{seed}",
                                                  run_id, configs[arm, seed])
                flywheel_flow(RunSpec(data_root=str(roots[arm]), run_id=run_id,
                                      config=configs[arm, seed]))
            seconds[run_id] = round(time.time() - t0, 1)
            runs[arm][seed] = measure(roots[arm], run_id, configs[arm, seed])
            acc = " ".join(f"{r['accuracy']:.3f}" for r in runs[arm][seed]["rounds"])
            print(f"{run_id}: {seconds[run_id]:.0f} s, accuracy per round {acc}", flush=True)

    summary = summarize(runs, args.rounds, reference=args.reference)
    first = configs[args.arms[0], args.seeds[0]]
    summary["constant_answer_accuracy"] = constant_answer_accuracy(
        get_domain(first.domain.name, first).heldout(first.domain.heldout_per_level))
    report(summary, args.rounds)
    if args.wide_eval:
        wide = wide_eval([(roots[arm], f"learning-{arm}-s{seed}")
                          for arm in args.arms for seed in args.seeds],
                         configs[args.arms[0], args.seeds[0]], args.wide_eval)
        summary["wide_eval"] = {**wide, **wide_summary(wide, args.arms, args.seeds,
                                                       reference=args.reference)}
        report_wide(summary["wide_eval"])
    if args.plan is not None:
        report_primary(summary, reference=args.reference, primary=args.primary,
                       plan=str(args.plan), split=args.split, record=args.registration)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": str(args.config) if args.config else "<built-in tiny CPU run>",
        "plan": None if args.plan is None else {
            "path": str(args.plan), "split": args.split, "primary": args.primary,
            **(args.registration or {})},
        "overrides": base, "equal_steps": args.equal_steps, "seeds": args.seeds,
        "rounds": args.rounds, "reference": args.reference,
        "arms": {arm: ARMS[arm] for arm in args.arms}, "data_root": str(data_root),
        "arm_roots": {arm: str(root) for arm, root in roots.items() if root != data_root},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "wall_s": round(time.time() - started, 1), "run_wall_s": seconds,
        "shared_warmup": shared,
        "summary": summary,
        "runs": {arm: {str(seed): r for seed, r in by_seed.items()}
                 for arm, by_seed in runs.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
