"""`flywheel reverify RUN [--round N] [--set verify.KEY=VALUE ...] [--json]`: judge a run's
stored rollouts and held-out answers again with another verifier setting and print what would
change per round (tasks/reverify.py): verdicts flipped, training rows gained and lost, held-out
accuracy, whether the round's promotion would flip (its rule and its alarms), and the verifier's
error rates on the round's canaries and the majority labels' precision and recall.

    round 1: 9 of 256 verdicts flipped: 2 up (0->1), 7 down (1->0), 0 judged->unjudged,
             0 unjudged->judged
      e.g. c3a1f0..  answer '0.5' vs label '1/2': reward 1.0 -> 0.0 (reference)
      train rows 96 -> 90: 1 gained, 7 lost, 3 changed
      held-out accuracy: candidate 0.242 -> 0.233, incumbent 0.200 -> 0.200
      promotion: promoted -> promoted (unchanged): accuracy 0.233 >= 0.200 - 0.000
      canary false positives: 0.000 [0.000, 0.107] -> 0.188 [0.089, 0.353]
      label reward precision: - -> 0.477

Only `verify.*` keys may be set (anything else would change what was sampled, not how it is
judged): another key is one line and exit 2, as is a bad value. The run's data and stage rows
are left as they were; the new verdicts are a dataset of their own, reused by the same setting.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli_common import DataRoot, check_run_id, fail, open_catalog
from flows.config_cli import parse_sets, recorded_config

SAMPLED = {"verify.canary"}  # decides which problems the rollout stage sampled
VerifySetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="verify.KEY=VALUE",
    help="judge with this verify setting instead of the run's (repeatable), e.g. "
         "verify.compare=exact, verify.labels=majority, verify.extract='[\"boxed\"]'")]


def _verify_overrides(sets: list[str] | None) -> dict[str, Any]:
    """The `--set` overrides, each a `verify.` key (else one line, exit 2)."""
    try:
        overrides = parse_sets(sets)
    except ValueError as exc:
        fail(str(exc))
    outside = [key for key in overrides if not key.startswith("verify.") or key in SAMPLED]
    if outside:
        fail(f"--set {outside[0]}: reverify changes only how answers are judged, not what was "
             "sampled; set verify.KEY (verify.labels, verify.extract, verify.answer_regex, "
             "verify.compare, verify.math_timeout_seconds)")
    return overrides


def _round_settings(data_root: Path, run_id: str,
                    overrides: dict[str, Any]) -> Callable[[int], Any]:
    """A round's index -> its `RoundSettings`: verify from the run's recorded config with the
    overrides, curate, promote and alarms from the recorded config itself. An unknown run, a damaged
    record or a bad override is one line, exit 2.

    Only the `[verify]` section is replaced and checked on its own: the run config's rules
    across sections are about training a run, not judging one (majority labels are re-judged
    for a run whose `curate.solver_targets` is rationalize, and its curate recomputed as it
    was)."""
    from pydantic import ValidationError

    from configs import ConfigError, VerifyConfig, apply_overrides, validate_config
    from configs.settings import PromoteSettings, stage_settings
    from storage.seeds import stage_seed
    from tasks.reverify import RoundSettings
    from tasks.verifier_rates import CANARY_STREAM

    label = f"run {run_id}"
    try:
        recorded = recorded_config(data_root, run_id)
        if recorded is None:
            fail(f"unknown run id {run_id!r} in {data_root} (`flywheel runs` lists them)")
        run_config = validate_config(copy.deepcopy(recorded), label)
        changed = apply_overrides(copy.deepcopy(recorded), overrides, label)
        try:
            verify = VerifyConfig.model_validate(changed.get("verify", {}))
        except ValidationError:
            validate_config(changed, label)  # raises the ConfigError that names the bad key
            raise
    except ConfigError as exc:
        fail(str(exc))
    judged = run_config.model_copy(update={"verify": verify})
    promote = PromoteSettings.from_config(run_config)
    return lambda r: RoundSettings(
        verify=stage_settings(judged, "verify", r), curate=stage_settings(run_config, "curate", r),
        promote=promote.promote, alarms=promote.alarms,
        canary_seed=stage_seed(run_config.seed, CANARY_STREAM, r),
        correct_threshold=run_config.evaluate.correct_threshold)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _decision(promoted: bool | None) -> str:
    return {True: "promoted", False: "rejected", None: "unknown"}[promoted]


def round_lines(record: dict[str, Any]) -> list[str]:
    """The text of one round's record (the module docstring shows one)."""
    lines = [f"round {record['round']}: {record['flipped']} of {record['verdicts']} verdicts "
             f"flipped: {record['reward_up']} up (0->1), {record['reward_down']} down (1->0), "
             f"{record['to_unjudged']} judged->unjudged, {record['to_judged']} unjudged->judged"]
    lines += [f"  e.g. {e['rollout_id'][:12]}  answer {e['answer_after']!r} vs label "
              f"{e['label']!r}: reward {e['reward_before']} -> {e['reward_after']} "
              f"({e['method_after']})" for e in record["examples"]]
    if record["train_rows_before"] is not None:
        lines.append(f"  train rows {record['train_rows_before']} -> {record['train_rows_after']}"
                     f": {record['train_rows_gained']} gained, {record['train_rows_lost']} lost, "
                     f"{record['train_rows_changed']} changed")
    if record["incumbent_accuracy_before"] is not None:
        accuracies = {key: _number(record[key]) for key in (
            "candidate_accuracy_before", "candidate_accuracy_after",
            "incumbent_accuracy_before", "incumbent_accuracy_after")}
        lines.append("  held-out accuracy: candidate {candidate_accuracy_before} -> "
                     "{candidate_accuracy_after}, incumbent {incumbent_accuracy_before} -> "
                     "{incumbent_accuracy_after}".format(**accuracies))
        flipped = {True: "FLIPS", False: "unchanged", None: "unknown"}[record["promotion_flipped"]]
        lines.append(f"  promotion: {_decision(record['promoted_before'])} -> "
                     f"{_decision(record['promoted_after'])} ({flipped}): "
                     f"{record['decision_after']}")
        if record["alarms_before"] or record["alarms_after"]:
            lines.append(f"  alarms fired: {', '.join(record['alarms_before']) or 'none'} -> "
                         f"{', '.join(record['alarms_after']) or 'none'}")
    lines += verifier_lines(record["verifier_before"], record["verifier_after"])
    return lines


