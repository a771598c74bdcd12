"""Seeds added in rounds until the declared questions are decided: a group-sequential paired test
with alpha spending, over a family of questions.

A :class:`SequentialPlan` fixes, before any run, how many seeds the questions are looked at after (``looks``:
e.g. 3, 5, 7, 10 seeds per encoding; the last is the most a question may use) and how the error
rate is spent over them (Lan & DeMets 1983: ``"obrien-fleming"``, little early and most at the
end as O'Brien & Fleming 1979, or ``"pocock"``, evenly as Pocock 1977). At look k a question is
decided where its test's p-value over every seed so far reaches the look's nominal level
(:func:`boundaries`): the paired t test (:func:`posenc.results.paired.paired_arrays`, the shared
examples' part of the variance added) or, with ``paired=False``, Welch's test over independent seeds
(:func:`posenc.results.stats.compare_arrays`); with ``exact`` (paired only) its exact sign-flip
p-value (:func:`posenc.results.paired.signflip_p`) must reach the level too. The nominal levels come
from the joint law of the test's p-values at the looks under the null (normal seed outcomes, whose
t statistics do not depend on the SD: Monte Carlo with a fixed generator), so that the chance of
ever crossing by look k is the spent ``alpha(seeds_k / seeds_K)``.

Stopping is optional: a run may stop at any look (every question decided, the time budget spent)
and resume later on the same plan; the error rate only falls, because a question is decided
only by crossing a boundary, and the chance of any crossing up to the last look is ``alpha``. What
it must not do is look between the planned looks or past the last one (:meth:`SequentialPlan.looks_done`
reads the looks a run's seeds complete; seeds past the last look are refused).

A family of questions (:func:`decide`) is tested with Holm's method recycled over the looks (Maurer &
Bretz 2013): every undecided question at ``alpha / (questions undecided)``; once one is decided its
share passes to the others, which are checked again at every look so far with the boundaries of the
larger level, until nothing changes. The family-wise error rate under any configuration of true and
false nulls and any stopping is simulated in ``tests/unit/results/test_sequential.py``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.results import stats
from posenc.results.design import scipy_stats
from posenc.results.paired import paired_arrays, permutation_p, signflip_p
from posenc.results.stats import ALPHA

SPENDING = ("obrien-fleming", "pocock")
#: Null paths the boundaries are computed from (fixed generator): the Monte-Carlo error of a spent
#: level a is about sqrt(a / BOUNDARY_DRAWS), 2.5% of a at a = 0.0125.
BOUNDARY_DRAWS = 200_000


def spent(fraction: float, alpha: float = ALPHA, spending: str = "obrien-fleming") -> float:
    """The error rate spent by ``fraction`` of the most seeds (Lan & DeMets 1983): O'Brien-Fleming's
    ``2 - 2 Phi(z_(1 - alpha/2) / sqrt(fraction))`` or Pocock's ``alpha ln(1 + (e - 1) fraction)``."""
    if spending not in SPENDING:
        raise PosencError(f"spending must be one of {', '.join(SPENDING)}, got {spending!r}")
    if not 0 < fraction <= 1:
        raise PosencError(f"fraction must be in (0, 1], got {fraction}")
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * fraction)
    norm = scipy_stats().norm
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(fraction)))


@dataclass(frozen=True)
class SequentialPlan:
    """Seeds per encoding at each look (increasing, the first at least 3), the spending function, the
    test (``paired`` by seed, or Welch's over independent seeds) and whether the test also needs its
    exact p-value (``exact``: the sign-flip test's for paired seeds, the permutation test's for
    independent ones) at the look's level."""

    looks: tuple[int, ...]
    alpha: float = ALPHA
    spending: str = "obrien-fleming"
    exact: bool = True
    paired: bool = True

    def __post_init__(self) -> None:
        looks = self.looks
        if (
            not isinstance(looks, tuple)
            or not all(isinstance(k, int) for k in looks)
            or not looks
            or looks[0] < 3
            or any(b <= a for a, b in zip(looks, looks[1:]))
        ):
            raise PosencError(
                f"looks must be increasing seed counts (a tuple of ints), the first at least 3, got {self.looks!r}"
            )
        if not 0 < self.alpha < 1:
            raise PosencError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.spending not in SPENDING:
            raise PosencError(f"spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")

    @classmethod
    def rounds(cls, first: int, step: int, most: int, **kwargs: Any) -> SequentialPlan:
        """Looks at ``first``, ``first + step``, ... seeds, and at ``most``."""
        if step < 1 or most < first:
            raise PosencError(
                f"step must be at least 1 and most at least first, got step={step}, most={most}"
            )
        looks = list(range(first, most, step)) + [most]
        return cls(tuple(looks), **kwargs)

    @property
    def most(self) -> int:
        return self.looks[-1]

    def looks_done(self, seeds: int) -> tuple[int, ...]:
        """The looks ``seeds`` paired seeds complete (seeds past the last look are refused)."""
        if seeds > self.most:
            raise PosencError(
                f"the plan ends at {self.most} seeds; {seeds} were run (a later look spends no error)"
            )
        return tuple(k for k in self.looks if k <= seeds)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _null_p(z: np.ndarray, k: int, paired: bool) -> np.ndarray:
    """Two-sided p-values of the test over the first ``k`` seeds of null normal paths ``z``."""
    sp = scipy_stats()
    if paired:
        part = z[:, 0, :k]
        t = part.mean(1) / (part.std(1, ddof=1) / math.sqrt(k))
        return 2 * sp.t.sf(np.abs(t), k - 1)
    a, b = z[:, 0, :k], z[:, 1, :k]
    va, vb = a.var(1, ddof=1) / k, b.var(1, ddof=1) / k
    t = (a.mean(1) - b.mean(1)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (k - 1) + vb**2 / (k - 1))
    return 2 * sp.t.sf(np.abs(t), df)


