"""The stages' settings: one frozen model per stage (and per mode where a stage reads other
settings by mode), built from the run config by its `from_config`.

A stage's compute function receives its settings object, its inputs and the domain, never the
whole `RunConfig`; its fingerprint hashes the whole settings object with its defaults
(`model_dump(mode="json")`) and the class's name (tasks/stage.py), so every field here reruns
the stage and everything after it when it changes, and nothing outside these models does.
The settings that never change a result (`[gates]`, `[schedule]`, `[scale]` and the train
stage's operational keys, `TrainOperations`) are in no stage's settings.

    SynthesizeSettings.from_config(config).model_dump(mode="json")
    -> {"domain": {"domain": {"name": "arithmetic", ...}, "answer_checking": {...},
                   "prompt": {...}, "sandbox": {...}, "model_path": None},
        "synthesize": {"proposals": 4096, ...}, "backend": {"backend": "transformers", ...}}

Modes: round 0's warm-up synthesize (`SeedSynthesizeSettings`) draws the seed problems from the
domain's generator and reads only the admission keys of `[synthesize]`, so runs that differ only
in round-only synthesize settings share one warm-up; the warm-up's curate and train
(`WarmupCurateSettings`, `WarmupTrainSettings`) read no DPO or GRPO settings; the warm-up's
rollout and verify (`WarmupRolloutSettings`, `WarmupVerifySettings`) have no canaries. Under
`[warmup] mode = "self_samples"` round 0's rollout and curate are `SelfSampleRolloutSettings`
and `SelfSampleCurateSettings` (k samples, verified answers as solver rows); the mode is
their class, no field, so a references run's fingerprints do not hold it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from configs import (
    ANSWER_EXTRACTORS,
    AlarmsConfig,
    CurateConfig,
    DomainConfig,
    DpoConfig,
    GrpoConfig,
    LoraConfig,
    ModelConfig,
    PromoteConfig,
    PromptConfig,
    ProposerTrainConfig,
    RolloutConfig,
    RunConfig,
    SandboxConfig,
    SynthesizeConfig,
    VerifyConfig,
    WarmupConfig,
)
from configs.domain import VERIFY_COMPARES, JudgeConfig, RewardModelConfig
from storage.train_stages import TRAIN_STAGES

Dtype = Literal["float32", "bfloat16", "float16"]


class StageSettings(BaseModel):
    """What every stage's settings share: frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerChecking(StageSettings):
    """`[verify]`'s answer checking (every key but `labels`): how the free-form domains find
    and compare a completion's final answer (domains/answers.py)."""

    extract: list[Literal[ANSWER_EXTRACTORS]] = Field(
        description="verify.extract: the answer extractors, tried in order")
    answer_regex: str | None = Field(
        description="verify.answer_regex: the regex extractor's pattern")
    think_tags: list[str] = Field(
        description="verify.think_tags: the reasoning block the answer is read after")
    compare: Literal[VERIFY_COMPARES] = Field(  # type: ignore[valid-type]
        description="verify.compare: how an answer is compared with the reference")
    math_timeout_seconds: int = Field(
        description="verify.math_timeout_seconds: time limit of one math-verify call")
    judge: JudgeConfig = Field(description="[verify.judge]: the LLM judge of compare = 'judge'")
    reward_model: RewardModelConfig = Field(
        description="[verify.reward_model]: the reward model of compare = 'reward_model'")
    reward_function: str | None = Field(
        description="verify.reward_function: the user's TRL-style reward function")

    @classmethod
    def from_config(cls, config: RunConfig) -> AnswerChecking:
        verify = config.verify
        return cls(extract=verify.extract, answer_regex=verify.answer_regex,
                   think_tags=verify.think_tags, compare=verify.compare,
                   math_timeout_seconds=verify.math_timeout_seconds,
                   judge=verify.judge, reward_model=verify.reward_model,
                   reward_function=verify.reward_function)


