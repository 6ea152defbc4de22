"""Paired tests of the promotion gate (`[promote] test`): is the candidate better than the
incumbent on the same held-out items, beyond what item-level noise explains?

Pure functions over two equally long lists of booleans (item i passes for the candidate, item i
passes for the incumbent); tasks/promote.py matches the items by `item_id` first. Both tests ask
whether the accuracy difference d = mean(candidate) - mean(incumbent) exceeds a `bound`:

    H0: d <= bound    H1: d > bound    (one-sided; bound 0 = "a gain", -margin = "not worse than
                                        incumbent - margin", +min_gain = "a gain of min_gain")

and return the difference, a two-sided 1 - 2 * alpha interval (90% at alpha 0.05: its lower end
is the one-sided 1 - alpha bound, so `low > bound` agrees with `p <= alpha` up to resampling
noise) and the one-sided p-value:

    PairedTest(difference=0.035, low=0.010, high=0.060, p_value=0.004, items=200,
               method="paired bootstrap", bound=0.0, alpha=0.05)

`paired_bootstrap` resamples items with replacement, from a fixed seed so the same evals always
give the same decision. An item's difference is +1, 0 or -1, so a resample's sum is the number
of +1 items drawn minus the number of -1 items drawn, and those counts are multinomial: drawing
them is the same resampling as drawing item indices, in O(samples) instead of O(samples * items).
The interval is the percentile interval; p = (1 + resampled differences <= bound) / (1 + samples),
the usual add-one estimate that never reports p = 0 from finitely many resamples. With several
samples per item (`[evaluate] samples`) an item's outcome is its pass fraction, its difference
any multiple of 1/samples in [-1, 1]: the bootstrap then draws item indices directly.

`mcnemar` is the exact McNemar test: given the n discordant items, the number the candidate
alone passes is Binomial(n, 1/2) under "no difference" (math.comb, no SciPy). It tests bound 0
only. Its interval is Newcombe's square-and-add interval of a paired difference (Newcombe 1998,
method 10: the Wilson intervals of both accuracies combined with the pairs' phi correlation, its
numerator corrected as in Altman et al., "Statistics with confidence"); unlike the Wald interval
it does not collapse to a point when no item is discordant. It reproduces the R package
contingencytables' Newcombe_square_and_add_CI_paired_2x2 (Fagerland et al., chapter 8).
It needs pass/fail items: with pass fractions (several samples per item) it is a ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

BOOTSTRAP_SEED = 0  # fixed: the same evals and config give the same decision on every resume
_EPS = 1e-9  # differences are ratios of counts


@dataclass(frozen=True)
class PairedTest:
    """A paired test's answer: the difference, its interval, the one-sided p-value."""

    difference: float
    low: float
    high: float
    p_value: float
    items: int
    method: str
    bound: float
    alpha: float

    @property
    def passed(self) -> bool:
        """H0 (difference <= bound) rejected at alpha."""
        return self.p_value <= self.alpha

    def describe(self) -> str:
        """One line, e.g. "+0.035 [+0.010, +0.060], p = 0.004 <= 0.050 (paired bootstrap,
        200 items, 90% interval)"; a bound other than 0 is named: "... p = 0.001 <= 0.050 for a
        gain > -0.020 (...)"."""
        level = round(100 * (1 - 2 * self.alpha), 1)
        against = f" for a gain > {self.bound:+.3f}" if abs(self.bound) > _EPS else ""
        return (f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}], "
                f"p = {_p(self.p_value)} {'<=' if self.passed else '>'} {self.alpha:.3f}"
                f"{against} ({self.method}, {self.items} items, {level:g}% interval)")


def _p(p_value: float) -> str:
    return f"{p_value:.3f}" if p_value >= 0.001 else f"{p_value:.1e}"


def _pairs(candidate: Sequence[bool], incumbent: Sequence[bool]) -> tuple[int, int, int, int]:
    """(both pass, candidate only, incumbent only, both fail)."""
    if len(candidate) != len(incumbent):
        msg = (f"paired test: {len(candidate)} candidate and {len(incumbent)} incumbent results; "
               "pass the same items for both, in the same order")
        raise ValueError(msg)
    if not candidate:
        msg = "paired test: no items (both checkpoints need eval rows for the same item ids)"
        raise ValueError(msg)
    both = gains = losses = 0
    for c, i in zip(candidate, incumbent, strict=True):
        both += bool(c) and bool(i)
        gains += bool(c) and not i
        losses += bool(i) and not c
    return both, gains, losses, len(candidate) - both - gains - losses


