"""How many seeds a question needs, and what a design can detect: power at the correction actually
applied, from a seed spread that is not biased low.

A profile declares a few *primary questions* (each encoding against the profile's reference at its
primary buckets, the papers' claims); the error rate is controlled over that family
(:func:`family_level`: Holm's method, whose first step tests each question at ``alpha / m``, or a
fixed sequence, each question at ``alpha`` once every question before it is decided). What a
design detects is stated at that level, not before it:

- **Paired by seed** (common random numbers: within a seed every encoding sees the same batches in
  the same order, the same test examples and the same initial shared weights): the test reads the
  per-seed differences, whose spread ``sd`` is what is left of the seed effects after the shared
  part cancels (``sqrt(sd_a^2 + sd_b^2 - 2 cov)``). Its power is the noncentral t's (exact for normal
  differences: ``seeds - 1`` degrees of freedom, noncentrality ``diff / sd * sqrt(seeds)``).
  With ``exact`` the test also needs the exact sign-flip p-value (:func:`signflip_floor`: it cannot
  fall below ``2 / 2^seeds``) at the level, so that it holds for any distribution of seed outcomes,
  all-or-nothing ones included; its power is then a Monte Carlo over fixed draws.
- **Independent seeds**: Welch's test over seeds (:func:`posenc.results.stats.power`).
- **The seed spread** a detectable difference is computed from: one SD estimated from few seeds is
  biased low (the median of three-seed SDs averages 0.85 of the truth), and a detectable difference
  computed from it is detected far less often than promised. :func:`pooled_spread` pools the squared
  deviations of every group (the column's rows, or the family's paired differences) over their degrees
  of freedom, and :func:`upper_sd` takes the upper :data:`SD_BOUND` confidence bound of that pooled SD
  (chi-square): across 2 to 40 degrees of freedom the difference it states is then detected 81-84% of
  the time on average at 80% nominal power (simulated in ``tests/unit/results/test_design.py``), where
  the pooled SD alone gives 58-79%.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.results.intervals import scipy_stats
from posenc.results.paired import permutation_floor, permutation_p, signflip_floor, signflip_p
from posenc.results.stats import ALPHA, POWER
from posenc.results.stats import power as welch_power

#: One-sided level of the upper confidence bound of the seed SD a detectable difference reads.
SD_BOUND = 0.7
#: Family corrections a profile may declare: Holm's step-down method (each question at ``alpha / m`` at
#: its first step), or a fixed sequence (each question at ``alpha``, reached only when every one before it
#: was decided).
METHODS = ("holm", "fixed-sequence")
#: Replicates of a Monte-Carlo power (fixed generator).
POWER_DRAWS = 4000
#: Past this many seeds the exact test's power is taken as the t test's, which overstates it by 1.5-2.5
#: points at 14-16 seeds and 0.6-5% (measured on fixed draws: the sign-flip test's p-values are discrete),
#: so a detectable difference by 3% at most; up to it, a Monte Carlo over every sign pattern. Independent
#: seeds: past :data:`EXACT_WELCH_SEEDS` per side, Welch's power (the permutation floor is then below 4e-5).
EXACT_POWER_SEEDS = 14
EXACT_WELCH_SEEDS = 8


def family_level(questions: int, *, method: str = "holm", alpha: float = ALPHA) -> float:
    """The level every question of a family of ``questions`` is sure to be tested at: Holm's
    ``alpha / questions`` (its first step; later steps test at more), or ``alpha`` in a fixed sequence."""
    if questions < 1:
        raise PosencError(f"questions must be at least 1, got {questions}")
    if method not in METHODS:
        raise PosencError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return alpha / questions if method == "holm" else alpha


def _noncentral_power(shift: float, seeds: int, alpha: float) -> float:
    """Power of the two-sided one-sample t test with ``seeds - 1`` df at noncentrality ``shift * sqrt(seeds)``."""
    sp = scipy_stats()
    df, nc = seeds - 1, shift * math.sqrt(seeds)
    crit = float(sp.t.ppf(1 - alpha / 2, df))
    upper = float(sp.nct.sf(crit, df, nc))
    if math.isnan(upper):  # scipy's noncentral t gives up far in the tail
        upper = 1.0 if nc > crit else 0.0
    return upper + float(np.nan_to_num(sp.nct.cdf(-crit, df, nc)))


@functools.lru_cache(maxsize=64)
def _paired_draws(seeds: int) -> np.ndarray:
    return np.random.default_rng(1000 + seeds).standard_normal((POWER_DRAWS, seeds))


def _exact_power(shift: float, seeds: int, alpha: float) -> float:
    """Power of the paired t test that also needs its sign-flip p at ``alpha`` (Monte Carlo)."""
    sp = scipy_stats()
    d = _paired_draws(seeds) + shift
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(seeds))
    by_t = 2 * sp.t.sf(np.abs(t), seeds - 1) <= alpha
    hits = np.zeros(len(d), dtype=bool)
    hits[by_t] = signflip_p(d[by_t]) <= alpha
    return float(hits.mean())


@functools.lru_cache(maxsize=64)
def _independent_draws(seeds: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2000 + seeds)
    return rng.standard_normal((POWER_DRAWS, seeds)), rng.standard_normal((POWER_DRAWS, seeds))


def _exact_welch_power(shift: float, seeds: int, alpha: float) -> float:
    """Power of Welch's test that also needs its permutation p at ``alpha`` (Monte Carlo)."""
    a, b = _independent_draws(seeds)
    by_welch = scipy_stats().ttest_ind(a + shift, b, axis=1, equal_var=False).pvalue <= alpha
    hits = np.zeros(len(a), dtype=bool)
    hits[by_welch] = permutation_p(a[by_welch] + shift, b[by_welch]) <= alpha
    return float(hits.mean())


