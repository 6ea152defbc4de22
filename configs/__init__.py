"""Run configuration: one pydantic model per concern, composed into `RunConfig`.

The defaults of every model *are* the built-in tiny CPU run; `configs/tiny-cpu.toml` spells
them out (a test keeps the two equal). Unknown keys and out-of-range values are errors that
name the key, the bad value and the allowed range:

    config error in configs/x.toml: train.learning_rate = -0.1: Input should be greater than 0

Algorithm settings are nested in sections of their own (TOML sub-tables): `[train.warmup]`,
`[train.grpo]`, `[train.dpo]`, `[train.proposer]`, `[train.lora]`, `[synthesize.bandit]`,
`[curate.diversity]`; a dotted override reaches them too
(`load_config(path, {"train.grpo.beta": 0.1})`). Every
stage reads only its own slice (`config.rollout`, `config.curate`, ...); that slice is what goes
into the stage's fingerprint, so changing it reruns that stage and everything after. A stage
leaves out only what it does not read in its mode (the warm-up reads no `[train.grpo]` and
none of the round-only `[synthesize]` settings) and the settings marked "not part of the
fingerprint" (they never change a result).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# A run id names a folder under <data-root>/runs/ and a Prefect deployment: letters, digits,
# '.', '_' and '-', at most 100, not starting with a punctuation mark.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class ConfigError(ValueError):
    """A config file or override is unusable; the message is one line meant for the user."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Section):
    """The model that plays both roles. `path` = None builds the tiny character-level model."""

    path: str | None = Field(None, description="local Hugging Face checkpoint folder; None = tiny")
    hidden_size: int = Field(128, ge=32, le=4096, description="tiny model: residual stream width")
    num_layers: int = Field(4, ge=1, le=64, description="tiny model: transformer blocks")
    head_dim: int = Field(32, ge=8, le=256, description="tiny model: width of one attention head")
    intermediate_size: int = Field(512, ge=32, le=16384, description="tiny model: width of the MLP")
    init_seed: int = Field(0, ge=0, description="tiny model: seed of the initial weights")


FREE_FORM_DOMAINS = ("reasoning_gym", "dataset")  # answers checked by [verify]'s extractors
ANSWER_EXTRACTORS = ("boxed", "hashes", "answer_is", "regex", "last_number", "last_line",
                     "whole")


class ReasoningGymConfig(_Section):
    """`[domain.reasoning_gym]`: the reasoning-gym tasks of `domain.name = "reasoning_gym"`
    (domains/reasoning_gym.py); level L is the task curriculum's global level L - 1."""

    tasks: dict[str, float] = Field(
        {"basic_arithmetic": 1.0},
        description="reasoning-gym dataset names (reasoning_gym.factory.DATASETS, each with a "
                    "curriculum) and their weights in the generator's draws; each >= 0, not all 0")
    item_seconds: float = Field(
        30.0, gt=0, le=86_400,
        description="most seconds a task's generator may take for one item (a held-out or "
                    "generator problem) before the run stops with an error naming the task; not "
                    "part of the fingerprint (it never changes a problem)")

    @field_validator("tasks")
    @classmethod
    def _tasks_weighted(cls, value: dict[str, float]) -> dict[str, float]:
        if not value or any(w < 0 for w in value.values()) or not any(value.values()):
            msg = (f"tasks = {value}: name at least one reasoning-gym task with a weight > 0, "
                   "e.g. {basic_arithmetic = 1.0, spell_backward = 1.0}")
            raise ValueError(msg)
        return value


class DatasetConfig(_Section):
    """`[domain.dataset]`: the user's question/answer files of `domain.name = "dataset"`
    (domains/dataset.py); checked when the run starts, before anything runs."""

    paths: list[str] = Field(
        [], description="JSONL (.jsonl) or Parquet (.parquet) files of questions and answers")
    heldout_path: str | None = Field(
        None, description="a file of held-out questions (same columns); None = split the rows")
    heldout_fraction: float = Field(
        0.1, gt=0, lt=1,
        description="share of the rows held out (by a fixed-seed draw) when no heldout_path and "
                    "no split column is given")
    heldout_seed: int = Field(0, ge=0, description="seed of the held-out draw")
    question_column: str = Field("question", min_length=1, description="column of the questions")
    answer_column: str = Field("answer", min_length=1, description="column of the answers")
    level_column: str = Field(
        "level", min_length=1,
        description="optional column of integer difficulty levels 1..5 (absent: every row is "
                    "level 1; `difficulty` is read when `level` is absent)")
    id_column: str = Field(
        "id", min_length=1, description="optional column of unique row ids (checked for repeats)")
    split_column: str = Field(
        "split", min_length=1,
        description="optional column naming each row's split; rows of heldout_split are held out")
    heldout_split: str = Field(
        "test", min_length=1, description="the split column's value of held-out rows")


