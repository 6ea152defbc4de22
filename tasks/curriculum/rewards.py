"""Proposer rewards: how much a problem the proposer wrote is worth training the proposer on.

Each is a pure function of the problem's pass rate p over the solver's k samples (and, for
`regret`, of the k rewards themselves); curate uses the chosen one as the weight of the
problem's proposer row (rows are ranked by it, `max_proposer_rows` kept, weight 0 not trained).

    p                0.0   0.25   0.5   0.75   1.0
    variance         0     0.75   1     0.75   0      4 p (1 - p)
    learnability     0     0.75   0.5   0.25   0      1 - p if 0 < p < 1    (Absolute Zero; default)
    uncertainty      0     0.5    1     0.5    0      1 - 2 |p - 1/2|       (R-Zero)
    band 0.3..0.8    0     0      1     1      0      1 if lo <= p <= hi    (R-Zero's filter)
    regret           0     1      1     1      0      max r - min r         (eva; binary r)

Diversity penalty (R-Zero's repetition penalty): within a round, the proposer's valid samples
are clustered by near-duplicate similarity (tasks.curriculum.dedup.clusters) of their texts
or of their shapes (`curate.diversity.on`: Domain.shape masks constants); a problem in a
cluster of size c out of a batch of B samples gets penalty c / B and weight
max(0, reward - lambda c / B).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from configs import CurateConfig

ProposerReward = Literal["variance", "learnability", "uncertainty", "band", "regret"]
PROPOSER_REWARDS: tuple[str, ...] = ("variance", "learnability", "uncertainty", "band", "regret")


def variance_reward(pass_rate: float) -> float:
    """4 p (1 - p): the variance of a Bernoulli(p) reward, scaled to 1 at p = 1/2.

    Not from one paper: it is the GRPO signal a problem carries (a group
    whose rewards all agree has zero advantage), symmetric in easy and hard.
    """
    return 4.0 * pass_rate * (1.0 - pass_rate)


def learnability_reward(pass_rate: float) -> float:
    """Absolute Zero's proposer reward: 1 - p when 0 < p < 1, else 0.

    Follows the paper's form exactly (r_propose = 1 - mean solve rate, 0 for a task always or
    never solved). Departure: p is the pass rate of the same k rollouts curate already has, not
    a separate set of solver Monte-Carlo rollouts.
    """
    return 1.0 - pass_rate if 0.0 < pass_rate < 1.0 else 0.0


def uncertainty_reward(pass_rate: float) -> float:
    """R-Zero's challenger uncertainty reward: 1 - 2 |p - 1/2|, maximal at p = 1/2.

    R-Zero's p is the share of solver samples agreeing with the majority-vote pseudo-label; here
    p is the pass rate against the reference when the domain has one (majority agreement when
    the verifier votes), so the reward peaks where the solver is right half the time.
    """
    return 1.0 - 2.0 * abs(pass_rate - 0.5)


def band_reward(pass_rate: float, low: float, high: float) -> float:
    """1 when low <= p <= high, else 0: R-Zero's filter (its code keeps questions whose solver
    agreement lies within 0.3-0.8) used as a reward, so only in-band problems train the proposer."""
    return 1.0 if low <= pass_rate <= high else 0.0


def regret_reward(rewards: Sequence[float]) -> float:
    """eva's regret: best minus worst reward among the solver's samples of the prompt (0 when
    nothing was judged). eva scores prompts with a reward model's continuous scores; with binary
    verifier rewards it is 1 exactly when 0 < p < 1, so it ranks no in-band problem above another.
    """
    return max(rewards) - min(rewards) if rewards else 0.0


def proposer_reward(name: str, pass_rate: float, rewards: Sequence[float], *, band_low: float = 0.3,
                    band_high: float = 0.8) -> float:
    """The reward called `name` (one of PROPOSER_REWARDS) of one problem."""
    if name == "variance":
        return variance_reward(pass_rate)
    if name == "learnability":
        return learnability_reward(pass_rate)
    if name == "uncertainty":
        return uncertainty_reward(pass_rate)
    if name == "band":
        return band_reward(pass_rate, band_low, band_high)
    if name == "regret":
        return regret_reward(rewards)
    msg = f"proposer reward {name!r} is unknown; choose one of {', '.join(PROPOSER_REWARDS)}"
    raise ValueError(msg)


def diversity_penalties(cluster_labels: Sequence[int]) -> list[float]:
    """Per sample: the size of its near-duplicate cluster / the batch size (R-Zero's |C_k| / B).

    >>> diversity_penalties([0, 0, 2, 0])
    [0.75, 0.75, 0.25, 0.75]
    """
    sizes = Counter(cluster_labels)
    return [sizes[label] / len(cluster_labels) for label in cluster_labels]


def penalized(reward: float, penalty: float, strength: float) -> float:
    """max(0, reward - strength * penalty). R-Zero subtracts the penalty from the uncertainty
    reward inside GRPO's advantage; flywheel's proposer rows are weighted SFT rows, so the result
    is clipped at 0 (a negative weight would mean unlearning the problem)."""
    return max(0.0, reward - strength * penalty)


def proposer_weight(pass_rate: float, rewards: Sequence[float], curation: CurateConfig, *,
                    penalty: float = 0.0) -> float:
    """`curate.proposer_reward` of one problem less `curate.diversity.penalty` x `penalty`: the
    weight of its proposer row (curate) or its online GRPO reward (tasks/curriculum/online.py)."""
    value = proposer_reward(curation.proposer_reward, pass_rate, rewards,
                            band_low=curation.proposer_band_low,
                            band_high=curation.proposer_band_high)
    return penalized(value, penalty, curation.diversity.penalty)


def proposer_weight_expr(curation: CurateConfig) -> Any:
    """`proposer_weight` as a polars expression over the columns `pass_rate` (null read as 0),
    `reward_max`, `reward_min` (the judged rewards' extremes, null when none) and `penalty`;
    the same floating-point operations in the same order, so the values are identical."""
    import polars as pl

    p = pl.col("pass_rate").fill_null(0.0)
    name = curation.proposer_reward
    if name == "variance":
        value = 4.0 * p * (1.0 - p)
    elif name == "learnability":
        value = pl.when((p > 0.0) & (p < 1.0)).then(1.0 - p).otherwise(0.0)
    elif name == "uncertainty":
        value = 1.0 - 2.0 * (p - 0.5).abs()
    elif name == "band":
        value = (pl.when((p >= curation.proposer_band_low) & (p <= curation.proposer_band_high))
                 .then(1.0).otherwise(0.0))
    elif name == "regret":
        value = (pl.col("reward_max") - pl.col("reward_min")).fill_null(0.0)
    else:
        msg = f"proposer reward {name!r} is unknown; choose one of {', '.join(PROPOSER_REWARDS)}"
        raise ValueError(msg)
    weight = value - curation.diversity.penalty * pl.col("penalty")
    return pl.when(weight > 0.0).then(weight).otherwise(0.0)
