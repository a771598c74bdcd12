"""What the records of ``posenc extend`` can decide: exact intervals of retrieval rates, paired tests
between scalings, and each scaling's effective context length with an interval.

**Retrieval rate of a cell** (:func:`rate`): ``k`` of ``n`` prompts answered right, with the
Clopper-Pearson interval (``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``): exact,
never zero width at 0 or n.

**Two scalings on the same prompts** (:func:`mcnemar`): McNemar's exact test, the two-sided
binomial test (``scipy.stats.binomtest``, p = 1/2) on the discordant prompts (right under one,
wrong under the other); prompts both answer alike carry no information on the difference.
**Two scalings on the same documents** (:func:`paired_documents`): the paired t test over
documents of the per-document mean losses (the ratio of perplexities, ``exp`` of the mean
difference, with its t interval). A page's tests are corrected together
(:func:`posenc.results.stats.adjust`, Benjamini-Hochberg).

**Effective context length** (after RULER, Hsieh et al. 2024, whose threshold is a fixed score:
Llama-2-7B's at 4k). Here the threshold is the model's own: a reference score ``r`` (the
unscaled model's at its shortest length) less a stated margin ``m``. For a scaling measured at
lengths ``L_1 < ... < L_k`` with true scores ``p_i``, let ``d_i = p_i - r``. Its effective
context length is the longest ``L_j`` with ``d_i >= -m`` at every ``L_i <= L_j`` (``None``: not
even ``L_1``). It is estimated from the observed ``d_i`` and bracketed by

- ``low``, the longest ``L_j`` whose every ``d_i`` (``i <= j``) has a one-sided lower confidence
  bound ``>= -m``: lengths *shown* to hold;
- ``high``, the longest ``L_j`` whose every ``d_i`` has a one-sided upper bound ``>= -m``:
  lengths *not shown* to fail.

``P(low <= E <= high) >= confidence`` for the true length ``E``. ``low > E`` needs the first
length past ``E`` (where ``d < -m``) to have a lower bound above its ``d``; that one bound is at
level ``alpha / 2``. ``high < E`` needs some length up to ``E`` to have an upper bound below its
``d``; there are at most ``k`` of them, so each upper bound is at level ``alpha / (2k)``
(Bonferroni). For retrieval (:func:`retrieval_effective_length`), a bound of ``d_i`` combines the
one-sided Clopper-Pearson bounds of ``p_i`` and of ``r`` (each at half the level: ``r``'s prompts
are other prompts), so the statement is exact-conservative; outcomes are binary (a passkey
answered exactly, a RULER-style prompt with every expected string recalled). For perplexity
(:func:`perplexity_effective_length`) the score is the negative mean loss, the margin a ratio of
perplexities (1.1: within 10%), and the bounds are one-sided t bounds of the per-document
differences (the documents are the same at every length). The coverage of both is measured by
simulation in ``tests/unit/extend/test_evidence.py``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core.checks import check_float
from posenc.core.errors import PosencError

CONFIDENCE = 0.95


def _scipy_stats() -> Any:
    try:
        from scipy import stats  # optional dependency: the cli extra
    except ImportError:
        raise PosencError("posenc extend's statistics need scipy: pip install 'posenc[cli]'") from None
    return stats


def _binary(name: str, outcomes: Sequence[Any]) -> np.ndarray:
    values = np.asarray(outcomes, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise PosencError(f"{name} must be a non-empty sequence of outcomes, got shape {values.shape}")
    if not np.all((values == 0) | (values == 1)):
        raise PosencError(
            f"{name} must be right/wrong outcomes (True/False or 1/0), got {sorted(set(values))[:4]}"
        )
    return values


@functools.lru_cache(maxsize=65536)
def _clopper_pearson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    interval = (
        _scipy_stats().binomtest(successes, n).proportion_ci(confidence_level=confidence, method="exact")
    )
    return float(interval.low), float(interval.high)


def lower_bound(successes: int, n: int, alpha: float) -> float:
    """The one-sided ``1 - alpha`` Clopper-Pearson lower bound of a rate (``k`` of ``n``)."""
    return _clopper_pearson(int(successes), int(n), 1 - 2 * alpha)[0]


def upper_bound(successes: int, n: int, alpha: float) -> float:
    """The one-sided ``1 - alpha`` Clopper-Pearson upper bound of a rate."""
    return _clopper_pearson(int(successes), int(n), 1 - 2 * alpha)[1]


@dataclass(frozen=True)
class RetrievalRate:
    """``successes`` of ``n`` and the two-sided Clopper-Pearson interval at ``confidence``."""

    successes: int
    n: int
    value: float
    low: float
    high: float
    confidence: float


def rate(outcomes: Sequence[Any], *, confidence: float = CONFIDENCE) -> RetrievalRate:
    """The rate of right answers among ``outcomes`` (True/False) with its exact interval."""
    check_float("confidence", confidence, minimum=0.5, maximum=0.9999)
    values = _binary("outcomes", outcomes)
    k, n = int(values.sum()), int(values.size)
    low, high = _clopper_pearson(k, n, confidence)
    return RetrievalRate(k, n, k / n, low, high, confidence)


@dataclass(frozen=True)
class Paired:
    """Two scalings on the same prompts: how many each alone got right, and McNemar's exact p."""

    n: int
    both: int
    first_only: int
    second_only: int
    neither: int
    p_value: float