class DomainConfig(_Section):
    """The problem domain (domains/): its levels, its seed generator and its held-out set."""

    name: Literal["arithmetic", "python_io", "reasoning_gym", "dataset"] = Field(
        "arithmetic", description="the domain (domains/)")
    min_level: int = Field(2, ge=1, le=5, description="easiest difficulty level proposed")
    max_level: int = Field(4, ge=1, le=5, description="hardest difficulty level proposed")
    seed_problems: int = Field(8000, ge=1, le=1_000_000, description="round-0 generator problems")
    seed_max_level: int = Field(
        2, ge=1, le=5, description="hardest level the warm-up trains the solver on")
    heldout_per_level: int = Field(
        40, ge=1, le=10_000, description="held-out problems per level (evaluate)")
    modes: dict[Literal["deduction", "abduction", "induction"], float] = Field(
        {"deduction": 1.0, "abduction": 0.0, "induction": 0.0},
        description="python_io: the task modes' weights in the generator's problems (seed, "
                    "top-up; the held-out set covers the modes weighted > 0): deduction = "
                    "predict the output, abduction = give an input that yields the output, "
                    "induction = write the function from input/output pairs; each >= 0, not all "
                    "0")

    @field_validator("modes")
    @classmethod
    def _modes_weighted(cls, value: dict[str, float]) -> dict[str, float]:
        missing = {"deduction", "abduction", "induction"} - set(value)
        if missing or any(w < 0 for w in value.values()) or not any(value.values()):
            msg = (f"modes = {value}: give deduction, abduction and induction each a weight "
                   ">= 0, not all 0")
            raise ValueError(msg)
        return value

    reasoning_gym: ReasoningGymConfig = Field(
        ReasoningGymConfig(), description="reasoning_gym: the tasks and their weights")
    dataset: DatasetConfig = Field(DatasetConfig(), description="dataset: the files and columns")

    @model_validator(mode="after")
    def _levels_ordered(self) -> DomainConfig:
        if self.min_level > self.max_level:
            msg = f"min_level = {self.min_level} must be <= max_level = {self.max_level}"
            raise ValueError(msg)
        return self

    def fingerprint(self) -> dict[str, Any]:
        """The section as fingerprinted: the keys of one domain only (python_io's `modes`,
        `[domain.reasoning_gym]`, `[domain.dataset]`) enter in that domain alone, so a run of
        another domain keeps its fingerprints whatever they are set to; the generator's time
        limit (`reasoning_gym.item_seconds`) never does."""
        owner = {"modes": "python_io", "reasoning_gym": "reasoning_gym", "dataset": "dataset"}
        dumped = self.model_dump(mode="json", exclude={"reasoning_gym": {"item_seconds"}})
        return {key: value for key, value in dumped.items()
                if owner.get(key, self.name) == self.name}


class BanditConfig(_Section):
    """`[synthesize.bandit]`: the bandit of `synthesize.level_scheduler = "bandit"`
    (tasks/curriculum/bandit.py): over the proposer's levels, or (`arms = "task_level"`) over
    the (task, level) pairs the generator draws for a reasoning_gym task mix."""

    alpha: float = Field(0.5, gt=0, le=1, description="TD(0) step size, in (0, 1]")
    temperature: float = Field(
        0.1, gt=0, le=100, description="softmax temperature over Q (Q is in [0, 0.5])")
    initial_q: float = Field(
        0.25, ge=0, le=1, description="Q of a level before any round measured it")
    arms: Literal["level", "task_level"] = Field(
        "level",
        description="what the bandit chooses: level = the level each proposer prompt asks for "
                    "(default); task_level = the (task, level) pair of each generator problem "
                    "of a round (domain reasoning_gym, synthesize.source = 'generator')")

    def fingerprint(self) -> dict[str, Any]:
        """The section as fingerprinted: `arms` only off its default `level`, so the level
        bandit's runs keep their fingerprints."""
        return self.model_dump(mode="json", exclude={"arms"} if self.arms == "level" else None)


