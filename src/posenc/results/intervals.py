"""The interval of a cell's mean from a seeds x units array (vectorised over leading axes): the
two-way crossed random-effects decomposition of seeds x units (method of moments), Satterthwaite's
degrees of freedom, the logit scale for rates and Clopper-Pearson at 0% / 100% (the method:
:mod:`posenc.results.stats`). The tests between rows built on it are
:mod:`posenc.results.pair_tests`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from posenc.core.errors import PosencError

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
METHOD = (
    "95% t interval over seeds (seeds x examples variance: the seed means' spread plus the shared "
    "examples', Satterthwaite df; seeds tied exactly: the examples' noise; rates on the logit scale, "
    "Clopper-Pearson at 0% / 100%); "
    "converged runs only"
)


def scipy_stats() -> Any:
    """``scipy.stats``, or one error saying how to install it (an optional dependency: the cli extra)."""
    try:
        from scipy import stats as module
    except ImportError:
        raise PosencError(
            "the benchmark's statistics need scipy: pip install 'posenc[cli]' (bash scripts/setup.sh does)"
        ) from None
    return module


def mean_squares(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-way (seeds x units) mean squares: seeds, units, residual (interaction + noise)."""
    seeds, count = values.shape[-2:]
    grand = values.mean(axis=(-2, -1))
    by_seed = values.mean(-1)
    by_unit = values.mean(-2)
    ms_seed = count * by_seed.var(-1, ddof=1) if seeds > 1 else np.full(grand.shape, np.nan)
    ms_unit = seeds * by_unit.var(-1, ddof=1) if count > 1 else np.zeros(grand.shape)
    if seeds > 1 and count > 1:
        resid = values - by_seed[..., None] - by_unit[..., None, :] + grand[..., None, None]
        ms_resid = (resid**2).sum(axis=(-2, -1)) / ((seeds - 1) * (count - 1))
    else:
        ms_resid = np.zeros(grand.shape)
    return ms_seed, ms_unit, ms_resid


def seed_variance(
    values: np.ndarray, squares: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variance of the mean from the spread of the seed means, its df = seeds - 1, the residual mean
    square); ``squares``: :func:`mean_squares` of ``values`` where the caller has them already.

    Seeds whose means tie exactly although their examples differ (rates with few errors: three
    seeds each 253 of 256 right, on different examples) show no spread, which cannot be the truth: the
    examples' noise alone moves the mean of a seed. There the residual mean square, what a seed mean
    varies by with no seed effect at all, stands in, with its own df, instead of a zero-width interval.
    """
    seeds, count = values.shape[-2:]
    ms_seed, _, ms_resid = mean_squares(values) if squares is None else squares
    tie = (ms_seed == 0) & (ms_resid > 0)
    part = np.where(tie, ms_resid, ms_seed) / (seeds * count)
    df = np.where(tie, (seeds - 1.0) * max(count - 1, 1), seeds - 1.0)
    return part, np.asarray(df, dtype=float), ms_resid


def satterthwaite(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum of variance parts and Satterthwaite's df of the sum."""
    total = sum(p for p, _ in parts)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = sum(np.where(p > 0, p**2 / d, 0.0) for p, d in parts)
        df = np.where(denom > 0, total**2 / denom, parts[0][1])
    return np.asarray(total, dtype=float), np.asarray(df, dtype=float)


def mean_variance(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, variance of the mean, df)`` of a seeds x units array (leading axes vectorised).

    Variance: the part of the seed means (their spread, seeds - 1 df) plus the
    shared units' part (the spread of the unit means beyond the residual noise, never negative),
    df by Satterthwaite, but no more than seeds - 1 where the seed part is the larger. One seed: NaN
    variance. One unit per seed: the t test's variance of a mean, s^2 / seeds, with seeds - 1 df.
    """
    values = np.asarray(values, dtype=float)
    seeds, count = values.shape[-2:]
    mean = values.mean(axis=(-2, -1))
    if seeds < 2:
        nan = np.full(mean.shape, np.nan)
        return mean, nan, nan
    squares = mean_squares(values)
    seed_part, seed_df, ms_resid = seed_variance(values, squares)
    ms_unit = squares[1]
    unit_part = np.maximum(ms_unit - ms_resid, 0.0) / (seeds * count)
    variance, df = satterthwaite(
        [(seed_part, seed_df), (unit_part, np.full(mean.shape, max(count - 1, 1.0)))]
    )
    # Satterthwaite's df runs high at very few df: where the seed part is the larger one, the
    # interval keeps its df (seeds - 1).
    df = np.where(seed_part >= unit_part, np.minimum(df, seed_df), df)
    return mean, variance, df


@functools.lru_cache(maxsize=256)
def clopper_pearson_edge(count: int, confidence: float) -> float:
    """How far from 0% the Clopper-Pearson interval of 0 successes in ``count`` examples reaches
    (the same from 100% for ``count`` of ``count``)."""
    ci = scipy_stats().binomtest(0, count).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.high)


@functools.lru_cache(maxsize=256)
def floor_bound(seeds: int, count: int, confidence: float = CONFIDENCE) -> float:
    """How far from 0% (from 100%) the interval of a rate cell at exactly 0 (1) on every seed and unit
    reaches: the Clopper-Pearson bound of one seed's ``count`` units, or the upper bound the same cell
    gets with one unit of one seed right, where that reaches further. A bound never falls as the count
    does (before, 0 of 3 x 256 gave ``[0, 1]`` and 1 of 3 x 256 ``[0, 9]``: the examples' bound reads
    one seed's examples and no seed spread), and the cell at the floor keeps the spread its seeds
    could hide: the second bound shrinks with seeds (3 seeds of 256 units: 9%; 10 seeds: about 1%)."""
    edge = clopper_pearson_edge(count, confidence)
    if seeds < 2:
        return edge
    one = np.zeros((seeds, count))
    one[0, 0] = 1.0
    return max(edge, float(interval(one, rate=True, confidence=confidence)[2]))


def interval(values: Any, *, rate: bool, confidence: float = CONFIDENCE) -> tuple[Any, Any, Any]:
    """``(mean, low, high)`` of a seeds x units array (leading axes vectorised): the t interval of
    :func:`mean_variance`; ``rate``: values in [0, 1], the interval on the logit scale, and at
    exactly 0 or 1 :func:`floor_bound`. NaN bounds with fewer than 2 seeds."""
    sp = scipy_stats()
    from scipy.special import expit, logit

    values = np.asarray(values, dtype=float)
    mean, variance, df = mean_variance(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = sp.t.ppf(1 - (1 - confidence) / 2, df)
        half = q * np.sqrt(variance)
        if rate:
            inside = (mean > 0) & (mean < 1)
            m = np.where(inside, mean, 0.5)
            centre, spread = logit(m), half / (m * (1 - m))
            low = np.where(inside, expit(centre - spread), mean)
            high = np.where(inside, expit(centre + spread), mean)
            at_edge = values.shape[-2] > 1 and bool(np.any((mean <= 0) | (mean >= 1)))
            edge = floor_bound(values.shape[-2], values.shape[-1], confidence) if at_edge else 0.0
            low = np.where(mean >= 1, 1 - edge, low)
            high = np.where(mean <= 0, edge, high)
        else:
            low, high = mean - half, mean + half
    unknown = np.isnan(variance)
    low, high = np.where(unknown, np.nan, low), np.where(unknown, np.nan, high)
    if np.ndim(mean) == 0:
        return float(mean), float(low), float(high)
    return mean, low, high