class DomainSettings(StageSettings):
    """What defines the domain's behaviour (domains.get_domain): its section, the answer
    checking, the prompts and the sandbox; part of every stage that uses the domain, whole and
    in every domain (a key another domain reads reruns this one's stages too)."""

    domain: DomainConfig = Field(description="[domain]: the domain, its levels and generator")
    answer_checking: AnswerChecking = Field(description="[verify] without labels")
    prompt: PromptConfig = Field(description="[prompt]: chat templates and stop strings")
    sandbox: SandboxConfig = Field(description="[sandbox]: how python_io runs programs")
    model_path: str | None = Field(
        description="model.path: its tokenizer's chat template renders the prompts")

    @classmethod
    def from_config(cls, config: RunConfig) -> DomainSettings:
        return cls(domain=config.domain, answer_checking=AnswerChecking.from_config(config),
                   prompt=config.prompt, sandbox=config.sandbox, model_path=config.model.path)

    def domain_config(self) -> RunConfig:
        """A run config holding these sections (the others at their defaults, unchecked
        against them), to build the domain from (`get_domain(name, config)`) where no run
        config travels, e.g. in a launched training process."""
        verify = VerifyConfig(**self.answer_checking.model_dump())
        return RunConfig.model_construct(model=ModelConfig(path=self.model_path),
                                         domain=self.domain, verify=verify, prompt=self.prompt,
                                         sandbox=self.sandbox)


class BackendSettings(StageSettings):
    """The `[rollout]` keys that decide how a checkpoint is sampled besides the sampling
    parameters (models/backends.py `backend_for` reads them)."""

    backend: Literal["transformers", "vllm"] = Field(description="rollout.backend")
    batch_size: int = Field(description="rollout.batch_size: sequences per generate call")
    dtype: Dtype = Field(description="rollout.dtype: the sampled weights' precision")
    tensor_parallel_size: int = Field(description="rollout.tensor_parallel_size (vllm)")
    gpu_memory_utilization: float = Field(description="rollout.gpu_memory_utilization (vllm)")
    cpu_kv_cache_gib: float = Field(description="rollout.cpu_kv_cache_gib (vllm on CPU)")
    enforce_eager: bool = Field(description="rollout.enforce_eager (vllm)")

    @classmethod
    def from_config(cls, config: RunConfig) -> BackendSettings:
        return cls(**{name: getattr(config.rollout, name) for name in cls.model_fields})


class BaseModelSettings(StageSettings):
    """The `base` stage: the built-in tiny model it builds when `model.path` is unset
    (tasks/incumbent.py; a `model.path` folder is the base checkpoint itself, no stage)."""

    hidden_size: int = Field(description="model.hidden_size: residual stream width")
    num_layers: int = Field(description="model.num_layers: transformer blocks")
    head_dim: int = Field(description="model.head_dim: width of one attention head")
    intermediate_size: int = Field(description="model.intermediate_size: width of the MLP")
    init_seed: int = Field(description="model.init_seed: seed of the initial weights")

    @classmethod
    def from_config(cls, config: RunConfig) -> BaseModelSettings:
        return cls.from_model(config.model)

    @classmethod
    def from_model(cls, model: ModelConfig) -> BaseModelSettings:
        """The settings of `model`'s tiny model (`[model]`, or `[proposer.model]`)."""
        return cls(**{name: getattr(model, name) for name in cls.model_fields})


class AdmissionSettings(StageSettings):
    """What both synthesize stages' admission drops besides repeats: the benchmark files'
    questions (not part of the settings' fingerprint: the files' digests are the stage's inputs,
    tasks/synthesize.py `synthesize_inputs`)."""

    benchmarks: dict[str, str] = Field(default_factory=dict, exclude=True, description=(
        "evaluate.benchmarks: files whose questions are dropped, never trained on"))


