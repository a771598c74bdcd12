"""Seeds added in rounds until the declared questions are decided: a group-sequential paired test
with alpha spending, over a family of questions.

A :class:`SequentialPlan` fixes, before any run, how many seeds the questions are looked at after (``looks``:
e.g. 3, 5, 7, 10 seeds per encoding; the last is the most a question may use) and how the error
rate is spent over them (Lan & DeMets 1983: ``"obrien-fleming"``, little early and most at the
end as O'Brien & Fleming 1979, or ``"pocock"``, evenly as Pocock 1977). At look k a question is
decided where its paired t statistic over seeds (:func:`posenc.results.paired.paired_arrays`, the
shared examples' part of the variance added) reaches the look's boundary (:func:`boundaries`) and,
with ``exact``, its exact sign-flip p-value (:func:`posenc.results.paired.signflip_p`) is at most
the look's nominal level too. The boundaries come from the joint law of the t statistics at the
looks under the null (normal per-seed differences, whose t statistics do not depend on the SD:
Monte Carlo with a fixed generator), so that the chance of ever crossing by look k is the spent
``alpha(seeds_k / seeds_K)``.

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
from posenc.results.design import scipy_stats
from posenc.results.paired import paired_arrays, signflip_p
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
    """Seeds per encoding at each look (increasing, the first at least 3) and the spending function."""

    looks: tuple[int, ...]
    alpha: float = ALPHA
    spending: str = "obrien-fleming"
    exact: bool = True

    def __post_init__(self) -> None:
        looks = tuple(int(k) for k in self.looks)
        if not looks or looks[0] < 3 or any(b <= a for a, b in zip(looks, looks[1:])):
            raise PosencError(f"looks must be increasing seed counts, the first at least 3, got {self.looks}")
        if not 0 < self.alpha < 1:
            raise PosencError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.spending not in SPENDING:
            raise PosencError(f"spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")
        object.__setattr__(self, "looks", looks)

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


@functools.lru_cache(maxsize=256)
def _boundaries(
    looks: tuple[int, ...], alpha: float, spending: str
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    sp = scipy_stats()
    rng = np.random.default_rng(2024)
    z = rng.standard_normal((BOUNDARY_DRAWS, looks[-1]))
    alive = np.ones(BOUNDARY_DRAWS, dtype=bool)
    crit, nominal, before = [], [], 0.0
    for k in looks:
        part = z[:, :k]
        t = np.abs(part.mean(1) / (part.std(1, ddof=1) / math.sqrt(k)))
        target = spent(k / looks[-1], alpha, spending) - before
        live = np.sort(t[alive])[::-1]
        index = int(round(target * BOUNDARY_DRAWS))
        c = math.inf if index <= 0 else (float(live[index - 1]) if index <= len(live) else 0.0)
        alive &= t < c
        before += target
        crit.append(c)
        nominal.append(float(2 * sp.t.sf(c, k - 1)) if math.isfinite(c) else 0.0)
    return tuple(crit), tuple(nominal)


def boundaries(
    plan: SequentialPlan, alpha: float | None = None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(|t| boundaries, nominal two-sided levels)`` at each look of ``plan`` for a question tested at
    ``alpha`` (default: the plan's): the chance under the null of first crossing at look k is what the
    spending function spends between look k - 1 and look k."""
    return _boundaries(plan.looks, plan.alpha if alpha is None else float(alpha), plan.spending)