class SynthesizeConfig(_Section):
    """Where a round's problems come from and which are admitted (tasks/synthesize.py)."""

    proposals: int = Field(4096, ge=1, le=10_000_000, description="proposer samples per round")
    temperature: float = Field(1.2, gt=0, le=5, description="proposer sampling temperature")
    max_new_tokens: int = Field(
        16, ge=1, le=4096, description="longest proposer completion, tokens")
    source: Literal["proposer", "generator", "pool"] = Field(
        "proposer",
        description="where rounds >= 1 get problems: proposer = the model writes them "
                    "(default); generator = `proposals` fresh domain-generator problems per round, "
                    "levels min_level..max_level in equal shares (the uniform curriculum); pool = "
                    "the same generator problems every round, not deduplicated against earlier "
                    "rounds (a fixed prompt set, TTRL style)",
    )
    min_novel_share: float = Field(
        0.5, ge=0, le=1,
        description="proposer: while fewer novel problems than this share of `proposals` were "
                    "admitted, top the round up (see top_up); 0 = one batch as it comes. A "
                    "proposer trained on its kept problems repeats them: this keeps the offer up",
    )
    max_batches: int = Field(
        4, ge=1, le=1000,
        description="proposer: most batches of `proposals` per round (top_up = generator: most "
                    "generator draws of `proposals` for the fill)")
    top_up: Literal["proposer", "generator"] = Field(
        "generator",
        description="how the offer reaches min_novel_share: generator (default) = one proposer "
                    "batch, the shortfall filled with fresh domain-generator problems, levels "
                    "min_level..max_level in equal shares (source 'generator'): a proposer that "
                    "repeats itself hands the rest of the round to the uniform curriculum; "
                    "proposer = more proposer batches (at most max_batches)",
    )
    near_duplicate_threshold: float = Field(
        1.0, gt=0, le=1,
        description="drop a proposal as `near_duplicate` when the MinHash-estimated Jaccard "
                    "similarity of its character n-grams to an earlier problem (this run) is >= "
                    "this, in (0, 1]; 1.0 = off (exact duplicates only). Arithmetic texts are "
                    "short: 37+5 vs 37+6 is 0.33 at ngram 3, so keep it high there",
    )
    ngram: int = Field(
        3, ge=1, le=64, description="character n-gram size of the near-duplicate check")
    level_scheduler: Literal["cycle", "bandit"] = Field(
        "cycle",
        description="levels the proposer is asked for in rounds >= 1: cycle = "
                    "min_level..max_level in turn (default); bandit = drawn from softmax(Q / "
                    "bandit.temperature), Q per level learned from earlier rounds' mean "
                    "|advantage| (SEC style)",
    )
    bandit: BanditConfig = Field(BanditConfig(), description="the level bandit's settings")

    @model_validator(mode="after")
    def _task_level_arms_draw_generator_problems(self) -> SynthesizeConfig:
        if self.bandit.arms == "task_level" and (self.level_scheduler != "bandit"
                                                 or self.source != "generator"):
            msg = (f"bandit.arms = 'task_level' chooses the generator's (task, level) pairs: it "
                   f"needs level_scheduler = 'bandit' and source = 'generator' (they are "
                   f"{self.level_scheduler!r} and {self.source!r}); set them or arms = 'level'")
            raise ValueError(msg)
        return self


class RolloutConfig(_Section):
    """How the solver samples answers (tasks/rollout.py); evaluate uses the same backend."""

    backend: Literal["transformers", "vllm"] = Field(
        "transformers", description="transformers (CPU default) or vllm (the `vllm` extra)")
    samples_per_problem: int = Field(
        16, ge=1, le=1024, description="k: answers sampled per problem")
    temperature: float = Field(0.8, gt=0, le=5, description="solver sampling temperature")
    max_new_tokens: int = Field(8, ge=1, le=32_768, description="longest solver answer, tokens")
    batch_size: int = Field(
        512, ge=1, le=100_000,
        description="sequences per generate call (transformers) or per engine step (vllm "
                    "max_num_seqs)",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="rollout and evaluation weights; bfloat16 on GPUs"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="vllm: GPUs one engine shards over")
    gpu_memory_utilization: float = Field(
        0.5, gt=0, le=0.95,
        description="vllm on GPU: share of each GPU the engine keeps (the rest is for training)",
    )
    cpu_kv_cache_gib: float = Field(1.0, gt=0, le=1024, description="vllm on CPU: KV cache size")
    enforce_eager: bool = Field(
        True, description="vllm: no torch.compile / CUDA graphs (fast start; false for GPU speed)"
    )

    @model_validator(mode="after")
    def _vllm_only_settings(self) -> RolloutConfig:
        if self.backend != "vllm" and self.tensor_parallel_size != 1:
            msg = (f"tensor_parallel_size = {self.tensor_parallel_size} needs backend = 'vllm' "
                   f"(backend is {self.backend!r}); set it to 1 or switch the backend")
            raise ValueError(msg)
        return self


class DiversityConfig(_Section):
    """`[curate.diversity]`: the proposer's repetition penalty (R-Zero style,
    tasks/curriculum/rewards.py); it applies to curate's proposer rows and to the online reward
    of the proposer's GRPO pass."""

    penalty: float = Field(
        0.0, ge=0, le=1000,
        description="lambda of the proposer's repetition penalty: weight = max(0, reward - lambda "
                    "* cluster size / valid proposals of the round); 0 = off",
    )
    threshold: float = Field(
        0.8, gt=0, le=1,
        description="estimated Jaccard of character n-grams at which two proposals fall in one "
                    "cluster, in (0, 1]",
    )
    ngram: int = Field(3, ge=1, le=64, description="character n-gram size of the clustering")
    on: Literal["text", "shape"] = Field(
        "text",
        description="compare the problems' texts, or their shapes (the domain's form with "
                    "constants masked: for arithmetic every digit as 0, so many `000-00` "
                    "problems are repeats of one form)",
    )