def verifier_lines(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """The verifier's figures of a round before and after (canary error rates with their
    intervals, majority labels' reward precision and recall), those either side recorded."""
    lines = []
    for name, label in (("verifier_false_positive", "canary false positives"),
                        ("verifier_false_negative", "canary false negatives")):
        sides = [_rate(figures, name) for figures in (before, after)]
        if any(side != "-" for side in sides):
            lines.append(f"  {label}: {sides[0]} -> {sides[1]}")
    for name in ("label_reward_precision", "label_reward_recall"):
        if name in before or name in after:
            lines.append(f"  {name.replace('_', ' ')}: {_number(before.get(name))} -> "
                         f"{_number(after.get(name))}")
    return lines


def _rate(figures: dict[str, float], name: str) -> str:
    from storage.audit.round_summary import with_interval

    return with_interval(figures.get(f"{name}_rate"), figures.get(f"{name}_low"),
                         figures.get(f"{name}_high"))


def reverify(
    run_id: Annotated[str, typer.Argument(help="the run whose stored rollouts to judge again")],
    round_index: Annotated[int | None, typer.Option("--round", help="only this round")] = None,
    sets: VerifySetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    data_root: DataRoot = Path("flywheel-data"),
) -> None:
    """Judge a run's stored rollouts again with other verify settings; print what would change."""
    check_run_id(run_id)
    overrides = _verify_overrides(sets)
    open_catalog(data_root)
    settings = _round_settings(data_root, run_id, overrides)
    from tasks.reverify import ReverifyError, reverify_run

    try:
        records = reverify_run(data_root, run_id, settings, round_index=round_index)
    except ReverifyError as exc:
        fail(str(exc))
    if as_json:
        from storage.json_output import to_json

        typer.echo(to_json({"run_id": run_id, "sets": overrides, "rounds": records}))
        return
    shown = ", ".join(f"{key}={value}" for key, value in overrides.items()) or "its own settings"
    typer.echo(f"run {run_id} judged again with {shown}")
    for record in records:
        how = "reused" if record["reused"] else "written"
        typer.echo("\n".join([*round_lines(record), f"  verdicts {how}: {record['path']}"]))

