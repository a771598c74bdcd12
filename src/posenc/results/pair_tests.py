"""Tests between two rows of a table on the same units (vectorised over leading axes): Welch's t
over seeds with the units' part of the difference added, a paired t over seeds for one model
evaluated two ways, the Benjamini-Hochberg correction over a table's tests, and the smallest p an
exact permutation test over seeds can reach (the method: :mod:`posenc.results.stats`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from posenc.results.intervals import (
    CONFIDENCE,
    floor_bound,
    mean_variance,
    satterthwaite,
    scipy_stats,
    seed_variance,
)

TEST = (
    "Welch t test over seeds (examples' variance added, Welch's degrees of freedom of the seed means; "
    "paired t over seeds, seeds - 1 degrees of freedom, for one model evaluated two ways)"
)
CORRECTION = "Benjamini-Hochberg over every pair of every column of the table"


def _arm_part(values: np.ndarray, rate: bool, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seed part of an arm's variance, its df, its residual mean square); an arm of rates at 0 or 1
    on every seed and unit gets the variance of its interval's bound (:func:`floor_bound`) instead of none."""
    part, df, ms_resid = seed_variance(values)
    if rate and np.any(part == 0):
        seeds, count = values.shape[-2:]
        mean = values.mean(axis=(-2, -1))
        edge = floor_bound(seeds, count, confidence)
        q = scipy_stats().t.ppf(1 - (1 - confidence) / 2, seeds - 1)
        at_edge = (part == 0) & ((mean <= 0) | (mean >= 1))
        part = np.where(at_edge, (edge / q) ** 2, part)
        df = np.where(at_edge, seeds - 1.0, df)
    return part, df, ms_resid


@dataclass(frozen=True)
class Comparison:
    """Row ``a`` minus row ``b`` in one column: the difference, its interval, the test's two-sided
    p-value (before any multiplicity correction), seeds on each side and the test's name."""

    diff: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    test: str
    tie: bool = False  # both rows identical on every seed and unit (e.g. both at 0%)

    @property
    def measured(self) -> bool:
        return self.n_a > 0 and self.n_b > 0 and not math.isnan(self.diff)

    @property
    def testable(self) -> bool:
        """Two converged seeds or more on each side (fewer: the spread over seeds is unknown)."""
        return self.n_a >= 2 and self.n_b >= 2 and not math.isnan(self.p)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


WELCH = "Welch t over seeds"
PAIRED = "paired t over seeds"


def difference_variance(
    a: Any, b: Any, *, rate: bool, paired: bool = False, confidence: float = CONFIDENCE
) -> tuple[Any, Any, Any]:
    """``(a - b, variance of it, degrees of freedom)`` of two seeds x units arrays on the same units, as
    :func:`compare_arrays` tests them (leading axes vectorised; NaN variance with fewer than 2 seeds on a
    side): what a one-sided test against a margin reads too."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"the two rows were scored on different units ({a.shape[-1]} vs {b.shape[-1]})")
    if paired:
        diff, variance, df = mean_variance(a - b)
        # the df of the seeds' differences, as the unpaired test keeps Welch's (see below): the
        # examples' part let them grow, and p-values far in the tail came out 4-10x too small
        return diff, variance, np.minimum(df, a.shape[-2] - 1.0)
    sa, sb, count = a.shape[-2], b.shape[-2], a.shape[-1]
    diff = a.mean(axis=(-2, -1)) - b.mean(axis=(-2, -1))
    if sa < 2 or sb < 2:
        nan = np.full(np.shape(diff), np.nan)
        return diff, nan, nan
    part_a, df_a, res_a = _arm_part(a, rate, confidence)
    part_b, df_b, res_b = _arm_part(b, rate, confidence)
    if count > 1:
        by_unit = a.mean(-2) - b.mean(-2)
        unit = np.maximum(by_unit.var(-1, ddof=1) - res_a / sa - res_b / sb, 0.0) / count
    else:
        unit = np.zeros(np.shape(diff))
    variance, df = satterthwaite(
        [(part_a, df_a), (part_b, df_b), (unit, np.full(np.shape(diff), max(count - 1, 1.0)))]
    )
    # The units' part of a difference estimates what is left of the shared examples after
    # they cancel (nothing, when two rows differ alike on every example): a noisy, mostly
    # zero estimate. It adds to the variance but never to the df, which stay the seeds'
    # (Welch's): letting it raise them made p-values far in the tail, where a correction over
    # a whole table reads them, too small (measured: 1.2-2.2x the nominal rate at 0.0005).
    _, seed_df = satterthwaite([(part_a, df_a), (part_b, df_b)])
    return diff, variance, np.minimum(df, seed_df)


def compare_arrays(
    a: Any, b: Any, *, rate: bool, paired: bool = False, confidence: float = CONFIDENCE
) -> tuple[Any, Any, Any, Any]:
    """``(a - b, low, high, p)`` of two seeds x units arrays on the same units (leading axes
    vectorised): Welch's t over seeds with the units' part of the difference added, or with
    ``paired`` (seed i of ``a`` and of ``b`` are one trained run) a paired t over seeds on ``a - b``
    (:func:`difference_variance`). p is two-sided; a difference of exactly 0 with no spread (a tie)
    has p = 1."""
    sp = scipy_stats()
    diff, variance, df = difference_variance(a, b, rate=rate, paired=paired, confidence=confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(variance)
        half = sp.t.ppf(1 - (1 - confidence) / 2, df) * se
        stat = np.abs(diff) / se
        p = np.where(se > 0, 2 * sp.t.sf(stat, df), np.where(diff == 0, 1.0, 0.0))
    p = np.where(np.isnan(variance), np.nan, p)
    low, high = diff - half, diff + half
    if np.ndim(diff) == 0:
        return float(diff), float(low), float(high), float(p)
    return diff, low, high, p


def adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (``scipy.stats.false_discovery_control``); NaN entries
    (untestable pairs) stay NaN and are not counted in the family."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = scipy_stats().false_discovery_control(p[ok], method="bh")
    return out.tolist()


def min_permutation_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value an exact permutation test over seeds can give with ``n_a``
    and ``n_b`` seeds (both arms apart on every seed): 2 / C(n_a + n_b, n_a), at most 1."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))