class CurateConfig(_Section):
    """Which problems a round keeps and which training rows it builds (tasks/curate.py)."""

    min_pass_rate: float = Field(0.0, ge=0, le=1, description="keep problems with p > this")
    max_pass_rate: float = Field(1.0, ge=0, le=1, description="keep problems with p < this")
    max_answers_per_problem: int = Field(
        4, ge=1, le=1024, description="verified answers trained per problem")
    proposer_rows: bool = Field(
        True, description="proposer rows in rounds >= 1 (weighted by proposer_reward)")
    warmup_proposer_rows: bool = Field(
        True, description="proposer rows of the warm-up (round 0: the format of every level); "
                          "separate from proposer_rows so runs with and without a proposer can "
                          "share the same warm-up")
    max_proposer_rows: int = Field(256, ge=0, le=10_000_000, description="most learnable first")
    solver_targets: Literal["verified", "reference", "rationalize"] = Field(
        "rationalize",
        description="solver rows of rounds >= 1: verified = the model's own verified answers to "
                    "kept problems; rationalize = the same, and too-hard problems (p <= "
                    "min_pass_rate) are kept and trained on their reference (STaR's "
                    "rationalization; default; SFT with reference labels only; GRPO, DPO and "
                    "majority-vote runs set verified); reference = every problem kept, trained "
                    "on its executed reference (SFT on generator data, the no-self-play baseline)",
    )
    rationalize_ratio: float = Field(
        1.0, ge=0, le=1000,
        description="rationalize: most reference rows per verified answer row of the round; the "
                    "too-hard problems of the lowest levels (nearest the frontier) go first",
    )
    proposer_reward: Literal["variance", "learnability", "uncertainty", "band", "regret"] = Field(
        "learnability",
        description="weight of a kept problem's proposer row (tasks/curriculum/rewards.py): "
                    "learnability = 1-p if 0<p<1 (Absolute Zero; default); variance = 4p(1-p); "
                    "uncertainty = 1-2|p-0.5| (R-Zero); band = 1 if proposer_band_low <= p <= "
                    "proposer_band_high; regret = max - min sample reward (eva)",
    )
    proposer_band_low: float = Field(0.3, ge=0, le=1, description="band reward: lowest p rewarded")
    proposer_band_high: float = Field(
        0.8, ge=0, le=1, description="band reward: highest p rewarded")
    diversity: DiversityConfig = Field(
        DiversityConfig(), description="the proposer's repetition penalty")

    @model_validator(mode="after")
    def _band_ordered(self) -> CurateConfig:
        if self.min_pass_rate >= self.max_pass_rate:
            msg = (f"min_pass_rate = {self.min_pass_rate} must be < max_pass_rate = "
                   f"{self.max_pass_rate}")
            raise ValueError(msg)
        if self.proposer_band_low > self.proposer_band_high:
            msg = (f"proposer_band_low = {self.proposer_band_low} must be <= proposer_band_high = "
                   f"{self.proposer_band_high}")
            raise ValueError(msg)
        return self


class WarmupConfig(_Section):
    """`[train.warmup]`: the SFT settings of round 0, the warm-up on the seed references (the
    rounds after it use `train.learning_rate`, `epochs` and `max_steps`)."""

    learning_rate: float = Field(3e-3, gt=0, le=1, description="learning rate of the warm-up")
    epochs: float = Field(40.0, gt=0, le=1000, description="passes over the round-0 seed rows")
    max_steps: int = Field(1000, ge=1, le=10_000_000, description="step cap of the warm-up")


class GrpoConfig(_Section):
    """`[train.grpo]`: the GRPO trainer (models/grpo.py), for the solver's pass under
    `train.algorithm = "grpo"` and for the proposer's under `train.proposer.algorithm = "grpo"`
    (which samples up to `synthesize.max_new_tokens` instead of `max_completion_length`)."""

    learning_rate: float = Field(
        3e-4, gt=0, le=1,
        description="learning rate (policy gradients want a smaller one than SFT)")
    num_generations: int = Field(
        8, ge=2, le=1024,
        description="completions sampled per prompt (the group); must divide train.batch_size, "
                    "which counts completions per optimizer step")
    temperature: float = Field(1.0, gt=0, le=5, description="sampling temperature of the group")
    max_completion_length: int = Field(
        8, ge=1, le=32_768, description="longest sampled solver completion, tokens")
    beta: float = Field(
        0.0, ge=0, le=10,
        description="KL coefficient against the incumbent (0 = no reference model)")


class DpoConfig(_Section):
    """`[train.dpo]`: the DPO trainer (models/dpo.py) of `train.algorithm = "dpo"`."""

    learning_rate: float = Field(3e-4, gt=0, le=1, description="learning rate")
    beta: float = Field(
        0.1, gt=0, le=10,
        description="preference temperature (larger = stay closer to the incumbent)")
    max_pairs_per_problem: int = Field(
        4, ge=1, le=1024, description="chosen/rejected pairs built per kept problem (curate)")


class ProposerTrainConfig(_Section):
    """`[train.proposer]`: how rounds >= 1 train the proposer rows."""

    algorithm: Literal["sft", "grpo"] = Field(
        "sft",
        description="sft (weighted by curate.proposer_reward) or grpo (Absolute Zero / R-Zero: "
                    "every proposed problem is answered `samples` times by the incumbent solver; "
                    "reward = curate.proposer_reward of that pass rate; trainer settings from "
                    "[train.grpo])",
    )
    max_steps: int = Field(
        50, ge=1, le=10_000_000, description="grpo: step cap of the proposer's GRPO pass")
    samples: int = Field(
        8, ge=1, le=1024,
        description="grpo: solver answers per proposed problem (the online pass rate)")


