"""Run configuration: one pydantic model per concern, composed into `RunConfig`.

The defaults of every model *are* the built-in tiny CPU run; `configs/tiny-cpu.toml` spells
them out (a test keeps the two equal). Unknown keys and out-of-range values are errors that
name the key, the bad value and the allowed range:

    config error in configs/x.toml: train.learning_rate = -0.1: Input should be greater than 0

Algorithm settings are nested in sections of their own (TOML sub-tables): `[train.warmup]`,
`[train.grpo]`, `[train.dpo]`, `[train.proposer]`, `[train.lora]`, `[synthesize.bandit]`,
`[curate.diversity]`; a dotted override reaches them too
(`load_config(path, {"train.grpo.beta": 0.1})`). Every
stage reads a frozen settings object built from the run config (configs/settings.py), never
the run config itself; the whole settings object goes into the stage's fingerprint, so changing
any of its keys reruns that stage and everything after. The settings marked "not part of any
stage fingerprint" ([gates], [schedule], [scale], the train stage's operational keys) are in no
stage's settings (they never change a result).
"""

from __future__ import annotations

import codecs
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from configs.base import RUN_ID_PATTERN, ConfigError, Section
from configs.domain import (
    ANSWER_EXTRACTORS,
    FREE_FORM_DOMAINS,
    DatasetConfig,
    DomainConfig,
    ModelConfig,
    PromptConfig,
    ProposerConfig,
    ReasoningGymConfig,
    SandboxConfig,
    VerifyConfig,
)
from configs.operations import ALARMS, AlarmsConfig, GatesConfig, ScaleConfig, ScheduleConfig
from configs.stages import (
    BanditConfig,
    CurateConfig,
    DiversityConfig,
    EvaluateConfig,
    PromoteConfig,
    RolloutConfig,
    SynthesizeConfig,
    WarmupModeConfig,
)
from configs.train import (
    DpoConfig,
    GrpoConfig,
    LoraConfig,
    ProposerTrainConfig,
    TrainConfig,
    WarmupConfig,
)

__all__ = [
    "ALARMS",
    "ANSWER_EXTRACTORS",
    "AlarmsConfig",
    "BanditConfig",
    "ConfigError",
    "CurateConfig",
    "DatasetConfig",
    "DiversityConfig",
    "DomainConfig",
    "DpoConfig",
    "EvaluateConfig",
    "FREE_FORM_DOMAINS",
    "GatesConfig",
    "GrpoConfig",
    "LoraConfig",
    "ModelConfig",
    "ProposerConfig",
    "PromoteConfig",
    "PromptConfig",
    "ProposerTrainConfig",
    "RUN_ID_PATTERN",
    "ReasoningGymConfig",
    "RolloutConfig",
    "RunConfig",
    "SandboxConfig",
    "ScaleConfig",
    "ScheduleConfig",
    "Section",
    "SynthesizeConfig",
    "TrainConfig",
    "VerifyConfig",
    "WarmupConfig",
    "WarmupModeConfig",
    "apply_overrides",
    "load_config",
    "read_toml",
    "validate_config",
]


