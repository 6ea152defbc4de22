"""A pre-registered plan for bench/learning.py (`--plan FILE`): the config, the arms, the rounds
and the analysis are fixed in a committed TOML file on the tuning seeds, before the test seeds
run; the bench runs a plan's test seeds only while the plan, its base config and the bench's
own code are committed, unmodified and unchanged since the plan's commit, and records the
commit it ran.

    config = "configs/reasoning-gym-tiny.toml"   # the base config (relative to the repository)
    rounds = 3                                   # self-improvement rounds after the warm-up
    arms = ["bandit", "uniform", "fixed_schedule", "no_self_play"]
    reference = "bandit"                         # its gain minus every other arm's, by seed
    primary = "uniform"                          # the comparison the plan stands or falls on
    tuning_seeds = [0, 1, 2, 3]                  # where the method was chosen
    test_seeds = [4, 5, 6, 7, 8, 9, 10, 11]      # reported alone
    wide_eval = 400                              # items per level of the wider held-out set
    registered = false                           # true once the tuning seeds fixed the method

    [overrides]                                  # dotted config keys applied to every arm
    "train.max_length" = 160
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The files whose committed state a test-seed run must match: the plan and the analysis.
BENCH_FILES = ("bench/learning.py", "bench/learning_measure.py", "bench/learning_summary.py",
               "bench/learning_plan.py")
KEYS = {"config": str, "rounds": int, "arms": list, "reference": str, "primary": str,
        "tuning_seeds": list, "test_seeds": list, "wide_eval": int, "registered": bool,
        "overrides": dict}


@dataclass(frozen=True)
class Plan:
    path: Path
    config: Path
    rounds: int
    arms: list[str]
    reference: str
    primary: str
    tuning_seeds: list[int]
    test_seeds: list[int]
    wide_eval: int
    registered: bool
    overrides: dict[str, Any]

    def seeds(self, split: str) -> list[int]:
        return self.tuning_seeds if split == "tuning" else self.test_seeds


def load_plan(path: Path, known_arms: list[str]) -> Plan:
    """The plan in `path`; a missing, unknown or mistyped key, an unknown arm or seeds shared by
    the two splits exit naming the file and the key."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"--plan {path}: {exc}") from None
    for key in data.keys() - KEYS.keys():
        raise SystemExit(f"--plan {path}: unknown key {key!r} (known: {', '.join(KEYS)})")
    for key, kind in KEYS.items():
        if key not in data:
            raise SystemExit(f"--plan {path}: missing key {key!r}")
        if not isinstance(data[key], kind) or (kind is int and isinstance(data[key], bool)):
            raise SystemExit(f"--plan {path}: {key} must be a {kind.__name__},"
                             f" not {data[key]!r}")
    arms = data["arms"]
    for key in ("reference", "primary"):
        if data[key] not in arms:
            raise SystemExit(f"--plan {path}: {key} = {data[key]!r} is not one of arms {arms}")
    for arm in arms:
        if arm not in known_arms:
            raise SystemExit(f"--plan {path}: arms: unknown arm {arm!r}"
                             f" (known: {', '.join(known_arms)})")
    for key in ("tuning_seeds", "test_seeds"):
        if not data[key] or not all(isinstance(s, int) and s >= 0 for s in data[key]):
            raise SystemExit(f"--plan {path}: {key} must list seeds >= 0, not {data[key]!r}")
    if shared := set(data["tuning_seeds"]) & set(data["test_seeds"]):
        raise SystemExit(f"--plan {path}: seeds {sorted(shared)} are both tuning and test seeds")
    if data["rounds"] < 1:
        raise SystemExit(f"--plan {path}: rounds must be >= 1, not {data['rounds']}")
    config = Path(data["config"])
    return Plan(path=path, config=config if config.is_absolute() else ROOT / config,
                rounds=data["rounds"], arms=arms, reference=data["reference"],
                primary=data["primary"], tuning_seeds=data["tuning_seeds"],
                test_seeds=data["test_seeds"], wide_eval=data["wide_eval"],
                registered=data["registered"], overrides=data["overrides"])


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def registration(plan: Plan) -> dict[str, Any]:
    """The commit the plan was last committed in; the plan's and the bench's files (and the
    base config) that differ from HEAD or are not committed; and those committed again since the
    plan was ({} outside a git checkout)."""
    files = [str(plan.path.resolve()), str(plan.config.resolve()),
             *(str(ROOT / f) for f in BENCH_FILES)]
    try:
        commit = _git("log", "-1", "--format=%H", "--", str(plan.path.resolve()))
        changed = _git("status", "--porcelain", "--untracked-files=all", "--", *files)
        head = _git("rev-parse", "HEAD")
        since = _git("diff", "--name-only", commit, "HEAD", "--", *files) if commit else ""
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"plan_commit": commit or None, "head": head,
            "uncommitted": [line[3:] for line in changed.splitlines()],
            "changed_since_plan": since.splitlines()}


def check_registered(plan: Plan, split: str, record: dict[str, Any]) -> None:
    """A plan's test seeds run only on a plan marked `registered = true`, committed, and with
    the plan, its config and the bench unmodified since that commit."""
    if split != "test":
        return
    if not plan.registered:
        raise SystemExit(f"--plan {plan.path}: registered = false: the method is still being"
                         " fixed on the tuning seeds; set registered = true and commit the plan"
                         " before its test seeds run")
    if not record:
        raise SystemExit(f"--plan {plan.path}: the test seeds need a git checkout that holds the"
                         " committed plan")
    if record["plan_commit"] is None or record["uncommitted"]:
        missing = record["uncommitted"] or [str(plan.path)]
        raise SystemExit(f"--plan {plan.path}: the test seeds run only against a committed plan;"
                         f" commit {', '.join(missing)} first (or run --split tuning)")
    if record.get("changed_since_plan"):
        raise SystemExit(f"--plan {plan.path}: {', '.join(record['changed_since_plan'])} changed"
                         f" after the plan was committed ({record['plan_commit'][:12]}): the test"
                         " seeds run only with the analysis the plan was registered with; commit"
                         " the plan again to register the change")