@functools.lru_cache(maxsize=256)
def _boundaries(looks: tuple[int, ...], alpha: float, spending: str, paired: bool) -> tuple[float, ...]:
    rng = np.random.default_rng(2024)
    z = rng.standard_normal((BOUNDARY_DRAWS, 1 if paired else 2, looks[-1]))
    alive = np.ones(BOUNDARY_DRAWS, dtype=bool)
    nominal, before = [], 0.0
    for k in looks:
        p = _null_p(z, k, paired)
        target = spent(k / looks[-1], alpha, spending) - before
        live = np.sort(p[alive])
        index = int(round(target * BOUNDARY_DRAWS))
        level = 0.0 if index <= 0 else (float(live[index - 1]) if index <= len(live) else 1.0)
        alive &= p > level
        before += target
        nominal.append(level)
    return tuple(nominal)


def boundaries(plan: SequentialPlan, alpha: float | None = None) -> tuple[float, ...]:
    """The nominal two-sided level of each look of ``plan`` for a question tested at ``alpha`` (default:
    the plan's): a question is decided at look k where its p-value there is at most this, and the chance
    under the null of first doing so at look k is what the spending function spends between looks k - 1
    and k."""
    return _boundaries(plan.looks, plan.alpha if alpha is None else float(alpha), plan.spending, plan.paired)


def look_statistics(
    rows: tuple[Any, Any], plan: SequentialPlan, *, rate: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(p, exact p)`` at each look the two rows' seeds x units arrays ``rows = (a, b)`` complete
    (leading axes vectorised): the plan's test over every seed so far (its shared units' part of the
    variance added), and the exact p-value of the per-seed means: the sign-flip test's of their
    differences for paired seeds, the permutation test's for independent ones (1 unless ``exact``)."""
    a, b = (np.asarray(x, dtype=float) for x in rows)
    done = plan.looks_done(min(a.shape[-2], b.shape[-2]))
    ps, flips = [], []
    for k in done:
        if plan.paired:
            ps.append(paired_arrays(a[..., :k, :], b[..., :k, :], rate=rate, exact=False)[3])
            flips.append(signflip_p((a[..., :k, :] - b[..., :k, :]).mean(-1)))
        else:
            ps.append(stats.compare_arrays(a[..., :k, :], b[..., :k, :], rate=rate)[3])
            flips.append(
                permutation_p(a[..., :k, :].mean(-1), b[..., :k, :].mean(-1))
                if plan.exact
                else np.ones(np.shape(ps[-1]))
            )
    shape = a.shape[:-2] + (len(done),)
    if not done:
        return np.ones(shape), np.ones(shape)
    return np.stack(ps, -1), np.stack(flips, -1)


def crossed(p: Any, p_exact: Any, plan: SequentialPlan, alpha: float) -> np.ndarray:
    """True where any look so far (last axis of ``p`` / ``p_exact``) reaches the nominal level of a
    question tested at ``alpha`` (for an exact plan, its sign-flip p too)."""
    p, p_exact = np.asarray(p, dtype=float), np.asarray(p_exact, dtype=float)
    nominal = np.asarray(boundaries(plan, alpha)[: p.shape[-1]])
    hit = p <= nominal
    if plan.exact:
        hit &= p_exact <= nominal
    return hit.any(-1)