class RunConfig(Section):
    """A run: the number of rounds, the run's seed and one section per concern."""

    rounds: int = Field(3, ge=0, le=10_000, description="self-improvement rounds after warm-up")
    seed: int = Field(
        0, ge=0, description="the run's seed: every stage seed derives from it, the stage and the "
                             "round (storage/seeds.py)")
    model: ModelConfig = Field(ModelConfig(), description="the solver (and proposer, by default)")
    proposer: ProposerConfig = Field(ProposerConfig(), description="who writes the problems")
    domain: DomainConfig = Field(DomainConfig(), description="the problem domain")
    synthesize: SynthesizeConfig = Field(SynthesizeConfig(), description="the synthesize stage")
    rollout: RolloutConfig = Field(RolloutConfig(), description="the rollout stage and its backend")
    verify: VerifyConfig = Field(VerifyConfig(), description="the verify stage's labels")
    curate: CurateConfig = Field(CurateConfig(), description="the curate stage")
    train: TrainConfig = Field(TrainConfig(), description="the train stage")
    warmup: WarmupModeConfig = Field(
        WarmupModeConfig(), description="what round 0 does: references, self_samples or none")
    evaluate: EvaluateConfig = Field(EvaluateConfig(), description="the held-out evaluation")
    promote: PromoteConfig = Field(PromoteConfig(), description="the promotion rule")
    alarms: AlarmsConfig = Field(
        AlarmsConfig(), description="alarms for a loop that fools itself (promotion blocks)")
    gates: GatesConfig = Field(GatesConfig(), description="the data-quality gates")
    schedule: ScheduleConfig = Field(ScheduleConfig(), description="the nightly deployment")
    scale: ScaleConfig = Field(ScaleConfig(), description="where rollout and verification run")
    sandbox: SandboxConfig = Field(
        SandboxConfig(), description="how model-written programs run (python_io)")
    prompt: PromptConfig = Field(
        PromptConfig(), description="chat templates and stop strings of pretrained chat models")

    @model_validator(mode="after")
    def _sections_agree(self) -> RunConfig:
        self._scale_fits_the_backend()
        if (self.rollout.backend == "vllm" and self.train.algorithm == "grpo"
                and self.train.device == "cpu"):
            msg = ("train.algorithm = 'grpo' with rollout.backend = 'vllm' generates with TRL's "
                   "colocated vLLM, which needs train.device = 'cuda' (vLLM's CPU build cannot "
                   "take TRL's weight sync); set train.device = 'cuda' or rollout.backend = "
                   "'transformers'")
            raise ValueError(msg)
        if self.synthesize.bandit.arms == "task_level" and self.domain.name != "reasoning_gym":
            msg = (f"synthesize.bandit.arms = 'task_level' draws (task, level) arms of a "
                   f"reasoning_gym task mix; domain.name is {self.domain.name!r}: set "
                   "synthesize.bandit.arms = 'level' or domain.name = 'reasoning_gym'")
            raise ValueError(msg)
        clash = (f"train.algorithm = {self.train.algorithm!r}" if self.train.algorithm != "sft" else
                 f"verify.labels = {self.verify.labels!r}" if self.verify.labels != "reference" else
                 None)
        if self.curate.solver_targets == "rationalize" and clash:
            msg = (f"curate.solver_targets = 'rationalize' (the default) trains references by SFT; "
                   f"with {clash} set curate.solver_targets = 'verified'")
            raise ValueError(msg)
        if self.curate.rationalize_with == "hint" and self.curate.solver_targets != "rationalize":
            msg = (f"curate.rationalize_with = 'hint' asks too-hard problems again with a hint, "
                   f"which only curate.solver_targets = 'rationalize' trains; solver_targets is "
                   f"{self.curate.solver_targets!r}: set it to 'rationalize' or rationalize_with "
                   "= 'reference'")
            raise ValueError(msg)
        if self.promote.test == "mcnemar" and self.evaluate.samples > 1:
            msg = (f"promote.test = 'mcnemar' with evaluate.samples = {self.evaluate.samples}: "
                   "McNemar's test needs pass/fail items, and an item's several samples give a "
                   "pass fraction; set promote.test = 'paired_bootstrap' or evaluate.samples = 1")
            raise ValueError(msg)
        self._benchmarks_are_not_training_files()
        return self

    def _benchmarks_are_not_training_files(self) -> None:
        """A benchmark must never be trained on: one that is a `[domain.dataset]` file (by path
        or the same file under another name) is refused before the run starts."""
        import os

        for name, path in self.evaluate.benchmarks.items():
            for other in self.domain.dataset.paths:
                same = os.path.abspath(path) == os.path.abspath(other)
                if not same:
                    try:
                        same = os.path.samefile(path, other)
                    except OSError:
                        same = False
                if same:
                    msg = (f"evaluate.benchmarks.{name} = {path!r} is the training file "
                           f"{other!r} of domain.dataset.paths: "
                           "a benchmark must never be trained on; point the benchmark at its "
                           "own file or remove it from domain.dataset.paths")
                    raise ValueError(msg)

    def _scale_fits_the_backend(self) -> None:
        """vLLM shards need engine actors (Ray); engine actors need vLLM, Ray and a shard each."""
        scale = self.scale
        on_actors = self.rollout.backend == "vllm" and scale.task_runner == "ray"
        if scale.rollout_shards > 1 and self.rollout.backend == "vllm" and not on_actors:
            msg = (f"scale.rollout_shards = {scale.rollout_shards} with rollout.backend = 'vllm' "
                   "needs scale.task_runner = 'ray' (the shards go to vLLM engine actors; in this "
                   "process one engine batches the whole stage); set task_runner = 'ray' or "
                   "rollout_shards = 1")
            raise ValueError(msg)
        if scale.vllm_engines > 1 and not on_actors:
            msg = (f"scale.vllm_engines = {scale.vllm_engines} needs rollout.backend = 'vllm' and "
                   "scale.task_runner = 'ray' (engine actors run on Ray); set vllm_engines = 1")
            raise ValueError(msg)
        if scale.vllm_engines > scale.rollout_shards:
            msg = (f"scale.vllm_engines = {scale.vllm_engines} with rollout_shards = "
                   f"{scale.rollout_shards}: each shard goes to one engine, so "
                   f"{scale.vllm_engines - scale.rollout_shards} would stay idle; set "
                   f"rollout_shards >= {scale.vllm_engines}")
            raise ValueError(msg)


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "<root>"
    if error["type"] == "extra_forbidden":
        return f"unknown key `{key}` (remove it or check its spelling)"
    value = error.get("input")
    if isinstance(value, dict):
        return f"`{key}`: {error['msg']}"
    return f"`{key}` = {value!r}: {error['msg']}"