class LoraConfig(_Section):
    """`[train.lora]`: train a LoRA adapter (peft) on the incumbent in every pass instead of all
    weights; the checkpoint is still the full model (adapter merged in), the adapter is kept in
    its `adapter/` folder (models/lora.py). Part of the train fingerprint when enabled."""

    enabled: bool = Field(False, description="true = LoRA (needs peft); false = full fine-tuning")
    rank: int = Field(16, ge=1, le=4096, description="r: rank of the low-rank update")
    alpha: float = Field(
        32.0, gt=0, le=65_536, description="lora_alpha: the update is scaled by alpha / rank")
    dropout: float = Field(0.05, ge=0, lt=1, description="dropout on the adapter's input")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="modules that get an adapter: 'all-linear' (every linear layer but the output "
                    "head) or a list of module names, e.g. ['q_proj', 'v_proj']")

    @field_validator("target_modules")
    @classmethod
    def _modules_named(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, list) and not all(value)):
            msg = (f"target_modules = {value!r}: name at least one module, or 'all-linear'")
            raise ValueError(msg)
        return value


class TrainConfig(_Section):
    """How the train stage fine-tunes the incumbent. Round 0 (the warm-up) always trains SFT on
    the seed references with `[train.warmup]`, whatever `algorithm` says: an untrained model
    samples no right answers, so GRPO would see no reward and DPO no chosen answer."""

    algorithm: Literal["sft", "grpo", "dpo"] = Field(
        "sft",
        description="rounds >= 1: sft (verified answers, STaR / ReST-EM), grpo (TRL GRPOTrainer, "
                    "the domain verifier as reward), dpo (TRL DPOTrainer on verified chosen / "
                    "wrong rejected pairs)",
    )
    learning_rate: float = Field(2e-3, gt=0, le=1, description="SFT learning rate of rounds >= 1")
    batch_size: int = Field(
        64, ge=1, le=65_536, description="rows per optimizer step (GRPO: completions)")
    epochs: float = Field(20.0, gt=0, le=1000, description="passes over a round's training rows")
    max_steps: int = Field(800, ge=1, le=10_000_000, description="step cap of a round's training")
    max_length: int = Field(48, ge=8, le=131_072, description="longest training sequence, tokens")
    replay_ratio: float = Field(
        2.0, ge=0, le=100,
        description="replayed rows from earlier rounds per new row (0 = train on this round only)",
    )
    replay_proposer_rows: bool = Field(
        False,
        description="replay earlier rounds' proposer rows too; false = solver rows only, so the "
                    "warm-up's seed problems stop pulling the proposer back to the generator's mix",
    )
    save_steps: int = Field(
        200, ge=0, le=10_000_000,
        description="save a resumable trainer checkpoint every N steps (0 = never); a killed "
                    "training resumes from the last one. Not part of the fingerprint",
    )
    oom_retry_batch_size: int | None = Field(
        None, ge=1, le=65_536,
        description="on out-of-memory, retry once with this per-step batch and gradient "
                    "accumulation up to batch_size (None = no retry). Not part of the fingerprint",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where training runs: auto = cuda when torch sees a GPU, else cpu. Not part of "
                    "the fingerprint (the resolved dtype is)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="training and checkpoint precision: auto = bfloat16 on cuda, float32 on cpu; "
                    "float16 needs cuda. The fingerprint covers the resolved dtype unless float32")
    gradient_checkpointing: bool = Field(
        False,
        description="recompute activations in the backward pass: less memory, about 30% slower. "
                    "Not part of the fingerprint")
    num_processes: int = Field(
        1, ge=1, le=1024,
        description="training processes, one per GPU (> 1: `accelerate launch`, gloo on cpu); "
                    "batch_size is split over them. Not part of the fingerprint")
    report_to: Literal["none", "tensorboard", "mlflow", "wandb"] = Field(
        "none",
        description="where the trainers also report their logged steps (the train stage keeps "
                    "the curve in the catalog either way): none, tensorboard (event files in the "
                    "stage's work folder), mlflow or wandb (their own settings, e.g. "
                    "MLFLOW_TRACKING_URI). Not part of the fingerprint")
    warmup: WarmupConfig = Field(WarmupConfig(), description="round 0's SFT settings")
    grpo: GrpoConfig = Field(GrpoConfig(), description="the GRPO trainer's settings")
    dpo: DpoConfig = Field(DpoConfig(), description="the DPO trainer's settings")
    proposer: ProposerTrainConfig = Field(
        ProposerTrainConfig(), description="how rounds >= 1 train the proposer rows")
    lora: LoraConfig = Field(LoraConfig(), description="LoRA instead of full fine-tuning")

    @model_validator(mode="after")
    def _batches_fit(self) -> TrainConfig:
        small = self.oom_retry_batch_size
        if small is not None and (small >= self.batch_size or self.batch_size % small):
            msg = (f"oom_retry_batch_size = {small} must be smaller than batch_size = "
                   f"{self.batch_size} and divide it")
            raise ValueError(msg)
        group = self.grpo.num_generations
        if "grpo" in (self.algorithm, self.proposer.algorithm) and self.batch_size % group:
            msg = (f"train.batch_size = {self.batch_size} must be a multiple of "
                   f"train.grpo.num_generations = {group} (grpo: a batch holds whole groups)")
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _processes_fit(self) -> TrainConfig:
        n = self.num_processes
        if self.dtype == "float16" and self.device == "cpu":
            msg = "train.dtype = 'float16' needs train.device = 'cuda'; use 'bfloat16' on the cpu"
            raise ValueError(msg)
        for key, batch in (("batch_size", self.batch_size),
                           ("oom_retry_batch_size", self.oom_retry_batch_size)):
            if n > 1 and batch is not None and batch % n:
                msg = (f"train.{key} = {batch} must be a multiple of train.num_processes = {n} "
                       "(each process takes an equal share)")
                raise ValueError(msg)
        if n > 1 and self.proposer.algorithm == "grpo":
            msg = (f"train.num_processes = {n} cannot run the proposer's GRPO pass (its reward "
                   "samples the incumbent in the training process); set train.num_processes = 1 "
                   "or train.proposer.algorithm = 'sft'")
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _proposer_grpo_keeps_the_format(self) -> TrainConfig:
        if (self.proposer.algorithm == "grpo" and self.algorithm == "sft"
                and not self.replay_proposer_rows):
            msg = ("train.proposer.algorithm = 'grpo' with an SFT solver needs "
                   "train.replay_proposer_rows = true: the replayed proposer rows keep the problem "
                   "format in the solver's SFT pass (without them the model forgets how to write a "
                   "problem)")
            raise ValueError(msg)
        return self