def look_statistics(differences: Any, plan: SequentialPlan, *, rate: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(|t|, sign-flip p)`` at each look ``differences`` (seeds x units, or a list of the two rows' seeds
    x units arrays ``(a, b)``) completes: the paired t statistic with the shared units' part of the
    variance, and the exact sign-flip p-value of the mean differences per seed."""
    a, b = differences if isinstance(differences, tuple) else (np.asarray(differences, dtype=float), None)
    a = np.asarray(a, dtype=float)
    b = np.zeros_like(a) if b is None else np.asarray(b, dtype=float)
    done = plan.looks_done(a.shape[-2])
    ts, ps = [], []
    for k in done:
        diff, _, _, _, se, _ = paired_arrays(a[..., :k, :], b[..., :k, :], rate=rate, exact=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            ts.append(np.where(se > 0, np.abs(diff) / se, np.where(diff == 0, 0.0, np.inf)))
        ps.append(signflip_p((a[..., :k, :] - b[..., :k, :]).mean(-1)))
    shape = a.shape[:-2] + (len(done),)
    if not done:
        return np.zeros(shape), np.ones(shape)
    return np.stack(ts, -1), np.stack(ps, -1)


def crossed(t: Any, p_exact: Any, plan: SequentialPlan, alpha: float) -> np.ndarray:
    """True where any look so far (last axis of ``t`` / ``p_exact``) crosses the boundary of a question
    tested at ``alpha`` (and, for an exact plan, its sign-flip p is at most the look's nominal level)."""
    t, p_exact = np.asarray(t, dtype=float), np.asarray(p_exact, dtype=float)
    crit, nominal = boundaries(plan, alpha)
    k = t.shape[-1]
    hit = t >= np.asarray(crit[:k])
    if plan.exact:
        hit &= p_exact <= np.asarray(nominal[:k])
    return hit.any(-1)


@dataclass(frozen=True)
class Decision:
    """One question after the looks so far: ``decided`` (its null rejected: the two rows differ, in the
    direction of ``diff``, the mean of a - b), ``seeds`` read, ``looks`` completed, and at the last look
    the paired ``t`` statistic and the sign-flip ``p_exact``."""

    question: str
    decided: bool
    diff: float
    seeds: int
    looks: int
    t: float
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
    """The family's decisions after the looks completed by every seed run so far: ``rows`` maps each question to
    its two rows' seeds x units arrays ``(a, b)`` paired by seed (the same seeds, in order). Holm's
    method recycled over looks (:func:`holm_recycled`) at ``alpha`` (default: the plan's)."""
    names = list(rows)
    if not names:
        return []
    level = plan.alpha if alpha is None else alpha
    seeds = {np.asarray(a).shape[-2] for a, _ in rows.values()}
    if len(seeds) != 1:
        raise PosencError(f"every question of a family reads the same seeds; got {sorted(seeds)} seeds")
    stats_ = [look_statistics((np.asarray(a), np.asarray(b)), plan, rate=rate) for a, b in rows.values()]
    t = np.stack([s[0] for s in stats_])  # (questions, looks)
    p = np.stack([s[1] for s in stats_])
    decided = holm_recycled(lambda lv: crossed(t, p, plan, lv), len(names), level)
    out = []
    for i, name in enumerate(names):
        a, b = (np.asarray(x, dtype=float) for x in rows[name])
        last_t = float(t[i, -1]) if t.shape[-1] else math.nan
        last_p = float(p[i, -1]) if p.shape[-1] else math.nan
        out.append(
            Decision(name, bool(decided[i]), float((a - b).mean()), a.shape[-2], t.shape[-1], last_t, last_p)
        )
    return out


def sequential_power(
    shift: float, plan: SequentialPlan, *, alpha: float | None = None, draws: int = 20_000, seed: int = 0
) -> tuple[float, float]:
    """``(power, expected seeds)`` of one question under ``plan`` at ``alpha`` whose per-seed differences
    are normal with mean ``shift`` SDs (Monte Carlo; examples' part left out)."""
    level = plan.alpha if alpha is None else alpha
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((draws, plan.most)) + shift
    crit, nominal = boundaries(plan, level)
    stopped = np.full(draws, plan.most)
    hit = np.zeros(draws, dtype=bool)
    for k, c, lv in zip(plan.looks, crit, nominal):
        part = d[:, :k]
        t = np.abs(part.mean(1) / (part.std(1, ddof=1) / math.sqrt(k)))
        now = ~hit & (t >= c)
        if plan.exact and now.any():
            now[now] = signflip_p(part[now]) <= lv
        stopped[now] = k
        hit |= now
    return float(hit.mean()), float(stopped.mean())


def sequential_summary(decisions: Sequence[Decision], plan: SequentialPlan) -> dict[str, Any]:
    """What ``summary.json`` keeps of a sequential run: the plan and each question's decision."""
    return {"plan": plan.to_dict(), "decisions": [d.to_dict() for d in decisions]}
