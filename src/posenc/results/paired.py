"""Encodings compared paired by seed, and whether a seed learned as an outcome of its own.

**Paired by seed.** Within a seed every encoding trains on the same batches in the same order
(``posenc.compare.trainer``'s data stream is seeded by the seed alone), is scored on the same
examples or bytes, and starts from the same shared weights (``posenc.compare.work.SHARED_INIT``):
common random numbers (Bouthillier et al. 2021). Seed i of encoding A and seed i of encoding B are
then a pair, and what a seed does to both (an easy data order, a lucky start) cancels in their
difference. :func:`paired_arrays` is the paired t test over seeds on the per-seed differences
(``posenc.results.stats.compare_arrays`` with ``paired``: the shared examples' part of the
variance added, ``seeds - 1`` degrees of freedom), and with ``exact`` its p-value is never below
the exact sign-flip p-value of the same differences (:func:`signflip_p`): under the null that two
encodings are alike each pair is exchangeable, so the sign-flip test holds its level for any
distribution of seed outcomes, all-or-nothing ones included, where the t test alone does not
(three seeds that each learned on one side and not on the other tie exactly: t's p is 0, the
sign-flip's 0.25). The price: no p-value below ``2 / 2^seeds`` (:func:`signflip_floor`).

**Learned, as its own outcome.** Where a seed either learns a bucket or does not (length
generalisation often is all-or-nothing: Zhou et al. 2024), a mean over seeds mixes two questions
and no interval over 3 seeds covers it. :func:`learned` calls a seed learned where its mean in the
bucket is at least :data:`LEARNED_AT`; :func:`learning` gives k of N seeds with its exact
(Clopper-Pearson) interval and the cell over those seeds that learned (performance given learning);
:func:`learned_test` compares two encodings' counts exactly (paired: McNemar's exact test on the
seeds where they differ; independent: Boschloo's).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.results import stats

#: A seed *learned* a bucket where its mean there is at least this (rates: exact match, answer-token
#: accuracy).
LEARNED_AT = 0.5
PAIRED_TEST = "paired t over seeds, never below the exact sign-flip p"
#: Seeds past which the sign-flip p-value is a Monte Carlo over this many random sign patterns
#: (``(hits + 1) / (draws + 1)``, still a valid p-value) instead of every pattern.
EXACT_SEEDS, SIGN_DRAWS = 16, 1 << 16

Records = Sequence[dict[str, Any]]


def signflip_floor(seeds: int) -> float:
    """The smallest two-sided p-value an exact sign-flip test over ``seeds`` paired differences can
    give (every difference on one side): ``2 / 2^seeds``, at most 1."""
    return min(1.0, 2.0 / 2.0**seeds)


@functools.lru_cache(maxsize=64)
def _signs(seeds: int) -> np.ndarray:
    """Every sign pattern of ``seeds`` differences, ``(2^seeds, seeds)``; past :data:`EXACT_SEEDS`,
    :data:`SIGN_DRAWS` random ones (fixed generator)."""
    if seeds > EXACT_SEEDS:
        return np.random.default_rng(seeds).choice([-1.0, 1.0], size=(SIGN_DRAWS, seeds))
    return 1.0 - 2.0 * ((np.arange(2**seeds)[:, None] >> np.arange(seeds)) & 1)


def signflip_p(differences: Any) -> Any:
    """Two-sided sign-flip p-value of the mean of paired differences (last axis: seeds; leading axes
    vectorised): the share of the ``2^seeds`` sign patterns whose sum lies at least as far from 0 as
    the one observed (past :data:`EXACT_SEEDS` seeds, of :data:`SIGN_DRAWS` random patterns, the
    observed one counted). Valid for any distribution of differences symmetric about 0. A float for one
    set of differences, an array for several."""
    d = np.asarray(differences, dtype=float)
    seeds = d.shape[-1]
    if seeds < 1:
        raise PosencError("a sign-flip test needs at least one paired difference")
    flat = d.reshape(-1, seeds)
    observed = np.abs(flat.sum(-1)) * (1 - 1e-12)  # ties with the observed sum count as "as far"
    signs = _signs(seeds)
    out = np.empty(flat.shape[0])
    for lo in range(0, flat.shape[0], 256):  # (patterns, chunk) at a time
        sums = np.abs(signs @ np.abs(flat[lo : lo + 256]).T)
        hits = (sums >= observed[lo : lo + 256]).sum(0)
        out[lo : lo + 256] = hits / len(signs) if seeds <= EXACT_SEEDS else (hits + 1) / (len(signs) + 1)
    return out.reshape(d.shape[:-1]) if d.ndim > 1 else float(out[0])


def permutation_floor(seeds_a: int, seeds_b: int) -> float:
    """The smallest two-sided p-value an exact permutation test over two groups of independent seeds can
    give: ``2 / C(seeds_a + seeds_b, seeds_a)``, at most 1 (0.0022 at 6 and 6 seeds, 0.1 at 3 and 3)."""
    return min(1.0, 2.0 / math.comb(seeds_a + seeds_b, seeds_a))


@functools.lru_cache(maxsize=32)
def _splits(seeds_a: int, seeds_b: int) -> np.ndarray:
    """Every way to pick ``seeds_a`` of the pooled seeds as group a, ``(splits, seeds_a + seeds_b)`` of
    0/1; past :data:`SIGN_DRAWS` splits, that many random ones (fixed generator)."""
    total = seeds_a + seeds_b
    if math.comb(total, seeds_a) > SIGN_DRAWS:
        rng = np.random.default_rng(total)
        return (rng.random((SIGN_DRAWS, total)).argsort(1) < seeds_a).astype(float)
    out = np.zeros((math.comb(total, seeds_a), total))
    for row, chosen in enumerate(itertools.combinations(range(total), seeds_a)):
        out[row, list(chosen)] = 1.0
    return out


def permutation_p(a: Any, b: Any) -> Any:
    """Two-sided permutation p-value of the difference of two groups' means over independent seeds (last
    axis: each group's seed outcomes; leading axes vectorised): the share of the ways to split the pooled
    seeds into groups of these sizes whose difference lies at least as far from 0 as the one observed
    (past :data:`SIGN_DRAWS` ways, of that many random ones, the observed one counted). Valid for any
    distribution of seed outcomes where the two encodings are alike."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = a.shape[-1], b.shape[-1]
    pooled = np.concatenate([a, b], -1).reshape(-1, na + nb)
    splits = _splits(na, nb)
    total = pooled.sum(-1)
    observed = np.abs(a.reshape(-1, na).sum(-1) / na - (total - a.reshape(-1, na).sum(-1)) / nb) * (1 - 1e-12)
    out = np.empty(len(pooled))
    for lo in range(0, len(pooled), 64):
        in_a = splits @ pooled[lo : lo + 64].T  # (splits, chunk): the sum of group a
        diff = np.abs(in_a / na - (total[lo : lo + 64] - in_a) / nb)
        hits = (diff >= observed[lo : lo + 64]).sum(0)
        exact = math.comb(na + nb, na) <= SIGN_DRAWS
        out[lo : lo + 64] = hits / len(splits) if exact else (hits + 1) / (len(splits) + 1)
    return out.reshape(a.shape[:-1]) if a.ndim > 1 else float(out[0])


