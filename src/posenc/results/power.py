"""Power of the benchmark's tests: the smallest difference a Welch test over seeds detects, and how
many seeds a difference needs (what a column of a table can tell apart: :mod:`posenc.results.stats`)."""

from __future__ import annotations

import functools
import math

import numpy as np

from posenc.results.intervals import ALPHA, scipy_stats

#: The power a column's minimum detectable difference is computed for.
POWER = 0.8
#: The difference the summary asks "how many seeds would detect it?" for: 10 points for rates,
#: 0.05 for the LM's bits/byte and perplexity ratios.
TARGET = {"rate": 0.10, "lm": 0.05}
#: Replicates of the Monte-Carlo power of the Welch test at few seeds (fixed generator).
POWER_DRAWS = 20000


@functools.lru_cache(maxsize=64)
def _welch_draws(seeds: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seeds)
    return rng.standard_normal((POWER_DRAWS, seeds)), rng.standard_normal((POWER_DRAWS, seeds))


def power(diff: float, seed_sd: float, seeds: int, *, alpha: float = ALPHA) -> float:
    """Power of the two-sided Welch t test over seeds (``seeds`` per side, seed means with
    standard deviation ``seed_sd`` on both sides) to detect ``diff``. Up to 10 seeds by Monte Carlo
    on ``scipy.stats.ttest_ind(equal_var=False)`` (fixed draws: Welch's df swings with so few
    seeds, and the noncentral t of Student's test would promise too much: 80% power at 3.07 seed
    SDs with 3 seeds, where Welch's test has 70%); past 10 seeds the noncentral t (``scipy.stats.nct``,
    2 seeds - 2 df), which Welch's test then matches."""
    sp = scipy_stats()
    if seeds < 2 or not seed_sd > 0:
        return math.nan
    shift = abs(diff) / seed_sd
    if seeds <= 10:
        a, b = _welch_draws(seeds)
        p = sp.ttest_ind(a, b + shift, axis=1, equal_var=False).pvalue
        return float(np.mean(p < alpha))
    df = 2 * seeds - 2
    nc = shift / math.sqrt(2 / seeds)
    crit = sp.t.ppf(1 - alpha / 2, df)
    return float(sp.nct.sf(crit, df, nc) + np.nan_to_num(sp.nct.cdf(-crit, df, nc)))


@functools.lru_cache(maxsize=256)
def _detectable_unit(seeds: int, power_level: float, alpha: float) -> float:
    """:func:`detectable` for a seed SD of 1 (it scales with the SD), by bisection."""
    lo, hi = 0.0, 1.0
    while power(hi, 1.0, seeds, alpha=alpha) < power_level:
        lo, hi = hi, 2 * hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid, 1.0, seeds, alpha=alpha) < power_level else (lo, mid)
    return hi


def detectable(seed_sd: float, seeds: int, *, power_level: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest difference :func:`power` detects with ``power_level`` at ``seeds`` per side
    (NaN without a spread or with fewer than 2 seeds)."""
    if seeds < 2 or not seed_sd > 0 or not math.isfinite(seed_sd):
        return math.nan
    return seed_sd * _detectable_unit(seeds, power_level, alpha)


def seeds_needed(
    diff: float, seed_sd: float, *, power_level: float = POWER, alpha: float = ALPHA, most: int = 1000
) -> int | None:
    """The fewest seeds per side at which :func:`power` reaches ``power_level`` for ``diff`` (None
    if more than ``most``; 2 if the spread is 0)."""
    if not seed_sd > 0:
        return 2

    def enough(seeds: int) -> bool:  # the detectable difference falls as seeds grow
        return detectable(seed_sd, seeds, power_level=power_level, alpha=alpha) <= abs(diff)

    if not enough(most):
        return None
    lo, hi = 1, most  # not enough at lo (or lo < 2), enough at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid >= 2 and enough(mid) else (mid, hi)
    return hi