def validate_config(data: dict[str, Any], source: str) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"config error in {source}: {problems}") from None


def load_config(path: str | Path | None = None,
                overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a TOML run config (None = the built-in tiny CPU run) and apply CLI overrides.

    `overrides` maps dotted keys to values, e.g. {"rounds": 2, "rollout.samples_per_problem": 4}.
    """
    data: dict[str, Any] = {} if path is None else read_toml(Path(path))
    source = "<defaults>" if path is None else str(path)
    return validate_config(apply_overrides(data, overrides or {}, source), source)


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at `path` as nested dicts; a ConfigError naming the file and where it
    went wrong when it is missing, unreadable, not UTF-8 text (the byte offset and its line)
    or not TOML (tomllib's line and column). A UTF-8 byte order mark is skipped, as editors on
    Windows write one."""
    if not path.is_file():
        raise ConfigError(f"config error: file not found: {path} (pass an existing TOML file)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config error: cannot read {path} ({exc.strerror}); check its "
                          "permissions") from None
    skipped = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        text = raw[skipped:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skipped + exc.start
        line = raw.count(b"\n", 0, offset) + 1
        raise ConfigError(f"config error in {path}: not UTF-8 text at byte offset {offset} "
                          f"(line {line}): 0x{raw[offset]:02x}; save the file as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config error in {path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config error in {path}: not valid TOML: values nested too "
                          "deeply") from None


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` (a config as nested dicts, changed in place) with each dotted key of `overrides`
    set, e.g. {"train.grpo.beta": 0.1}; a key below a value that is no section is a ConfigError."""
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = data
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                section = ".".join(parents[:depth + 1])
                raise ConfigError(f"config error in {source}: cannot set `{dotted}`: "
                                  f"`{section}` is a value, not a section")
        node[leaf] = value
    return data