class SeedSynthesizeSettings(AdmissionSettings):
    """Round 0's synthesize: the domain generator's seed problems, admitted."""

    domain: DomainSettings = Field(description="the domain (its seed generator)")
    near_duplicate_threshold: float = Field(
        description="synthesize.near_duplicate_threshold: the admission's near-duplicate bar")
    ngram: int = Field(description="synthesize.ngram: n-gram size of the near-duplicate check")

    @classmethod
    def from_config(cls, config: RunConfig) -> SeedSynthesizeSettings:
        return cls(domain=DomainSettings.from_config(config),
                   near_duplicate_threshold=config.synthesize.near_duplicate_threshold,
                   ngram=config.synthesize.ngram, benchmarks=config.evaluate.benchmarks)


class SynthesizeSettings(AdmissionSettings):
    """Rounds >= 1's synthesize: the proposer (or a baseline's generator) and the admission."""

    domain: DomainSettings = Field(description="the domain")
    synthesize: SynthesizeConfig = Field(description="[synthesize] with its bandit")
    backend: BackendSettings = Field(description="the backend the proposer samples on")

    @classmethod
    def from_config(cls, config: RunConfig) -> SynthesizeSettings:
        return cls(domain=DomainSettings.from_config(config), synthesize=config.synthesize,
                   backend=BackendSettings.from_config(config),
                   benchmarks=config.evaluate.benchmarks)


class WarmupRolloutSettings(StageSettings):
    """Round 0's rollout: one sample per seed problem (no canaries)."""

    # The references warm-up trains on none of the answers: one per problem measures pass@1.
    answers_kept: ClassVar[bool] = False

    domain: DomainSettings = Field(description="the domain (the solver's prompts)")
    rollout: RolloutConfig = Field(description="[rollout]: sampling and backend")

    @classmethod
    def from_config(cls, config: RunConfig) -> WarmupRolloutSettings:
        return cls(domain=DomainSettings.from_config(config), rollout=config.rollout)

    @property
    def samples_per_problem(self) -> int:
        """Answers sampled per problem: `rollout.samples_per_problem` where they may be trained
        on, 1 in the references warm-up."""
        return self.rollout.samples_per_problem if self.answers_kept else 1


class SelfSampleRolloutSettings(WarmupRolloutSettings):
    """Round 0's rollout under `[warmup] mode = "self_samples"`: k samples per seed problem,
    whose verified ones the warm-up trains on (no canaries)."""

    answers_kept: ClassVar[bool] = True


class RolloutSettings(WarmupRolloutSettings):
    """Rounds >= 1's rollout: the solver's k samples per problem, and per canary
    (tasks/verifier_rates.py)."""

    answers_kept: ClassVar[bool] = True

    canary: int = Field(
        description="verify.canary: known-answer problems sampled after the round's own")

    @classmethod
    def from_config(cls, config: RunConfig) -> RolloutSettings:
        return cls(**dict(WarmupRolloutSettings.from_config(config)),
                   canary=config.verify.canary)


class WarmupVerifySettings(StageSettings):
    """Round 0's verify: the domain's verdict on every rollout."""

    domain: DomainSettings = Field(description="the domain (its verifier)")
    labels: Literal["reference", "majority"] = Field(
        description="verify.labels: what a rollout's reward compares against")

    @classmethod
    def from_config(cls, config: RunConfig) -> WarmupVerifySettings:
        return cls(domain=DomainSettings.from_config(config), labels=config.verify.labels)


class VerifySettings(WarmupVerifySettings):
    """Rounds >= 1's verify: the verdicts, and the verifier's error rates on the canaries."""

    canary: int = Field(description="verify.canary: known-answer problems judged with the round's")

    @classmethod
    def from_config(cls, config: RunConfig) -> VerifySettings:
        return cls(**dict(WarmupVerifySettings.from_config(config)),
                   canary=config.verify.canary)


