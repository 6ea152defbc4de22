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
    ReasoningGymConfig,
    SandboxConfig,
    VerifyConfig,
)
from configs.stages import (
    BanditConfig,
    CurateConfig,
    DiversityConfig,
    EvaluateConfig,
    GatesConfig,
    PromoteConfig,
    RolloutConfig,
    ScaleConfig,
    ScheduleConfig,
    SynthesizeConfig,
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
    "ANSWER_EXTRACTORS",
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
    "apply_overrides",
    "load_config",
    "validate_config",
]


class RunConfig(Section):
    """A run: the number of rounds, the run's seed and one section per concern."""

    rounds: int = Field(3, ge=0, le=10_000, description="self-improvement rounds after warm-up")
    seed: int = Field(
        0, ge=0, description="the run's seed: every stage seed derives from it, the stage and the "
                             "round (storage/seeds.py)")
    model: ModelConfig = Field(ModelConfig(), description="the model that plays both roles")
    domain: DomainConfig = Field(DomainConfig(), description="the problem domain")
    synthesize: SynthesizeConfig = Field(SynthesizeConfig(), description="the synthesize stage")
    rollout: RolloutConfig = Field(RolloutConfig(), description="the rollout stage and its backend")
    verify: VerifyConfig = Field(VerifyConfig(), description="the verify stage's labels")
    curate: CurateConfig = Field(CurateConfig(), description="the curate stage")
    train: TrainConfig = Field(TrainConfig(), description="the train stage")
    evaluate: EvaluateConfig = Field(EvaluateConfig(), description="the held-out evaluation")
    promote: PromoteConfig = Field(PromoteConfig(), description="the promotion rule")
    gates: GatesConfig = Field(GatesConfig(), description="the data-quality gates")
    schedule: ScheduleConfig = Field(ScheduleConfig(), description="the nightly deployment")
    scale: ScaleConfig = Field(ScaleConfig(), description="where rollout and verification run")
    sandbox: SandboxConfig = Field(
        SandboxConfig(), description="how model-written programs run (python_io)")
    prompt: PromptConfig = Field(
        PromptConfig(), description="chat templates and stop strings of pretrained chat models")

    @model_validator(mode="after")
    def _sections_agree(self) -> RunConfig:
        if self.scale.rollout_shards > 1 and self.rollout.backend != "transformers":
            msg = (f"scale.rollout_shards = {self.scale.rollout_shards} needs rollout.backend = "
                   f"'transformers' (vLLM batches a whole stage itself); set rollout_shards = 1")
            raise ValueError(msg)
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
        return self


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
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise ConfigError(f"config error: file not found: {path} (pass an existing TOML file)")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config error in {path}: not valid TOML: {exc}") from None
    return validate_config(apply_overrides(data, overrides or {}, source), source)


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