def paired_power(diff: float, sd: float, seeds: int, *, alpha: float = ALPHA, exact: bool = False) -> float:
    """Power of the two-sided paired t test over ``seeds`` per-seed differences with standard
    deviation ``sd`` to detect a mean difference ``diff`` at ``alpha``; ``exact``: the test also needs
    its exact sign-flip p-value at ``alpha`` (0 power where :func:`signflip_floor` is above it; past
    :data:`EXACT_POWER_SEEDS` seeds, the t test's)."""
    if seeds < 2 or not sd > 0:
        return math.nan
    if exact and signflip_floor(seeds) > alpha:
        return 0.0
    shift = abs(diff) / sd
    if exact and seeds <= EXACT_POWER_SEEDS:
        return _exact_power(shift, seeds, alpha)
    return _noncentral_power(shift, seeds, alpha)


def power(
    diff: float, sd: float, seeds: int, *, alpha: float = ALPHA, paired: bool = True, exact: bool = False
) -> float:
    """Power of the design's test: :func:`paired_power` (``sd`` of the per-seed differences) or,
    with ``paired=False``, Welch's test over independent seeds (``sd`` of one encoding's seed means;
    ``exact``: its p-value also never below the permutation test's, :func:`~posenc.results.paired.permutation_p`)."""
    if paired:
        return paired_power(diff, sd, seeds, alpha=alpha, exact=exact)
    if exact and seeds >= 2 and sd > 0:
        if permutation_floor(seeds, seeds) > alpha:
            return 0.0
        if seeds <= EXACT_WELCH_SEEDS:
            return _exact_welch_power(abs(diff) / sd, seeds, alpha)
    return welch_power(diff, sd, seeds, alpha=alpha)


