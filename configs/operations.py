"""How a run is watched and operated: `[alarms]` (signs of a loop that fools itself), `[gates]`
(the data-quality suites), `[schedule]` (the nightly deployment), `[scale]` (where rollout and
verification run). The stages' own sections are configs/stages.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from configs.base import RUN_ID_RULE, Section, is_run_id

ALARMS = ("reward_without_accuracy", "novelty_collapse", "heldout_leak", "label_accuracy_drop")


class AlarmsConfig(Section):
    """`[alarms]`: signs of a loop that fools itself (tasks/alarms.py). Each is measured every
    round and recorded as a promote metric; one named in `block` that fires keeps the round's
    candidate from being promoted, and the decision line says which and why."""

    block: list[Literal[ALARMS]] = Field(
        [],
        description="the alarms that block promotion when they fire: reward_without_accuracy, "
                    "novelty_collapse, heldout_leak, label_accuracy_drop; [] = none (default: "
                    "measured and recorded only)")
    window: int = Field(
        1, ge=1, le=100,
        description="rounds the trends span: round r is compared with round r - window (rounds "
                    ">= 1; reward_without_accuracy, label_accuracy_drop)")
    min_reward_rise: float = Field(
        0.05, ge=0, le=1,
        description="reward_without_accuracy fires when the training reward (verify's "
                    "mean_reward) rose by at least this over the window ...")
    max_accuracy_rise: float = Field(
        0.0, ge=-1, le=1,
        description="... while the candidate's held-out accuracy rose by at most this (0 = flat "
                    "or falling)")
    min_proposer_novelty: float = Field(
        0.1, ge=0, le=1,
        description="novelty_collapse fires when fewer than this share of the round's valid "
                    "proposer samples were admitted as new problems (not repeats of this or "
                    "earlier rounds, not held-out)")
    max_heldout_overlap: float = Field(
        0.8, gt=0, le=1,
        description="heldout_leak fires when a held-out question has at least this share of its "
                    "character n-grams in the round's training rows (a question shorter than the "
                    "n-gram: the whole question as a whole training text), in (0, 1]")
    max_label_accuracy_drop: float = Field(
        0.05, ge=0, le=1,
        description="label_accuracy_drop fires when the majority labels' accuracy against the "
                    "references (verify's label_precision) fell by at least this over the window")


class GatesConfig(Section):
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
    max_verifier_failure_share: float = Field(
        0.05, ge=0, le=1,
        description="most verdicts the verifier itself failed on (method verifier_timeout or "
                    "verifier_error: an infrastructure failure, never a 0) over all verdicts of "
                    "a round (verdicts, every round)")
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


class ScheduleConfig(Section):
    """The nightly deployment (schedules/): one more round of `run_id` per cron tick.

    Not part of any stage fingerprint. `cron` is a five-field cron string, read in `timezone`.
    """

    cron: str = Field("0 2 * * *", description="five-field cron string: when a round starts")
    timezone: str = Field("UTC", description="IANA time zone the cron string is read in")
    run_id: str = Field("nightly", description="the run each scheduled round continues")

    @field_validator("run_id")
    @classmethod
    def _run_id_rule(cls, value: str) -> str:
        if not is_run_id(value):  # storage/paths.py: the one rule
            raise ValueError(f"not a run id; {RUN_ID_RULE}")
        return value

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


class ScaleConfig(Section):
    """Where rollout and verification run (tasks/shards.py, flows/runners.py).

    Not part of any stage fingerprint: the shards of a stage produce exactly the rows the
    unsharded stage would (seeds follow each prompt's position in the stage, shards start on a
    rollout batch boundary), so changing the runner or the shard count never reruns anything.
    `task_runner = "ray"` needs the `ray` extra and a Prefect server (PREFECT_API_URL). With
    `rollout.backend = "vllm"` on Ray, rollout's shards go to `vllm_engines` warm engine actors
    (models/vllm_actors.py) instead of Ray tasks; vLLM seeds each request, so the rows are the
    same.
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
    vllm_engines: int = Field(
        1, ge=1, le=4096,
        description="rollout.backend = 'vllm' on Ray: vLLM engine actors, kept warm for the run "
                    "(each takes rollout.tensor_parallel_size GPUs, or 1 CPU without GPUs); "
                    "rollout's shards go to whichever is free")