class WarmupCurateSettings(StageSettings):
    """Round 0's curate: the seed problems' reference rows and the proposer's format rows."""

    domain: DomainSettings = Field(
        description="the domain (domain.seed_max_level: the hardest level the solver keeps)")
    curate: CurateConfig = Field(description="[curate]")
    algorithm: Literal["sft", "grpo", "dpo"] = Field(
        description="train.algorithm: the form of the solver rows")

    @classmethod
    def from_config(cls, config: RunConfig) -> WarmupCurateSettings:
        return cls(domain=DomainSettings.from_config(config), curate=config.curate,
                   algorithm=config.train.algorithm)


class SelfSampleCurateSettings(WarmupCurateSettings):
    """Round 0's curate under `[warmup] mode = "self_samples"`: the seed problems' solver rows
    are the model's own verified answers (at most `curate.max_answers_per_problem` each), not
    their references; the proposer's format rows as in the references warm-up."""


class CurateSettings(WarmupCurateSettings):
    """Rounds >= 1's curate: the difficulty band, the solver rows of the algorithm (DPO pairs
    included) and the proposer rows."""

    max_pairs_per_problem: int = Field(
        description="train.dpo.max_pairs_per_problem: chosen/rejected pairs per kept problem")
    min_pair_margin: float = Field(
        description="train.dpo.min_margin: least reward gap between a pair's two answers")

    @classmethod
    def from_config(cls, config: RunConfig) -> CurateSettings:
        return cls(**dict(WarmupCurateSettings.from_config(config)),
                   max_pairs_per_problem=config.train.dpo.max_pairs_per_problem,
                   min_pair_margin=config.train.dpo.min_margin)


class RationalizeSettings(StageSettings):
    """Rounds >= 1's rationalize stage (`curate.rationalize_with = "hint"`): the too-hard
    problems asked again with their answer as a hint, k samples each, judged
    (tasks/rationalize.py)."""

    domain: DomainSettings = Field(description="the domain (prompts and verifier)")
    rollout: RolloutConfig = Field(description="[rollout]: sampling and backend")
    curate: CurateConfig = Field(
        description="[curate]: which problems are too hard (the band, rationalize_ratio) and "
                    "the hint_template")

    @classmethod
    def from_config(cls, config: RunConfig) -> RationalizeSettings:
        return cls(domain=DomainSettings.from_config(config), rollout=config.rollout,
                   curate=config.curate)


def asks_hints(config: RunConfig, round_index: int) -> bool:
    """Whether round `round_index` has a rationalize stage: rounds >= 1 under
    `curate.rationalize_with = "hint"` (the config refuses it without SFT rationalization)."""
    return round_index >= 1 and config.curate.rationalize_with == "hint"


class WarmupTrainSettings(StageSettings):
    """Round 0's train: one SFT pass on the seed rows with `[train.warmup]`."""

    domain: DomainSettings = Field(description="the domain (the rows' prompts)")
    dtype: Dtype = Field(
        description="the training dtype, resolved on this machine (models/runtime.py): a run "
                    "resumed on other hardware retrains")
    batch_size: int = Field(description="train.batch_size: rows per optimizer step")
    max_length: int = Field(description="train.max_length: longest training sequence, tokens")
    replay_ratio: float = Field(description="train.replay_ratio: replayed rows per new row")
    replay_proposer_rows: bool = Field(
        description="train.replay_proposer_rows: replay the proposer rows too")
    warmup: WarmupConfig = Field(description="[train.warmup]: the warm-up's SFT settings")
    lora: LoraConfig = Field(description="[train.lora]: LoRA instead of full fine-tuning")
    separate_proposer: bool = Field(
        description="proposer.separate: the proposer rows train the proposer's own checkpoint "
                    "(train-proposer), not the solver's")

    @classmethod
    def from_config(cls, config: RunConfig, *, dtype: str) -> WarmupTrainSettings:
        """`dtype`: the resolved training dtype (models.runtime.resolve_precision)."""
        train = config.train
        return cls(domain=DomainSettings.from_config(config), dtype=dtype,
                   batch_size=train.batch_size, max_length=train.max_length,
                   replay_ratio=train.replay_ratio, replay_proposer_rows=train.replay_proposer_rows,
                   warmup=train.warmup, lora=train.lora,
                   separate_proposer=config.proposer.separate)