def mcnemar(first: Sequence[Any], second: Sequence[Any]) -> Paired:
    """McNemar's exact test of two scalings' outcomes on the same prompts (in the same order)."""
    a, b = _binary("first", first), _binary("second", second)
    if a.size != b.size:
        raise PosencError(
            f"first and second must be outcomes of the same prompts: {a.size} and {b.size} outcomes"
        )
    first_only, second_only = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    discordant = first_only + second_only
    p = 1.0 if discordant == 0 else float(_scipy_stats().binomtest(first_only, discordant, 0.5).pvalue)
    both = int(np.sum((a == 1) & (b == 1)))
    return Paired(int(a.size), both, first_only, second_only, int(a.size) - both - discordant, min(1.0, p))


@dataclass(frozen=True)
class PairedLoss:
    """Two scalings on the same documents: the ratio of perplexities (``exp`` of the mean
    per-document difference of mean losses, first minus second), its t interval and p-value."""

    documents: int
    ratio: float
    low: float
    high: float
    p_value: float


def paired_documents(
    first: Sequence[float], second: Sequence[float], *, confidence: float = CONFIDENCE
) -> PairedLoss:
    """The paired t test over documents of two scalings' per-document mean losses (nats)."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise PosencError(
            f"first and second must be mean losses of the same documents (2 or more): {a.shape}, {b.shape}"
        )
    diff = a - b
    mean, sd = float(diff.mean()), float(diff.std(ddof=1))
    if sd <= 1e-12 * max(1.0, abs(mean)):  # the same difference on every document, to rounding
        return PairedLoss(
            int(a.size), math.exp(mean), math.exp(mean), math.exp(mean), 1.0 if mean == 0 else 0.0
        )
    stats = _scipy_stats()
    half = stats.t.ppf(0.5 + confidence / 2, a.size - 1) * sd / math.sqrt(a.size)
    p = float(stats.ttest_1samp(diff, 0.0).pvalue)
    return PairedLoss(int(a.size), math.exp(mean), math.exp(mean - half), math.exp(mean + half), p)


@dataclass(frozen=True)
class LengthBound:
    """One length of an effective-length reading: the estimated difference from the reference and
    its one-sided bounds (``low`` at the level that shows a length holds, ``high`` at the level
    that shows it fails)."""

    length: int
    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class Effective:
    """A scaling's effective context length (``None``: not even the shortest length), the interval
    ``[low, high]`` around it, and what it was read against."""

    length: int | None
    low: int | None
    high: int | None
    reference: float
    margin: float
    confidence: float
    lengths: tuple[LengthBound, ...]
    method: str


def _longest(lengths: Sequence[int], values: Sequence[float], floor: float) -> int | None:
    """The longest ``lengths[j]`` with ``values[i] >= floor`` for every ``i <= j``."""
    best = None
    for length, value in zip(lengths, values):
        if value < floor - 1e-12:
            break
        best = length
    return best


def _effective(
    rows: list[LengthBound], reference: float, margin: float, confidence: float, method: str
) -> Effective:
    lengths = [row.length for row in rows]
    return Effective(
        _longest(lengths, [r.estimate for r in rows], -margin),
        _longest(lengths, [r.low for r in rows], -margin),
        _longest(lengths, [r.high for r in rows], -margin),
        reference, margin, confidence, tuple(rows), method,
    )  # fmt: skip


def _checked_lengths(name: str, values: Mapping[int, Any]) -> list[int]:
    lengths = sorted(values)
    if not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise PosencError(f"{name} must map lengths (positive integers) to results, got {list(values)[:4]}")
    return lengths


def retrieval_effective_length(
    outcomes: Mapping[int, Sequence[Any]],
    *,
    margin: float,
    reference: Sequence[Any] | None = None,
    confidence: float = CONFIDENCE,
) -> Effective:
    """The effective context length of one scaling from its right/wrong outcomes per length.

    ``reference``: the outcomes the threshold is read from (the unscaled model's at its shortest
    length); ``None`` means this scaling's own at its shortest length (then that length differs
    from the reference by exactly 0). ``margin``: how far below the reference rate a length may
    fall and still hold (0.1: ten points)."""
    check_float("margin", margin, minimum=0.0, maximum=1.0)
    check_float("confidence", confidence, minimum=0.5, maximum=0.9999)
    lengths = _checked_lengths("outcomes", outcomes)
    own = reference is None
    ref = _binary("reference", outcomes[lengths[0]] if own else reference)  # type: ignore[arg-type]
    alpha, k = 1 - confidence, len(lengths)
    r_k, r_n = int(ref.sum()), int(ref.size)
    rows = []
    for i, length in enumerate(lengths):
        got = _binary(f"outcomes at {length}", outcomes[length])
        p_k, p_n = int(got.sum()), int(got.size)
        if own and i == 0:
            rows.append(LengthBound(length, 0.0, 0.0, 0.0))
            continue
        low = lower_bound(p_k, p_n, alpha / 4) - upper_bound(r_k, r_n, alpha / 4)
        each = alpha / (2 * (k + 1))
        high = upper_bound(p_k, p_n, each) - lower_bound(r_k, r_n, each)
        rows.append(LengthBound(length, p_k / p_n - r_k / r_n, low, high))
    method = (
        f"rate within {margin:g} of the reference's {r_k}/{r_n}; one-sided Clopper-Pearson bounds of both "
        f"rates (low: {alpha / 4:g} each; high: {alpha / (2 * (k + 1)):.3g} each, Bonferroni over {k} lengths)"
    )
    return _effective(rows, r_k / r_n, margin, confidence, method)


def perplexity_effective_length(
    losses: Mapping[int, Sequence[float]],
    *,
    margin: float,
    reference: Sequence[float] | None = None,
    confidence: float = CONFIDENCE,
) -> Effective:
    """The effective context length of one scaling from its per-document mean losses per length
    (the same documents, in the same order, at every length and in ``reference``).

    ``margin``: a ratio of perplexities (1.1: perplexity at most 10% above the reference's);
    ``reference``: the per-document mean losses the threshold is read from (the unscaled model's
    at its shortest length; ``None``: this scaling's own at its shortest length)."""
    check_float("margin", margin, minimum=1.0, maximum=100.0)
    check_float("confidence", confidence, minimum=0.5, maximum=0.9999)
    lengths = _checked_lengths("losses", losses)
    ref = np.asarray(losses[lengths[0]] if reference is None else reference, dtype=float)
    if ref.ndim != 1 or ref.size < 2:
        raise PosencError(
            f"reference must hold the mean losses of 2 or more documents, got shape {ref.shape}"
        )
    stats = _scipy_stats()
    alpha, k, n = 1 - confidence, len(lengths), ref.size
    q_low, q_high = stats.t.ppf(1 - alpha / 2, n - 1), stats.t.ppf(1 - alpha / (2 * k), n - 1)
    rows = []
    for length in lengths:
        mine = np.asarray(losses[length], dtype=float)
        if mine.shape != ref.shape:
            raise PosencError(
                f"losses at {length} must be the same {n} documents as the reference, got {mine.shape}"
            )
        diff = ref - mine  # the score is the negative loss: a higher loss is a lower score
        mean, spread = float(diff.mean()), float(diff.std(ddof=1)) / math.sqrt(n)
        rows.append(LengthBound(length, mean, mean - q_low * spread, mean + q_high * spread))
    method = (
        f"perplexity within {margin:g}x the reference's; one-sided t bounds over {n} documents of the paired "
        f"differences of mean loss (low: {alpha / 2:g}; high: {alpha / (2 * k):.3g}, Bonferroni over {k} lengths)"
    )
    return _effective(rows, float(np.exp(ref.mean())), math.log(margin), confidence, method)


__all__ = [
    "CONFIDENCE",
    "Effective",
    "LengthBound",
    "Paired",
    "PairedLoss",
    "RetrievalRate",
    "lower_bound",
    "mcnemar",
    "paired_documents",
    "perplexity_effective_length",
    "rate",
    "retrieval_effective_length",
    "upper_bound",
]
