"""Every key of the run config changes exactly the fingerprints of the stages whose settings
(configs/settings.py) hold it and of the stages downstream of them, and every field of every
stage's settings is reachable from some key: table-driven over every leaf of `RunConfig`, with
a valid alternative value per field type (tasks/fingerprints.py computes the fingerprints of
the base model, its baseline and rounds 0 and 1 without running anything)."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from configs import ConfigError, RunConfig, load_config
from configs.settings import stage_settings
from tasks.fingerprints import Stage, stage_graph
from tasks.train import PROPOSER_STAGE, train_settings

# Keys that never change a result: in no stage's settings, so in no fingerprint.
NOT_FINGERPRINTED = ("rounds", "gates.", "schedule.", "scale.", "train.save_steps",
                     "train.oom_retry_batch_size", "train.device", "train.gradient_checkpointing",
                     "train.num_processes", "train.report_to")
# Keys not compared here: which snapshot of a hub id `model.path` loads (its files are the base
# checkpoint's fingerprint: tests/models/test_hub.py).
ELSEWHERE = ("model.revision", "proposer.model.revision")
# Keys whose other values need other keys set too: set in both configs compared.
COMPANIONS: dict[str, dict[str, Any]] = {
    "rollout.tensor_parallel_size": {"rollout.backend": "vllm"},
    "synthesize.bandit.arms": {"synthesize.level_scheduler": "bandit",
                               "synthesize.source": "generator", "domain.name": "reasoning_gym"},
    "train.algorithm": {"curate.solver_targets": "verified"},
    "verify.labels": {"curate.solver_targets": "verified"},
    "train.proposer.algorithm": {"train.replay_proposer_rows": True},
    "evaluate.samples": {"evaluate.temperature": 0.8},
    "scale.vllm_engines": {"rollout.backend": "vllm", "scale.task_runner": "ray",
                           "scale.rollout_shards": 4},
    # the separate proposer's model matters only beside the solver
    **{f"proposer.model.{key}": {"proposer.separate": True}
       for key in ("path", "hidden_size", "num_layers", "head_dim", "intermediate_size",
                   "init_seed")},
}
SPECIAL: dict[str, list[Any]] = {  # values the generic rules below cannot guess
    "schedule.cron": ["0 3 * * *"], "schedule.timezone": ["Europe/Paris"],
    "verify.answer_regex": ["answer: (.+)"], "train.lora.target_modules": [["q_proj"]],
    "train.dtype": ["bfloat16"],  # float32 is what `auto` resolves to on a CPU machine
    "alarms.block": [["heldout_leak"]],
    "verify.judge.template": ["Q: {question} A: {answer} Score:"],
    "verify.judge.pairwise_template": ["Q: {question} A: {first} B: {second} Better:"],
    "verify.judge.rubric_template": ["What must an answer to {question} hold?"],
    "verify.think_tags": [[], ["[r]", "[/r]"]],
    "curate.hint_template": ["{question} (the answer: {answer})"],
}


def leaves(model: type[BaseModel], value: BaseModel, prefix: str = ""
           ) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, annotation, value) of every leaf field of a config or settings model."""
    for name, info in type(value).model_fields.items():
        current = getattr(value, name)
        if isinstance(current, BaseModel):
            yield from leaves(type(current), current, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info.annotation, current


def alternatives(key: str, annotation: Any, value: Any, tmp_model: str) -> list[Any]:
    """Candidate other values of a leaf, in order; the first valid one is used."""
    if key in SPECIAL:
        return SPECIAL[key]
    if key in ("model.path", "proposer.model.path"):
        return [tmp_model]
    if key == "evaluate.benchmarks":  # its file's digest is fingerprinted: the file must exist
        return [{"toy": f"{tmp_model}/benchmark.jsonl"}]
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return [option for option in args if option != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, value * 2, 32]
    if isinstance(value, float):
        return [value + 0.1, value - 0.1, value * 0.5, 0.5, value * 2]
    if isinstance(value, str):
        return [value + " x", "x"]
    if isinstance(value, dict):
        first = next(iter(value))
        return [{**value, first: value[first] + 1.0}]
    if isinstance(value, list):
        return [value[:-1]] if len(value) > 1 else [[*value, "x"]]
    if value is None:
        return [32, 0.5, "x"]
    raise AssertionError(f"no alternative for {key} = {value!r} ({annotation})")


def configured(overrides: dict[str, Any]) -> RunConfig | None:
    try:
        return load_config(None, dict(overrides))
    except (ConfigError, ValidationError):
        return None


def settings_of(config: RunConfig, stages: list[Stage]) -> dict[Stage, BaseModel]:
    return {(stage, r): (train_settings(config, r) if stage in ("train", PROPOSER_STAGE)
                         else stage_settings(config, stage, r)) for stage, r in stages}


def downstream(stages: set[Stage], reads: dict[Stage, set[Stage]]) -> set[Stage]:
    """`stages` and every stage that reads, directly or not, one of them."""
    out = set(stages)
    while True:
        more = {s for s, inputs in reads.items() if inputs & out} - out
        if not more:
            return out
        out |= more


def changed_fields(a: BaseModel | None, b: BaseModel | None) -> set[str]:
    if a is None or b is None or type(a) is not type(b):
        return {"<all>"}
    old = {k: v for k, _, v in leaves(type(a), a)}
    new = {k: v for k, _, v in leaves(type(b), b)}
    return {k for k in old if old[k] != new[k]}


def cases(tmp_model: str) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(key, base overrides, changed overrides) for every leaf of the run config."""
    for key, annotation, _ in leaves(RunConfig, RunConfig()):
        if key in ELSEWHERE:
            continue
        base = COMPANIONS.get(key, {})
        start = configured(base)
        assert start is not None, key
        current = {k: v for k, _, v in leaves(RunConfig, start)}[key]
        for candidate in alternatives(key, annotation, current, tmp_model):
            changed = {**base, key: candidate}
            config = configured(changed)
            values = {} if config is None else {k: v for k, _, v in leaves(RunConfig, config)}
            if config is not None and values[key] != current:
                try:
                    stage_graph(config)
                except ValueError:  # e.g. train.device = "cuda" on a machine without one
                    continue
                yield key, base, changed
                break
        else:
            raise AssertionError(f"no valid alternative value for {key}")


@pytest.fixture(scope="module")
def tmp_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("model")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "benchmark.jsonl").write_text('{"question": "What is 2 + 2?", "answer": "4"}\n')
    return str(folder)


def test_every_key_reruns_its_stages_and_those_downstream_only(tmp_model: str) -> None:
    covered: dict[str, set[str]] = {}
    quiet = []
    for key, base_overrides, overrides in cases(tmp_model):
        base, changed = configured(base_overrides), configured(overrides)
        before, reads = stage_graph(base)
        after, reads_after = stage_graph(changed)
        stages = sorted(set(before) | set(after))
        old, new = settings_of(base, [s for s in stages if s in before]), settings_of(
            changed, [s for s in stages if s in after])
        direct = set(stages) if key == "seed" else {
            s for s in stages if changed_fields(old.get(s), new.get(s))}
        for s in direct & set(old) & set(new):
            if type(old[s]) is type(new[s]):
                covered.setdefault(type(old[s]).__name__, set()).update(
                    changed_fields(old[s], new[s]))
        either = {s: reads.get(s, set()) | reads_after.get(s, set()) for s in stages}
        expected = downstream(direct, either)  # a link in either graph carries a change
        moved = {s for s in stages if before.get(s) != after.get(s)}
        assert moved == expected, (key, sorted(moved ^ expected))
        if not direct:
            quiet.append(key)
    assert all(key.startswith(NOT_FINGERPRINTED) for key in quiet), quiet
    assert all(any(key.startswith(prefix) for key in quiet) for prefix in NOT_FINGERPRINTED)
    config = load_config(None)
    for (_, r), settings in settings_of(config, list(stage_graph(config)[0])).items():
        name = type(settings).__name__
        every = {k for k, _, _ in leaves(type(settings), settings)}
        missing = every - covered.get(name, set())
        assert not missing, (name, r, sorted(missing))


@pytest.mark.parametrize(("key", "value", "shared"), [
    ("synthesize.proposals", 64, [("synthesize", 0), ("train", 0)]),
    ("synthesize.bandit.alpha", 0.3, [("synthesize", 0), ("curate", 0)]),
    ("train.grpo.beta", 0.1, [("train", 0), ("evaluate", 0)]),
    ("train.dpo.max_pairs_per_problem", 2, [("curate", 0), ("train", 0)]),
    ("gates.max_kept_fraction", 0.9, [("train", 1), ("promote", 1)]),
])
def test_runs_that_differ_in_round_only_settings_share_the_warm_up(key, value, shared):
    before = stage_graph(load_config(None))[0]
    after = stage_graph(load_config(None, {key: value}))[0]
    for stage in shared:
        assert before[stage] == after[stage], stage
    assert before[("synthesize", 1)] != after[("synthesize", 1)] or key.startswith(
        ("train.", "gates."))
