"""The stages' sections: `[warmup]`, `[synthesize]` (with its bandit), `[rollout]`, `[curate]`
(with `[curate.diversity]`), `[evaluate]`, `[promote]`. How runs are watched and operated
(`[alarms]`, `[gates]`, `[schedule]`, `[scale]`) is configs/operations.py."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from configs.base import Section

WARMUP_MODES = ("references", "self_samples", "none")


class WarmupModeConfig(Section):
    """`[warmup]`: what round 0 does before the self-improvement rounds (flows/run.py); the SFT
    settings of its training are `[train.warmup]`.

    No key here is in a stage's settings: `self_samples` gives round 0's rollout and curate
    settings models of their own (configs/settings.py), so the default's fingerprints are those
    of a config without this section."""

    mode: Literal[WARMUP_MODES] = Field(
        "references",
        description="references = round 0 trains SFT on the seed problems' references (default: "
                    "an untrained model answers nothing right, and learns the answer format); "
                    "self_samples = on the model's own verified answers to the seed problems, "
                    "reasoning and all (rejection sampling: rollout.samples_per_problem samples "
                    "per problem, at most curate.max_answers_per_problem kept), for a pretrained "
                    "model a bare reference would teach to stop reasoning; none = no warm-up: "
                    "round 0 records the base model as the incumbent, round 1 starts from it")

    @property
    def first_round(self) -> int:
        """The first round that runs stages: 1 without a warm-up (`none`), else 0."""
        return 1 if self.mode == "none" else 0


class BanditConfig(Section):
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


class SynthesizeConfig(Section):
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
    level_scheduler: Literal["cycle", "bandit", "fixed"] = Field(
        "cycle",
        description="levels the proposer is asked for in rounds >= 1: cycle = "
                    "min_level..max_level in turn (default); bandit = drawn from softmax(Q / "
                    "bandit.temperature), Q per level learned from earlier rounds' mean "
                    "|advantage| (SEC style); fixed = a timetable: round r asks for level "
                    "min_level + r - 1 only, capped at max_level (the generator of source = "
                    "'generator' or 'pool' draws that level only too)",
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


class RolloutConfig(Section):
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


class DiversityConfig(Section):
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


class CurateConfig(Section):
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
    rationalize_with: Literal["reference", "hint"] = Field(
        "reference",
        description="rationalize: what a too-hard problem trains on: reference = its reference "
                    "as the completion (default); hint = STaR's rationalization: the model is "
                    "asked again with the answer as a hint (hint_template, the rationalize "
                    "stage), and the answers that reach the reference are trained on the "
                    "question without the hint; a problem no hinted answer reaches trains "
                    "nothing",
    )
    hint_template: str = Field(
        "{question}\n\nHint: the answer is {answer}. Show the reasoning that reaches it.",
        description="rationalize_with = hint: the hinted question; {question} = the problem's "
                    "text, {answer} = what its reference teaches",
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

    @field_validator("hint_template")
    @classmethod
    def _hint_fields(cls, value: str) -> str:
        import string

        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        if fields != {"question", "answer"}:
            msg = (f"hint_template = {value!r} names {sorted(fields)}: it must name exactly "
                   "{question} and {answer} (write a literal brace as {{ or }})")
            raise ValueError(msg)
        return value

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


class EvaluateConfig(Section):
    """The held-out evaluation of every checkpoint (tasks/evaluate.py): one greedy answer per
    item by default; several sampled answers for pass@k and maj@k."""

    max_new_tokens: int = Field(8, ge=1, le=32_768, description="longest held-out answer, tokens")
    samples: int = Field(
        1, ge=1, le=1024,
        description="answers per held-out item, 1..1024; 1 = one answer (default); n > 1 "
                    "(needs temperature > 0): accuracy is pass@1, the mean over the n samples, "
                    "and evaluate also records unbiased pass@k (k = 1, 2, 4, ... and n) and "
                    "maj@n, each with a 95 % interval over items")
    temperature: float = Field(
        0.0, ge=0, le=5,
        description="0 = greedy answers, the same every run (default); > 0 = sampled at this "
                    "temperature, every checkpoint from the same seed")
    correct_threshold: float = Field(
        1.0, gt=0, le=1,
        description="the reward at or above which a held-out answer counts correct: 1.0 = only "
                    "a fully right answer (default; exact, math and program checks give 0 or 1); "
                    "below 1 for a graded verifier, e.g. 0.75 = a 1-10 judge's 8 and up, 0.5 = a "
                    "reward model's positive scores")
    benchmarks: dict[str, str] = Field(
        {},
        description="benchmark name -> JSONL file of {question, answer} rows (GSM8K- or "
                    "MATH-style), answered every round with the run's extraction, judging, "
                    "samples and temperature; recorded as benchmark/<name>/accuracy, pass_at_k; "
                    "{} = none (default)")

    @field_validator("benchmarks")
    @classmethod
    def _benchmark_names(cls, benchmarks: dict[str, str]) -> dict[str, str]:
        for name, path in benchmarks.items():
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
                msg = (f"benchmark name {name!r}: use 1-64 letters, digits, '_', '.' or '-' "
                       "(it names metrics benchmark/<name>/...), e.g. gsm8k")
                raise ValueError(msg)
            if not path.endswith((".jsonl", ".ndjson")):
                msg = (f"benchmarks.{name} = {path!r}: a benchmark is a JSONL file of "
                       '{"question": ..., "answer": ...} rows; name a .jsonl file')
                raise ValueError(msg)
        return benchmarks

    @model_validator(mode="after")
    def _samples_need_temperature(self) -> EvaluateConfig:
        if self.samples > 1 and self.temperature == 0:
            msg = (f"samples = {self.samples} with temperature = 0: greedy answers are the same "
                   "in every sample, so pass@k would only repeat pass@1; set temperature > 0 "
                   "(e.g. 0.8) or samples = 1")
            raise ValueError(msg)
        return self


class PromoteConfig(Section):
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
    test: Literal["none", "paired_bootstrap", "mcnemar"] = Field(
        "none",
        description="none = compare the two accuracies as measured (default); paired_bootstrap "
                    "or mcnemar = the candidate must beat incumbent - margin (+ min_gain) by a "
                    "one-sided paired test over the same held-out items at `alpha` "
                    "(tasks/promotion_tests.py); mcnemar tests a plain gain only",
    )
    alpha: float = Field(
        0.05, gt=0, le=0.5,
        description="one-sided significance level of `test`, (0, 0.5]; the decision line shows "
                    "a two-sided 1 - 2 * alpha interval")
    bootstrap_samples: int = Field(
        10_000, ge=100, le=1_000_000,
        description="resamples of test = 'paired_bootstrap' (a fixed seed: the same evals give "
                    "the same decision)")

    @model_validator(mode="after")
    def _margin_or_gain(self) -> PromoteConfig:
        if self.margin > 0 and self.min_gain > 0:
            msg = (f"margin = {self.margin} and min_gain = {self.min_gain}: set one of them "
                   "(margin allows a drop, min_gain requires a gain)")
            raise ValueError(msg)
        if self.test == "mcnemar" and (self.margin > 0 or self.min_gain > 0):
            msg = (f"test = 'mcnemar' with margin = {self.margin}, min_gain = {self.min_gain}: "
                   "the exact McNemar test only tests 'no difference'; use test = "
                   "'paired_bootstrap' for a margin or a required gain")
            raise ValueError(msg)
        if self.test == "paired_bootstrap" and self.alpha * self.bootstrap_samples < 10:
            msg = (f"alpha = {self.alpha} with bootstrap_samples = {self.bootstrap_samples}: too "
                   "few resamples to resolve p <= alpha; set bootstrap_samples >= "
                   f"{math.ceil(10 / self.alpha)}")
            raise ValueError(msg)
        return self