@dataclass(frozen=True)
class Decision:
    """One question after the looks so far: ``decided`` (its null rejected: the two rows differ, in the
    direction of ``diff``, the mean of a - b), ``seeds`` read, ``looks`` completed, and at the last look
    the test's ``p`` and the sign-flip ``p_exact`` (1 for independent seeds)."""

    question: str
    decided: bool
    diff: float
    seeds: int
    looks: int
    p: float
    p_exact: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def holm_recycled(hits: Any, questions: int, alpha: float) -> np.ndarray:
    """Holm's method recycled over looks, vectorised over leading axes: ``hits(level)`` gives, per
    question (last axis), whether it crossed a boundary of that level at any look so far. Returns the
    decided questions."""
    decided = np.zeros(np.shape(hits(alpha)), dtype=bool)
    for _ in range(questions):
        open_ = questions - decided.sum(-1, keepdims=True)
        now = np.zeros_like(decided)
        for m in range(1, questions + 1):  # each replicate at its own level alpha / (open questions)
            now |= (open_ == m) & hits(alpha / m)
        new = decided | now
        if (new == decided).all():
            break
        decided = new
    return decided


def decide(
    plan: SequentialPlan, rows: Mapping[str, tuple[Any, Any]], *, rate: bool, alpha: float | None = None
) -> list[Decision]:
    """The family's decisions after the looks completed by every seed run so far: ``rows`` maps each
    question to its two rows' seeds x units arrays ``(a, b)`` (for a paired plan the same seeds, in
    order). Holm's method recycled over looks (:func:`holm_recycled`) at ``alpha`` (default: the plan's)."""
    names = list(rows)
    if not names:
        return []
    level = plan.alpha if alpha is None else alpha
    seeds = {min(np.shape(a)[-2], np.shape(b)[-2]) for a, b in rows.values()}
    if len(seeds) != 1:
        raise PosencError(f"every question of a family reads the same seeds; got {sorted(seeds)} seeds")
    found = [look_statistics((a, b), plan, rate=rate) for a, b in rows.values()]
    p = np.stack([f[0] for f in found])  # (questions, looks)
    flips = np.stack([f[1] for f in found])
    decided = holm_recycled(lambda lv: crossed(p, flips, plan, lv), len(names), level)
    out = []
    for i, name in enumerate(names):
        a, b = (np.asarray(x, dtype=float) for x in rows[name])
        last = (float(p[i, -1]), float(flips[i, -1])) if p.shape[-1] else (math.nan, math.nan)
        diff = float(a.mean() - b.mean())
        out.append(Decision(name, bool(decided[i]), diff, min(a.shape[-2], b.shape[-2]), p.shape[-1], *last))
    return out


def decide_looks(p: Any, plans: Sequence[SequentialPlan], alpha: float) -> np.ndarray:
    """The decided questions of a family whose questions each have their own plan (their test's
    boundaries) and a p-value at each look so far (``p``: questions x looks, each the test's p-value
    over the look's seeds, already never below the exact test's where the question's test is exact;
    NaN: untestable at that look): Holm's method recycled over the looks (:func:`holm_recycled`)."""
    p = np.nan_to_num(np.asarray(p, dtype=float).reshape(len(plans), -1), nan=1.0)

    def hits(level: float) -> np.ndarray:
        return np.array(
            [
                bool((row <= np.asarray(boundaries(plan, level)[: len(row)])).any())
                for row, plan in zip(p, plans)
            ]
        )

    if not plans:
        return np.zeros(0, dtype=bool)
    return holm_recycled(hits, len(plans), alpha)


def sequential_power(
    shift: float, plan: SequentialPlan, *, alpha: float | None = None, draws: int = 20_000, seed: int = 0
) -> tuple[float, float]:
    """``(power, expected seeds)`` of one question under ``plan`` at ``alpha`` whose seed outcomes are normal
    and ``shift`` SDs apart (paired: SDs of the per-seed differences; independent: of one encoding's seed
    outcomes); Monte Carlo, the examples' part left out."""
    level = plan.alpha if alpha is None else alpha
    z = np.random.default_rng(seed).standard_normal((draws, 1 if plan.paired else 2, plan.most))
    z[:, 0] += shift
    nominal = boundaries(plan, level)
    stopped = np.full(draws, plan.most)
    hit = np.zeros(draws, dtype=bool)
    for k, lv in zip(plan.looks, nominal):
        now = ~hit & (_null_p(z, k, plan.paired) <= lv)
        if plan.exact and now.any():
            exact = signflip_p(z[now, 0, :k]) if plan.paired else permutation_p(z[now, 0, :k], z[now, 1, :k])
            now[now] = exact <= lv
        stopped[now] = k
        hit |= now
    return float(hit.mean()), float(stopped.mean())


def sequential_summary(decisions: Sequence[Decision], plan: SequentialPlan) -> dict[str, Any]:
    """What ``summary.json`` keeps of a sequential run: the plan and each question's decision."""
    return {"plan": plan.to_dict(), "decisions": [d.to_dict() for d in decisions]}