class EvaluateConfig(_Section):
    """The held-out evaluation of every checkpoint (tasks/evaluate.py; greedy answers)."""

    max_new_tokens: int = Field(8, ge=1, le=32_768, description="longest held-out answer, tokens")


class VerifyConfig(_Section):
    """Which label a rollout's reward compares against (tasks/verify.py)."""

    labels: Literal["reference", "majority"] = Field(
        "reference",
        description="reference: the domain's executed reference answer; majority: the most "
                    "common answer among the problem's k samples (TTRL / R-Zero pseudo-labels; "
                    "label precision against references is recorded where they exist)",
    )
    extract: list[Literal[ANSWER_EXTRACTORS]] = Field(
        ["boxed", "hashes", "answer_is", "last_number"],
        description="reasoning_gym, dataset: how the final answer is found in a completion, "
                    "tried in order (domains/answers.py): boxed = last \\boxed{}, hashes = "
                    "after `####`, answer_is = after 'the answer is', regex = answer_regex, "
                    "last_number, last_line, whole = the stripped completion (the tiny model)",
        min_length=1,
    )
    answer_regex: str | None = Field(
        None, description="the `regex` extractor's pattern (group 1 = the answer)")
    compare: Literal["auto", "exact", "math", "task"] = Field(
        "auto",
        description="reasoning_gym, dataset: exact (normalised text), math (math-verify "
                    "equivalence: 1/2 = 0.5 = \\frac{1}{2}), task (reasoning-gym's own scorer, "
                    "partial credit); auto = task for reasoning_gym, math for dataset")
    math_timeout_seconds: int = Field(
        5, ge=1, le=600, description="time limit of one math-verify parse or comparison")

    @model_validator(mode="after")
    def _regex_usable(self) -> VerifyConfig:
        import re

        if "regex" in self.extract and not self.answer_regex:
            msg = "extract names 'regex' but answer_regex is unset: set answer_regex = '...'"
            raise ValueError(msg)
        if self.answer_regex:
            try:
                re.compile(self.answer_regex)
            except re.error as exc:
                msg = f"answer_regex = {self.answer_regex!r} is not a valid regex: {exc}"
                raise ValueError(msg) from None
        return self


class PromoteConfig(_Section):
    """When the candidate replaces the incumbent (tasks/promote.py)."""

    margin: float = Field(0.0, ge=0, le=1, description="allowed drop in held-out accuracy, 0..1")
    min_gain: float = Field(
        0.0, ge=0, le=1,
        description="held-out accuracy the candidate must gain over the incumbent, 0..1 "
                    "(0 = promote on a tie); set margin or min_gain, not both",
    )
    max_level_regression: float | None = Field(
        None, ge=0, le=1,
        description="reject when, at any difficulty level, more than this share (0..1) of the "
                    "level's held-out items flip from pass (incumbent) to fail (candidate); "
                    "unset = no per-level check",
    )

    @model_validator(mode="after")
    def _margin_or_gain(self) -> PromoteConfig:
        if self.margin > 0 and self.min_gain > 0:
            msg = (f"margin = {self.margin} and min_gain = {self.min_gain}: set one of them "
                   "(margin allows a drop, min_gain requires a gain)")
            raise ValueError(msg)
        return self