class TrainSettings(WarmupTrainSettings):
    """Rounds >= 1's train: the algorithm's pass, the proposer's pass and an SFT pass.

    `rollout`, `curate`, `labels` and `proposal_max_new_tokens` are what the proposer's GRPO
    pass samples and rewards with (tasks/curriculum/online.py), and `rollout` the backend of the
    solver's GRPO generation (models/grpo.py `grpo_generation`)."""

    algorithm: Literal["sft", "grpo", "dpo"] = Field(description="train.algorithm")
    learning_rate: float = Field(description="train.learning_rate: SFT learning rate")
    epochs: float = Field(description="train.epochs: passes over the round's rows")
    max_steps: int = Field(description="train.max_steps: step cap of the round's training")
    grpo: GrpoConfig = Field(description="[train.grpo]")
    dpo: DpoConfig = Field(description="[train.dpo]")
    proposer: ProposerTrainConfig = Field(description="[train.proposer]")
    rollout: RolloutConfig = Field(description="[rollout]: the solver's sampling and backend")
    curate: CurateConfig = Field(description="[curate]: the proposer's reward")
    labels: Literal["reference", "majority"] = Field(description="verify.labels")
    proposal_max_new_tokens: int = Field(
        description="synthesize.max_new_tokens: the longest proposal of the proposer's GRPO pass")

    @classmethod
    def from_config(cls, config: RunConfig, *, dtype: str) -> TrainSettings:
        """`dtype`: the resolved training dtype (models.runtime.resolve_precision)."""
        train = config.train
        return cls(**dict(WarmupTrainSettings.from_config(config, dtype=dtype)),
                   algorithm=train.algorithm, learning_rate=train.learning_rate,
                   epochs=train.epochs, max_steps=train.max_steps, grpo=train.grpo,
                   dpo=train.dpo, proposer=train.proposer, rollout=config.rollout,
                   curate=config.curate, labels=config.verify.labels,
                   proposal_max_new_tokens=config.synthesize.max_new_tokens)


class TrainOperations(StageSettings):
    """How the train stage runs, never what it computes: part of no fingerprint (configs/train.py
    marks these keys), so changing one (say, after an out-of-memory crash) keeps finished work.
    The device, dtype, activation recomputation, process count and reporting reach the trainers
    as their runtime (models/runtime.py `train_runtime`)."""

    save_steps: int = Field(description="train.save_steps: trainer checkpoint cadence")
    oom_retry_batch_size: int | None = Field(
        description="train.oom_retry_batch_size: the per-step batch after running out of memory")

    @classmethod
    def from_config(cls, config: RunConfig) -> TrainOperations:
        return cls(save_steps=config.train.save_steps,
                   oom_retry_batch_size=config.train.oom_retry_batch_size)


class EvaluateSettings(StageSettings):
    """The evaluate stage (and the base model's baseline): answers to the held-out set, greedy
    unless evaluate.temperature > 0."""

    domain: DomainSettings = Field(
        description="the domain (its held-out set: domain.heldout_per_level)")
    max_new_tokens: int = Field(description="evaluate.max_new_tokens: longest held-out answer")
    samples: int = Field(description="evaluate.samples: answers per held-out item")
    temperature: float = Field(description="evaluate.temperature: 0 = greedy")
    correct_threshold: float = Field(
        description="evaluate.correct_threshold: the reward at or above which an answer is correct")
    backend: BackendSettings = Field(description="the backend the answers are sampled on")
    benchmarks: dict[str, str] = Field(
        description="evaluate.benchmarks: benchmark name -> its JSONL file")
    benchmark_digests: dict[str, str] = Field(
        description="benchmark name -> sha256 of its file's bytes, so editing a benchmark "
                    "file re-evaluates (tasks/benchmarks.py)")

    @classmethod
    def from_config(cls, config: RunConfig) -> EvaluateSettings:
        benchmarks = config.evaluate.benchmarks
        return cls(domain=DomainSettings.from_config(config),
                   max_new_tokens=config.evaluate.max_new_tokens,
                   samples=config.evaluate.samples, temperature=config.evaluate.temperature,
                   correct_threshold=config.evaluate.correct_threshold,
                   backend=BackendSettings.from_config(config), benchmarks=benchmarks,
                   benchmark_digests={name: benchmark_digest(name, path)
                                      for name, path in benchmarks.items()})