def independent_arrays(a: Any, b: Any, *, rate: bool, exact: bool = True) -> tuple[Any, Any, Any, Any]:
    """``(a - b, low, high, p)`` of two seeds x units arrays of independent seeds (leading axes
    vectorised): Welch's test over seeds (:func:`posenc.results.stats.compare_arrays`); with ``exact``,
    ``p`` is never below the exact permutation p-value of the mean of each seed (:func:`permutation_p`)."""
    diff, low, high, p = stats.compare_arrays(a, b, rate=rate)
    if exact:
        p = np.maximum(
            p, permutation_p(np.asarray(a, dtype=float).mean(-1), np.asarray(b, dtype=float).mean(-1))
        )
    return diff, low, high, p


@dataclass(frozen=True)
class PairedComparison:
    """Row ``a`` minus row ``b`` paired by seed: the mean difference, its 95% interval, its standard
    error and degrees of freedom, the test's two-sided p-value (``p``: the t test's ``p_t``, never below
    the sign-flip ``p_exact`` where the test is exact), the pairs (``seeds``) and whether the two rows
    are identical on every seed and unit (``tie``)."""

    diff: float
    low: float
    high: float
    se: float
    df: float
    p: float
    p_t: float
    p_exact: float
    seeds: int
    tie: bool = False
    test: str = PAIRED_TEST

    @property
    def testable(self) -> bool:
        return self.seeds >= 2 and not math.isnan(self.p)

    def one_sided(self, side: str, margin: float = 0.0) -> float:
        """One-sided p-value (t, not floored) that ``diff`` lies beyond ``margin`` on ``side``: ``">"``
        (a - b > margin) or ``"<"`` (a - b < margin); 1 for a tie."""
        if self.tie:
            return 1.0
        if side not in (">", "<"):
            raise PosencError(f"side must be '>' or '<', got {side!r}")
        if not self.se > 0:
            return 0.0 if (self.diff > margin if side == ">" else self.diff < margin) else 1.0
        t = (self.diff - margin) / self.se
        sp = stats.scipy_stats()
        return float(sp.t.sf(t, self.df) if side == ">" else sp.t.cdf(t, self.df))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_arrays(a: Any, b: Any, *, rate: bool, exact: bool = True) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``(a - b, low, high, p, se, df)`` of two seeds x units arrays whose seed i is one pair and whose
    units are shared (leading axes vectorised): the paired t test over seeds; with ``exact``, ``p`` is
    never below the sign-flip p-value of the mean differences per seed."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise PosencError(f"paired rows need the same seeds and units, got {a.shape[-2:]} and {b.shape[-2:]}")
    diff, low, high, p = stats.compare_arrays(a, b, rate=rate, paired=True)
    _, variance, df = stats.mean_variance(a - b)
    df = np.minimum(df, a.shape[-2] - 1.0)
    if exact:
        p = np.maximum(p, signflip_p((a - b).mean(-1)))
    return diff, low, high, p, np.sqrt(variance), df