class GatesConfig(_Section):
    """Thresholds of the data-quality gates (validators/) run on every stage output.

    Not part of any stage fingerprint: after a gate failed, fix a threshold here and run
    `flywheel resume RUN_ID --config F`; the stored output is checked again, not recomputed.
    Pass-rate and answer checks skip round 0 (the warm-up's untrained model fails by design).
    """

    enabled: bool = Field(True, description="false = write stage outputs unchecked")
    min_rows: int = Field(1, ge=0, le=1_000_000_000, description="fewest rows of any stage output")
    max_problem_chars: int = Field(1024, ge=1, le=10_000_000, description="longest problem text")
    max_prompt_chars: int = Field(8192, ge=1, le=10_000_000, description="longest prompt")
    max_completion_chars: int = Field(65_536, ge=1, le=10_000_000, description="longest completion")
    min_distinct_proposal_share: float = Field(
        0.05, ge=0, le=1, description="distinct texts / proposer samples (proposals)")
    min_distinct_problem_share: float = Field(
        0.9, ge=0, le=1, description="distinct texts / problems (problems)")
    min_answer_spread: float = Field(
        0.02, ge=0, le=1,
        description="mean over problems of (distinct answers - 1) / (samples - 1): 0 when every "
                    "problem's answers agree (verdicts, rounds >= 1)")
    min_kept_fraction: float = Field(0.01, ge=0, le=1, description="kept / problems (curriculum)")
    max_kept_fraction: float = Field(1.0, ge=0, le=1, description="kept / problems (curriculum)")
    min_mean_pass_rate: float = Field(
        0.0, ge=0, le=1,
        description="mean reward and mean pass rate must be above this (rounds >= 1)")
    max_mean_pass_rate: float = Field(
        1.0, ge=0, le=1,
        description="mean reward and mean pass rate must be below this (rounds >= 1)")
    max_length_drift: float = Field(
        0.5, ge=0, le=1000,
        description="allowed relative change of the mean problem length from the previous round")
    max_level_drift: float = Field(
        1.5, ge=0, le=1000,
        description="allowed change of the mean problem level from the previous round")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> GatesConfig:
        for low, high in (("min_kept_fraction", "max_kept_fraction"),
                          ("min_mean_pass_rate", "max_mean_pass_rate")):
            if getattr(self, low) >= getattr(self, high):
                msg = f"{low} = {getattr(self, low)} must be < {high} = {getattr(self, high)}"
                raise ValueError(msg)
        return self


class ScheduleConfig(_Section):
    """The nightly deployment (schedules/): one more round of `run_id` per cron tick.

    Not part of any stage fingerprint. `cron` is a five-field cron string, read in `timezone`.
    """

    cron: str = Field("0 2 * * *", description="five-field cron string: when a round starts")
    timezone: str = Field("UTC", description="IANA time zone the cron string is read in")
    run_id: str = Field("nightly", pattern=RUN_ID_PATTERN,
                        description="the run each scheduled round continues")

    @field_validator("cron")
    @classmethod
    def _cron_parses(cls, value: str) -> str:
        from configs.cron import check_cron

        return check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _timezone_known(cls, value: str) -> str:
        from configs.cron import check_timezone

        return check_timezone(value)


class SandboxConfig(_Section):
    """`[sandbox]`: how model-written programs run (domains/sandbox/, docs/sandbox.md); read by
    the python_io domain only. The limits are per program and part of the synthesize and verify
    fingerprints of python_io runs (they decide which programs are admitted); `workers` and
    `isolation` are not (they never change a result)."""

    workers: int = Field(
        2, ge=1, le=256, description="pre-started sandbox workers (fork servers); one per core")
    cpu_seconds: float = Field(
        1.0, gt=0, le=60, description="CPU time of one program (user + system), seconds")
    wall_seconds: float = Field(
        2.0, gt=0, le=120, description="wall-clock time of one program, seconds")
    memory_mb: int = Field(
        256, ge=16, le=65_536, description="address space one program may add, MiB")
    max_file_bytes: int = Field(
        65_536, ge=0, le=1 << 30,
        description="largest file a program may write in its temporary folder, bytes")
    max_output_bytes: int = Field(
        4096, ge=64, le=1 << 20,
        description="most characters a program may print, and may return in all")
    tmpfs_mb: int = Field(
        16, ge=1, le=4096, description="size of the worker's private tmpfs (all program folders)")
    isolation: Literal["strict", "warn"] = Field(
        "strict",
        description="strict: refuse to run programs when an isolation mechanism (namespaces, "
                    "seccomp, uid drop) is missing; warn: run with a loud warning instead")

    @model_validator(mode="after")
    def _wall_covers_cpu(self) -> SandboxConfig:
        if self.wall_seconds < self.cpu_seconds:
            msg = (f"wall_seconds = {self.wall_seconds} must be >= cpu_seconds = "
                   f"{self.cpu_seconds} (a program cannot use more CPU than wall time)")
            raise ValueError(msg)
        return self

    def fingerprint(self) -> dict[str, Any]:
        """The limits, as a stage fingerprint covers them (not workers or isolation)."""
        return self.model_dump(mode="json", exclude={"workers", "isolation"})


