"""The rules a claim's verdict follows, for :mod:`posenc.results.claims` to call: scale labels on
every verdict, no agreement from a tie at a floor, and the claims of a table corrected as one family.

- **Scale, on every verdict** (:func:`scale_label`): a claim made at a scale the run does not reach
  (a 1B-parameter model, a 247M one: :class:`posenc.results.claims.Scale`) is labelled so whether the
  run agrees with it or not; an agreement of a 160k-parameter CPU model with a 1B model's claim is
  news about the small model, and says so.
- **No agreement from a floor tie** (:func:`floor_tie`): two rows that sit at the same floor or ceiling
  on every converged seed and unit (0 of 384 on each side) tell the claim nothing, whatever their
  numbers of converged seeds; "at least as good" is then uninformative, never "agrees".
- **A family** (:func:`family_verdicts`): the claims judged in one table are tested together. Each
  claim gives the one-sided p-values for and against what it says (:class:`Judged`: from the test it
  already runs, :func:`threshold_p` for a cell against a line, the paired or Welch test for two rows);
  the two-sided p-values are corrected by Holm's method over the family (:func:`holm`), and a claim
  agrees (or disagrees) only where its corrected p-value is below 5% in that direction. An interval
  alone at 95% (uncorrected) no longer decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.results import stats
from posenc.results.design import scipy_stats

AGREES, DISAGREES, INCONCLUSIVE, UNINFORMATIVE = "agrees", "disagrees", "inconclusive", "uninformative"
#: A run reaches a paper's scale when each stated dimension is at least this share of the paper's (as
#: :data:`posenc.results.claims.SCALE_SHARE`).
SCALE_SHARE = 0.5
FAMILY = "Holm over the table's claims (5%)"


def _count(x: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:g}"


def _describe(scale: Mapping[str, float | None]) -> str:
    names = {"parameters": "{} parameters", "train_length": "trained at length {}", "steps": "{} steps"}
    parts = [names[k].format(_count(float(v)) if k != "train_length" else f"{float(v):g}")
             for k, v in scale.items() if k in names and v]  # fmt: skip
    return ", ".join(parts) or "not recorded"


def below_scale(paper: Mapping[str, float | None], run: Mapping[str, float | None]) -> bool:
    """True when some dimension the paper states (``parameters``, ``train_length``, ``steps``) is more
    than twice the run's (:data:`SCALE_SHARE`); a dimension the run does not record is not held against it."""
    for key in ("parameters", "train_length", "steps"):
        theirs, ours = paper.get(key), run.get(key)
        if theirs and ours and ours < SCALE_SHARE * theirs:
            return True
    return False


def scale_label(
    verdict: str, paper: Mapping[str, float | None] | None, run: Mapping[str, float | None]
) -> str:
    """The scale note a verdict carries: for any verdict (agreements included) of a claim made at a
    scale the run does not reach, ``"at a smaller scale than the paper's (paper: ...; run: ...)"``;
    otherwise empty."""
    if not paper or not below_scale(paper, run):
        return ""
    return f"{verdict} at a smaller scale than the paper's (paper: {_describe(paper)}; run: {_describe(run)})"