def paired_compare(a: Any, b: Any, *, rate: bool, exact: bool = True) -> PairedComparison:
    """:class:`PairedComparison` of two seeds x units arrays paired by seed (rows matched)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 2:
        raise PosencError(f"paired_compare takes seeds x units arrays, got {a.ndim} axes")
    diff, low, high, p_t, se, df = paired_arrays(a, b, rate=rate, exact=False)
    p_exact = float(signflip_p((a - b).mean(-1))) if a.shape[0] >= 1 else math.nan
    tie = bool(np.ptp(a) == 0 and np.ptp(b) == 0 and a.flat[0] == b.flat[0])
    p = 1.0 if tie else (max(float(p_t), p_exact) if exact else float(p_t))
    return PairedComparison(
        float(diff), float(low), float(high), float(se), float(df), p, float(p_t), p_exact, a.shape[0], tie,
        PAIRED_TEST if exact else stats.PAIRED,
    )  # fmt: skip


def seed_data(records: Records, label: str, task: str, column: str) -> dict[int, np.ndarray]:
    """``{seed: unit values}`` of one cell's converged runs (a ratio's linearised per-file values)."""
    data, _ = stats.collect(records, label, task, column)
    return {seed: stats.as_units(got) for seed, got in data.items()}


def pair_records(
    records: Records, a: str, b: str, *, task: str, column: str, exact: bool = True
) -> PairedComparison:
    """Row ``a`` against row ``b`` in one column, paired by seed over every seed both converged on
    (a seed one of them did not converge on is the learned outcome's, not this test's)."""
    left, right = seed_data(records, a, task, column), seed_data(records, b, task, column)
    shared = sorted(set(left) & set(right))
    if not shared:
        nan = math.nan
        return PairedComparison(nan, nan, nan, nan, nan, nan, nan, nan, 0)
    xa, xb = np.stack([left[s] for s in shared]), np.stack([right[s] for s in shared])
    return paired_compare(xa, xb, rate=stats.bounded(column), exact=exact)


# ---------------------------------------------------------------------------
# Learned or not: k of N seeds, exact tests; performance given learning.
# ---------------------------------------------------------------------------


def learned(values: Any, at: float = LEARNED_AT) -> np.ndarray:
    """Per seed (leading axes kept): True where the mean of a seed over its units is at least ``at``."""
    return np.asarray(values, dtype=float).mean(-1) >= at


@functools.lru_cache(maxsize=4096)
def clopper_pearson(k: int, n: int, confidence: float = stats.CONFIDENCE) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a share ``k / n`` (``scipy.stats.binomtest``)."""
    if not 0 <= k <= n or n < 1:
        raise PosencError(f"k must be in 0..n and n at least 1, got k={k}, n={n}")
    ci = stats.scipy_stats().binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Learning:
    """``k`` of ``n`` seeds learned (``low`` .. ``high``: the exact 95% interval of the share), and the
    cell over those seeds that learned (``given``: mean, low, high; NaN bounds with fewer than 2)."""

    k: int
    n: int
    low: float
    high: float
    given: tuple[float, float, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def learning(values: Any, *, rate: bool = True, at: float = LEARNED_AT) -> Learning:
    """:class:`Learning` of one seeds x units cell."""
    values = np.asarray(values, dtype=float)
    flags = learned(values, at)
    k, n = int(flags.sum()), int(len(flags))
    low, high = clopper_pearson(k, n)
    if k == 0:
        given: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    else:
        mean, lo, hi = stats.interval(values[flags], rate=rate)
        given = (float(mean), float(lo), float(hi))
    return Learning(k, n, low, high, given)


@functools.lru_cache(maxsize=4096)
def _binomial_p(k: int, n: int) -> float:
    return float(stats.scipy_stats().binomtest(k, n, 0.5).pvalue)


@functools.lru_cache(maxsize=4096)
def _boschloo_p(ka: int, na: int, kb: int, nb: int) -> float:
    table = [[ka, na - ka], [kb, nb - kb]]
    return float(stats.scipy_stats().boschloo_exact(table, alternative="two-sided").pvalue)


def learned_test(a: Sequence[bool], b: Sequence[bool], *, paired: bool) -> float:
    """Two-sided exact p-value that two encodings learn as often: paired by seed (``a[i]``, ``b[i]``
    one seed), McNemar's exact test (the binomial test of those seeds where they differ); else
    Boschloo's exact test on the two counts. 1 where nothing differs."""
    fa, fb = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if paired:
        if fa.shape != fb.shape:
            raise PosencError(f"paired seeds need as many flags on each side, got {len(fa)} and {len(fb)}")
        only_a, only_b = int((fa & ~fb).sum()), int((~fa & fb).sum())
        return 1.0 if only_a + only_b == 0 else _binomial_p(only_a, only_a + only_b)
    ka, kb = int(fa.sum()), int(fb.sum())
    if (ka == 0 and kb == 0) or (ka == len(fa) and kb == len(fb)):
        return 1.0
    return _boschloo_p(ka, len(fa), kb, len(fb))