def benchmark_digest(name: str, path: str) -> str:
    """The sha256 of a benchmark file's bytes: it enters the evaluate stage's fingerprint, so
    an edited benchmark is answered again rather than its old figures reused."""
    from storage.fingerprint import file_checksum

    try:
        return file_checksum(path)
    except OSError as exc:
        msg = (f"evaluate.benchmarks.{name} = {path!r}: cannot read it ({exc.strerror}); "
               "check the path (relative paths are from the working directory)")
        raise FileNotFoundError(msg) from None


class PromoteSettings(StageSettings):
    """The promote stage: the rule that replaces the incumbent, and the alarms that may block it."""

    promote: PromoteConfig = Field(description="[promote]")
    alarms: AlarmsConfig = Field(description="[alarms]")

    @classmethod
    def from_config(cls, config: RunConfig) -> PromoteSettings:
        return cls(promote=config.promote, alarms=config.alarms)


def stage_settings(config: RunConfig, stage: str, round_index: int, *,
                   dtype: str | None = None) -> StageSettings:
    """The settings of `stage` in `round_index` (round 0 is the warm-up), built from `config`.

    Parameters
    ----------
    config
        The run's config.
    stage
        base, synthesize, rollout, verify, rationalize, curate, train, evaluate (or baseline),
        promote; under `[proposer] separate` also proposer-base and train-proposer.
    round_index
        The round; round 0's synthesize, rollout, verify, curate and train have settings models
        of their own (rollout and curate: one per `[warmup] mode`).
    dtype
        The train stage's resolved training dtype (models.runtime.resolve_precision); the
        train stage only.

    Returns
    -------
    StageSettings
        The stage's frozen settings object.
    """
    warmup = round_index == 0
    self_samples = warmup and config.warmup.mode == "self_samples"
    if stage in TRAIN_STAGES:  # one settings model, two checkpoints (tasks/train.py)
        if dtype is None:
            msg = "the train stage's settings need its resolved training dtype (dtype=...)"
            raise ValueError(msg)
        return (WarmupTrainSettings if warmup else TrainSettings).from_config(config, dtype=dtype)
    if stage == "proposer-base":
        return BaseModelSettings.from_model(config.proposer.model)
    builders: dict[str, type[StageSettings]] = {
        "base": BaseModelSettings,
        "synthesize": SeedSynthesizeSettings if warmup else SynthesizeSettings,
        "rollout": (SelfSampleRolloutSettings if self_samples else
                    WarmupRolloutSettings if warmup else RolloutSettings),
        "verify": WarmupVerifySettings if warmup else VerifySettings,
        "curate": (SelfSampleCurateSettings if self_samples else
                   WarmupCurateSettings if warmup else CurateSettings),
        "rationalize": RationalizeSettings,
        "evaluate": EvaluateSettings, "baseline": EvaluateSettings, "promote": PromoteSettings}
    if stage not in builders:
        msg = (f"no stage {stage!r}: one of "
               f"{', '.join([*builders, 'train', 'train-proposer', 'proposer-base'])}")
        raise ValueError(msg)
    return builders[stage].from_config(config)
