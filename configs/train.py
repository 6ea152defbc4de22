"""`[train]` and its sub-tables: `[train.warmup]`, `[train.grpo]`, `[train.dpo]`,
`[train.proposer]`, `[train.lora]`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from configs.base import Section


class WarmupConfig(Section):
    """`[train.warmup]`: the SFT settings of round 0, the warm-up on the seed references or, with
    `[warmup] mode = "self_samples"`, on the model's own verified answers to them (the rounds
    after it use `train.learning_rate`, `epochs` and `max_steps`; `mode = "none"` trains no
    warm-up)."""

    learning_rate: float = Field(3e-3, gt=0, le=1, description="learning rate of the warm-up")
    epochs: float = Field(40.0, gt=0, le=1000, description="passes over the round-0 seed rows")
    max_steps: int = Field(1000, ge=1, le=10_000_000, description="step cap of the warm-up")


class GrpoConfig(Section):
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


class DpoConfig(Section):
    """`[train.dpo]`: the DPO trainer (models/dpo.py) of `train.algorithm = "dpo"`."""

    learning_rate: float = Field(3e-4, gt=0, le=1, description="learning rate")
    beta: float = Field(
        0.1, gt=0, le=10,
        description="preference temperature (larger = stay closer to the incumbent)")
    max_pairs_per_problem: int = Field(
        4, ge=1, le=1024, description="chosen/rejected pairs built per kept problem (curate)")
    min_margin: float = Field(
        1.0, gt=0, le=1,
        description="least reward gap of a pair, best against worst of a problem's answers "
                    "(1 = verified vs wrong; lower for graded rewards: a judge's 1-10 scale)")


class ProposerTrainConfig(Section):
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


class LoraConfig(Section):
    """`[train.lora]`: train a LoRA adapter (peft) on the incumbent in every pass instead of all
    weights; the checkpoint is still the full model (adapter merged in), the adapter is kept in
    its `adapter/` folder (models/lora.py). Part of the train fingerprint."""

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


class TrainConfig(Section):
    """How the train stage fine-tunes the incumbent. Round 0 (the warm-up, `[warmup] mode`)
    always trains SFT with `[train.warmup]`, whatever `algorithm` says: on the seed references by
    default, since an untrained model samples no right answers (GRPO would see no reward and DPO
    no chosen answer), or on the model's own verified answers (`self_samples`)."""

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
                    "float16 needs cuda. The fingerprint covers the resolved dtype")
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
        description="where the run's figures also go (the catalog keeps them either way): "
                    "none; tensorboard, mlflow or wandb (offline): one tracker run per "
                    "flywheel run under runs/<run_id>/tracking/, steps counted across rounds, "
                    "curve, held-out accuracy and funnel written at each round's end "
                    "(tasks/tracking.py). Not part of the fingerprint")
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