@functools.lru_cache(maxsize=512)
def _detectable_unit(seeds: int, alpha: float, paired: bool, exact: bool, level: float) -> float:
    """:func:`detectable` at an SD of 1, by bisection to 1e-4 of it (inf where no difference reaches
    ``level``). The exact test's starts from the t test's, which it can only exceed."""
    lo = _detectable_unit(seeds, alpha, paired, False, level) if exact else 0.0  # never below it
    hi = max(lo, 0.5) * 1.25
    while power(hi, 1.0, seeds, alpha=alpha, paired=paired, exact=exact) < level:
        lo, hi = hi, 1.5 * hi
        if hi > 1e4:
            return math.inf
    while hi - lo > 1e-4 * hi:
        mid = (lo + hi) / 2
        lo, hi = (
            (mid, hi)
            if power(mid, 1.0, seeds, alpha=alpha, paired=paired, exact=exact) < level
            else (lo, mid)
        )
    return hi


def detectable(
    sd: float,
    seeds: int,
    *,
    alpha: float = ALPHA,
    paired: bool = True,
    exact: bool = False,
    level: float = POWER,
) -> float:
    """The smallest difference the design's test (:func:`power`) detects with power ``level`` at
    ``alpha`` (NaN without a spread or with fewer than 2 seeds; inf where the exact test cannot reach
    ``alpha`` with these seeds)."""
    if seeds < 2 or not sd > 0 or not math.isfinite(sd):
        return math.nan
    if exact and (signflip_floor(seeds) if paired else permutation_floor(seeds, seeds)) > alpha:
        return math.inf
    return sd * _detectable_unit(seeds, alpha, paired, exact, level)


def seeds_needed(
    diff: float,
    sd: float,
    *,
    alpha: float = ALPHA,
    paired: bool = True,
    exact: bool = False,
    level: float = POWER,
    most: int = 200,
) -> int | None:
    """The fewest seeds at which the design's test detects ``diff`` with power ``level`` at
    ``alpha`` (None: more than ``most``; 2 without a spread)."""
    if not sd > 0:
        return 2
    if diff == 0:
        return None
    first = 2
    if exact:  # never fewer than the test without its floor needs, nor than the floor allows
        first = seeds_needed(diff, sd, alpha=alpha, paired=paired, level=level, most=most) or most + 1
        floor = (lambda n: signflip_floor(n)) if paired else (lambda n: permutation_floor(n, n))
        first = max(first, next((n for n in range(2, most + 1) if floor(n) <= alpha), most + 1))
    for seeds in range(first, most + 1):
        if detectable(sd, seeds, alpha=alpha, paired=paired, exact=exact, level=level) <= abs(diff):
            return seeds
    return None


@dataclass(frozen=True)
class Spread:
    """A pooled seed SD: ``sd`` from ``df`` degrees of freedom over ``groups`` groups; ``upper``: its
    upper :data:`SD_BOUND` confidence bound (:func:`upper_sd`), what a detectable difference reads."""

    sd: float
    df: int
    groups: int
    upper: float


def upper_sd(sd: float, df: float, level: float = SD_BOUND) -> float:
    """The one-sided upper ``level`` confidence bound of a standard deviation estimated with ``df``
    degrees of freedom: ``sd * sqrt(df / chi2.ppf(1 - level, df))`` (NaN without df)."""
    if not df > 0 or math.isnan(sd):
        return math.nan
    return sd * math.sqrt(df / float(scipy_stats().chi2.ppf(1 - level, df)))


def pooled_spread(groups: Iterable[Any], level: float = SD_BOUND) -> Spread:
    """The pooled SD of several groups of per-seed values (each group about its own mean: an
    encoding's seed means, or one question's per-seed differences), ``sum of squares / sum of (n - 1)``;
    groups of fewer than 2 values or with NaN are left out."""
    squares, df, count = 0.0, 0, 0
    for group in groups:
        values = np.asarray(group, dtype=float).ravel()
        if len(values) < 2 or np.isnan(values).any():
            continue
        squares += float(((values - values.mean()) ** 2).sum())
        df += len(values) - 1
        count += 1
    if not df:
        return Spread(math.nan, 0, count, math.nan)
    sd = math.sqrt(squares / df)
    return Spread(sd, df, count, upper_sd(sd, df, level))