class PromptConfig(_Section):
    """`[prompt]`: how prompts reach a pretrained chat model (domains/chat.py). With a
    `model.path` whose tokenizer has a chat template, every prompt is the template's rendering
    of a system message and a user message; the built-in tiny model (no template) keeps the
    domains' raw prompts. Part of the fingerprints of the stages that write prompts (synthesize,
    rollout, evaluate) only where a key differs from its default."""

    chat_template: Literal["auto", "never"] = Field(
        "auto",
        description="auto: render prompts with the model's chat template when its tokenizer has "
                    "one; never: the domains' raw prompts for every model")
    system: str = Field("", description="the system message of both roles; empty = none")
    instruction: str = Field(
        "", description="appended to the solver's question in its user message, e.g. the answer "
                        "format: 'Put your final answer in \\boxed{}.'")
    proposer_instruction: str = Field(
        "Write one new problem of difficulty level {level}. Reply with the problem only.",
        description="the proposer's user message; {level} is replaced by the requested level")
    stop: list[str] = Field(
        [], description="completions are cut before the first of these strings (solver, "
                        "proposer, held-out answers); their token counts stay as generated")
    answer_format: str = Field(
        "{answer}",
        description="how a reference is written where the solver trains on it (the warm-up, "
                    "too-hard problems) with the chat template in use, so it learns the format "
                    "`instruction` asks for, e.g. '\\boxed{{{answer}}}'; {answer} is the "
                    "reference")

    @field_validator("proposer_instruction")
    @classmethod
    def _level_placeholder_only(cls, value: str) -> str:
        return _one_placeholder("proposer_instruction", value, "level")

    @field_validator("answer_format")
    @classmethod
    def _answer_placeholder_only(cls, value: str) -> str:
        return _one_placeholder("answer_format", value, "answer")


def _one_placeholder(key: str, value: str, name: str) -> str:
    """`value` when `{name}` is its only format placeholder; else a ValueError naming `key`."""
    try:
        value.format(**{name: "1"})
    except (KeyError, IndexError, ValueError) as exc:
        msg = (f"{key} = {value!r}: only the placeholder {{{name}}} is allowed ({exc!r}); "
               f"write other braces as {{{{ and }}}}")
        raise ValueError(msg) from None
    return value


class ScaleConfig(_Section):
    """Where rollout and verification run (tasks/shards.py, flows/runners.py).

    Not part of any stage fingerprint: the shards of a stage produce exactly the rows the
    unsharded stage would (seeds follow each prompt's position in the stage, shards start on a
    rollout batch boundary), so changing the runner or the shard count never reruns anything.
    `task_runner = "ray"` needs the `ray` extra and a Prefect server (PREFECT_API_URL).
    """

    task_runner: Literal["default", "ray"] = Field(
        "default",
        description="default: Prefect's runner, shards one after another in this process; ray: "
                    "shards at once, each a Prefect task on a Ray worker (prefect-ray)")
    ray_address: str | None = Field(
        None,
        description="an existing Ray cluster (e.g. 'ray://head:10001' or 'auto'); None = start a "
                    "local Ray instance on 127.0.0.1 for the run and stop it after")
    ray_num_cpus: int = Field(
        2, ge=1, le=4096, description="CPUs of the local Ray instance (ray_address = None only)")
    rollout_shards: int = Field(
        1, ge=1, le=4096,
        description="most shards rollout and verification split a round's problems into (1 = "
                    "one piece, in-process on the default runner); shards start on "
                    "rollout.batch_size boundaries, so small stages get fewer")


class RunConfig(_Section):
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

    def slice(self, *names: str) -> dict[str, Any]:
        """The config sections a stage reads, as plain data for its fingerprint: a section's
        own `fingerprint()` where it has one (`[domain]`); `[verify]`'s answer checking only in
        the free-form domains that use it."""
        out = {name: (section.fingerprint() if isinstance(section, DomainConfig)
                      else section.model_dump(mode="json"))
               for name in names for section in [getattr(self, name)]}
        if "verify" in out and self.domain.name not in FREE_FORM_DOMAINS:
            out["verify"] = {"labels": out["verify"]["labels"]}
        return out

    def heldout_slice(self) -> dict[str, Any]:
        """What decides a held-out score beyond the domain's name, for the evaluate fingerprint:
        the `[domain]` section and the answer checking of `[verify]` in the free-form domains
        (reasoning_gym, dataset); empty for the others, which own their parser."""
        if self.domain.name not in FREE_FORM_DOMAINS:
            return {}
        checking = self.verify.model_dump(mode="json", exclude={"labels"})
        return {**self.slice("domain"), "answer_checking": checking}

    def prompt_slice(self) -> dict[str, Any]:
        """The `[prompt]` keys that differ from their defaults, for the fingerprints of the
        stages that write prompts or cut completions (synthesize, rollout, evaluate); empty when
        every key is at its default, so runs without a chat model keep their fingerprints."""
        changed = self.prompt.model_dump(mode="json", exclude_defaults=True)
        return {"prompt": changed} if changed else {}

    def executor_slice(self) -> dict[str, Any]:
        """The sandbox limits, for the fingerprints of the stages that run programs (synthesize,
        verify) in a domain that runs them (python_io); empty for the others."""
        return {"sandbox": self.sandbox.fingerprint()} if self.domain.name == "python_io" else {}


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