def paired_bootstrap(candidate: Sequence[float], incumbent: Sequence[float], *,
                     bound: float = 0.0,
                     alpha: float = 0.05, samples: int = 10_000,
                     seed: int = BOOTSTRAP_SEED) -> PairedTest:
    """Paired bootstrap of the accuracy difference (module docstring).

    Parameters
    ----------
    candidate, incumbent
        Per item: passed (a bool), or with several samples per item its pass fraction. Item
        i of both lists is the same held-out item.
    bound
        H0 is difference <= bound: 0 asks for a gain, -margin for non-inferiority.
    alpha
        One-sided level; the interval is two-sided 1 - 2 * alpha.
    samples
        Bootstrap resamples.
    seed
        The resampling seed.

    Returns
    -------
    The difference, percentile interval and p = (1 + resamples <= bound) / (1 + samples).
    """
    _, gains, losses, _ = _pairs(candidate, incumbent)  # checks the lists too
    if _fractional(candidate, incumbent):
        return _item_bootstrap(candidate, incumbent, bound=bound, alpha=alpha, samples=samples,
                               seed=seed)
    n = len(candidate)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [gains / n, losses / n, 1 - (gains + losses) / n], size=samples)
    differences = (counts[:, 0] - counts[:, 1]) / n
    low, high = np.quantile(differences, [alpha, 1 - alpha])
    p_value = (1 + int(np.count_nonzero(differences <= bound + _EPS))) / (1 + samples)
    return PairedTest((gains - losses) / n, float(low), float(high), p_value, n,
                      "paired bootstrap", bound, alpha)


def _fractional(candidate: Sequence[float], incumbent: Sequence[float]) -> bool:
    """Whether some item's outcome is a pass fraction strictly between 0 and 1."""
    return any(0 < value < 1 for value in (*candidate, *incumbent))


def _item_bootstrap(candidate: Sequence[float], incumbent: Sequence[float], *, bound: float,
                    alpha: float, samples: int, seed: int) -> PairedTest:
    """`paired_bootstrap` of pass fractions: resample item indices, average the differences."""
    differences = np.asarray(candidate, dtype=float) - np.asarray(incumbent, dtype=float)
    n = len(differences)
    rng = np.random.default_rng(seed)
    means = differences[rng.integers(0, n, size=(samples, n))].mean(axis=1)
    low, high = np.quantile(means, [alpha, 1 - alpha])
    p_value = (1 + int(np.count_nonzero(means <= bound + _EPS))) / (1 + samples)
    return PairedTest(float(differences.mean()), float(low), float(high), p_value, n,
                      "paired bootstrap", bound, alpha)


def mcnemar_p_value(gains: int, losses: int) -> float:
    """One-sided exact McNemar p: P(X >= gains), X ~ Binomial(gains + losses, 1/2); 1.0 when no
    item is discordant. `gains`: items only the candidate passes; `losses`: only the incumbent."""
    n = gains + losses
    return sum(math.comb(n, k) for k in range(gains, n + 1)) / 2**n


def _wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def newcombe_interval(both: int, gains: int, losses: int, neither: int,
                      z: float) -> tuple[float, float]:
    """Newcombe's method-10 interval of p(candidate) - p(incumbent) from the paired 2x2 counts."""
    n = both + gains + losses + neither
    p1, p2 = (both + gains) / n, (both + losses) / n
    l1, u1 = _wilson(both + gains, n, z)
    l2, u2 = _wilson(both + losses, n, z)
    margins = (both + gains) * (losses + neither) * (both + losses) * (gains + neither)
    cross = both * neither - gains * losses  # phi with Newcombe's correction: 0 for 0..n/2
    corrected = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = corrected / math.sqrt(margins) if margins else 0.0
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    difference = p1 - p2
    return max(-1.0, difference - below), min(1.0, difference + above)


def mcnemar(candidate: Sequence[bool], incumbent: Sequence[bool], *,
            alpha: float = 0.05) -> PairedTest:
    """Exact one-sided McNemar test of "the candidate is better" (bound 0), with Newcombe's
    1 - 2 * alpha interval (module docstring). Pass/fail items only: pass fractions of several
    samples per item are a ValueError (use `paired_bootstrap`)."""
    if _fractional(candidate, incumbent):
        msg = ("mcnemar: items with pass fractions between 0 and 1 (evaluate.samples > 1); "
               "McNemar's test needs pass/fail items: set [promote] test = 'paired_bootstrap'")
        raise ValueError(msg)
    both, gains, losses, neither = _pairs(candidate, incumbent)
    n = len(candidate)
    low, high = newcombe_interval(both, gains, losses, neither, NormalDist().inv_cdf(1 - alpha))
    return PairedTest((gains - losses) / n, low, high, mcnemar_p_value(gains, losses), n,
                      "McNemar exact", 0.0, alpha)