def floor_tie(a: Any, b: Any) -> bool:
    """True when two rows (seeds x units arrays of rates, any numbers of converged seeds) sit at the same
    floor or ceiling (0 or 1) on every seed and unit: the task tells them apart in no way."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not a.size or not b.size:
        return False
    value = a.flat[0]
    return bool(value in (0.0, 1.0) and np.all(a == value) and np.all(b == value))


def threshold_p(values: Any, threshold: float, side: str, *, rate: bool) -> tuple[float, float]:
    """One-sided p-values ``(for, against)`` that a cell (seeds x units) lies on ``side`` (``">="`` or
    ``"<="``) of ``threshold``, from the cell's t statistic (:func:`posenc.results.stats.mean_variance`;
    rates on the logit scale, as the cell's interval is) with ``seeds - 1`` degrees of freedom at most; a
    cell at exactly 0 or 1 on every seed and unit reads as the same cell with one unit of one seed the
    other way, as its interval does (:func:`posenc.results.intervals.floor_bound`): one error fewer never
    gives weaker evidence."""
    if side not in (">=", "<="):
        raise PosencError(f"side must be '>=' or '<=', got {side!r}")
    values = np.asarray(values, dtype=float)
    mean = float(values.mean()) if values.size else math.nan
    if rate and values.ndim == 2 and values.shape[0] > 1 and mean in (0.0, 1.0):
        flipped = values.copy()
        flipped[0, 0] = 1.0 - mean
        return threshold_p(flipped, threshold, side, rate=True)
    mean, variance, df = (float(x) for x in stats.mean_variance(values))
    # seeds - 1 degrees of freedom, as the tests between rows keep them: where the examples' part is the
    # larger, Satterthwaite's df rise with it, and p-values far in the tail, where a family's correction
    # reads them, came out 2-6x too small at p < 0.01-0.001 (measured: 3 seeds, 20 files)
    df = min(df, values.shape[-2] - 1.0)
    if math.isnan(variance):
        return math.nan, math.nan
    sp = scipy_stats()
    if rate:
        m, line = min(max(mean, 1e-9), 1 - 1e-9), min(max(threshold, 1e-9), 1 - 1e-9)
        t = (math.log(m / (1 - m)) - math.log(line / (1 - line))) / (math.sqrt(variance) / (m * (1 - m)))
    else:
        t = (
            (mean - threshold) / math.sqrt(variance)
            if variance > 0
            else math.copysign(math.inf, mean - threshold)
        )
    p_above, p_below = float(sp.t.sf(t, df)), float(sp.t.cdf(t, df))
    return (p_above, p_below) if side == ">=" else (p_below, p_above)


def margin_p(diff: float, variance: float, df: float, line: float) -> tuple[float, float]:
    """One-sided p-values ``(above, below)`` that a difference with this variance and degrees of
    freedom (:func:`posenc.results.pair_tests.difference_variance`) lies above / below ``line``."""
    if math.isnan(variance) or math.isnan(diff):
        return math.nan, math.nan
    if not variance > 0:
        return (0.0, 1.0) if diff > line else ((1.0, 0.0) if diff < line else (1.0, 1.0))
    sp = scipy_stats()
    t = (diff - line) / math.sqrt(variance)
    return float(sp.t.sf(t, df)), float(sp.t.cdf(t, df))


def per_seed_p(values: Sequence[float], threshold: float, side: str) -> tuple[float, float]:
    """One-sided p-values ``(for, against)`` that one number per seed (a ratio of two runs, a rise of a
    loss) has its mean on ``side`` (``">="`` / ``"<="``) of ``threshold``: the t test over seeds."""
    array = np.asarray([float(v) for v in values if not math.isnan(float(v))])
    if len(array) < 2:
        return math.nan, math.nan
    return threshold_p(array[:, None], threshold, side, rate=False)


def ordered_p(p_values: Sequence[float], needed: int) -> float:
    """The smallest level at which Holm's method over ``p_values`` (one-sided, one per pair of a claim)
    decides at least ``needed`` of them: the ``needed``-th smallest Holm-adjusted p-value (1 where there
    are fewer). A valid p-value for "at least ``needed`` of these hold" (the pairs decided are each right
    with family-wise error at that level)."""
    adjusted = sorted(q for q in holm(p_values) if not math.isnan(q))
    return adjusted[needed - 1] if 0 < needed <= len(adjusted) else 1.0


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN entries stay NaN and are not counted in the family)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


@dataclass(frozen=True)
class Judged:
    """One claim's evidence: the one-sided p-values that the run shows what the claim says
    (``p_for``) and its opposite (``p_against``); ``uninformative``: a tie at a floor or ceiling;
    ``measured``: False where the runs are missing or too few to test."""

    p_for: float
    p_against: float
    uninformative: bool = False
    measured: bool = True

    @property
    def p(self) -> float:
        """The two-sided p-value the family corrects (NaN: not tested)."""
        if self.uninformative or not self.measured or math.isnan(self.p_for) or math.isnan(self.p_against):
            return math.nan
        return min(1.0, 2 * min(self.p_for, self.p_against))


def family_verdicts(judged: Sequence[Judged], alpha: float = stats.ALPHA) -> list[tuple[str, float]]:
    """``(verdict, Holm-adjusted p)`` of each claim of a family: agrees / disagrees where the adjusted
    p-value is below ``alpha`` in that direction, uninformative for a floor tie, inconclusive otherwise
    (and for a claim that could not be tested)."""
    adjusted = holm([j.p for j in judged])
    out = []
    for j, q in zip(judged, adjusted):
        if j.uninformative:
            out.append((UNINFORMATIVE, math.nan))
        elif math.isnan(q) or q >= alpha:
            out.append((INCONCLUSIVE, q))
        else:
            out.append((AGREES if j.p_for < j.p_against else DISAGREES, q))
    return out
