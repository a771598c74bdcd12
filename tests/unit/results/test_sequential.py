"""Seeds added in rounds until decided (posenc.results.sequential): the error rate under optional
stopping, by simulation. Paths are drawn with generators other than the boundaries' own.

The naive rule (a fixed-seed test repeated at every look, stopping at the first p < 5%) is checked
to exceed 5% on the same paths, so the tests can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp
from tests.stat_populations import AllOrNothing, CorrelatedContinuous

from posenc.core.errors import PosencError
from posenc.results import sequential as sq

PLAN = sq.SequentialPlan((3, 5, 7, 10))


def test_spending_reaches_alpha_at_the_end_and_grows():
    for spending in sq.SPENDING:
        values = [sq.spent(f, 0.05, spending) for f in (0.3, 0.5, 0.7, 1.0)]
        assert values == sorted(values) and values[-1] == pytest.approx(0.05)
    assert sq.spent(0.3, 0.05) < sq.spent(0.3, 0.05, "pocock")  # O'Brien-Fleming spends little early
    with pytest.raises(PosencError, match="spending must be one of"):
        sq.spent(0.5, 0.05, "haybittle")
    with pytest.raises(PosencError, match="fraction must be in"):
        sq.spent(0.0)


def test_a_plan_is_checked_and_refuses_seeds_past_its_end():
    assert sq.SequentialPlan.rounds(3, 2, 10).looks == (3, 5, 7, 9, 10)
    assert PLAN.looks_done(6) == (3, 5) and PLAN.looks_done(2) == ()
    with pytest.raises(PosencError, match="ends at 10 seeds"):
        PLAN.looks_done(11)
    for looks in ((2, 4), (3, 3), (), [3, 5], (3.0, 5.0)):
        with pytest.raises(PosencError, match="looks must be increasing"):
            sq.SequentialPlan(looks)
    with pytest.raises(PosencError, match="alpha must be in"):
        sq.SequentialPlan((3, 5), alpha=1.5)
    with pytest.raises(PosencError, match="spending must be one of"):
        sq.SequentialPlan((3, 5), spending="haybittle")


@pytest.mark.parametrize("spending", sq.SPENDING)
@pytest.mark.parametrize("paired", [True, False])
def test_the_boundaries_spend_what_they_say_at_each_look(spending, paired):
    """Normal null paths (a generator of their own): the share first crossing by each look is the
    spent error rate, within three Monte-Carlo standard errors (paired t, and Welch over independent seeds)."""
    plan = sq.SequentialPlan((3, 5, 7, 10), spending=spending, exact=False, paired=paired)
    nominal = sq.boundaries(plan, 0.05)
    z = np.random.default_rng(77).standard_normal((50_000, 1 if paired else 2, plan.most))
    alive = np.ones(len(z), dtype=bool)
    for k, level in zip(plan.looks, nominal):
        alive &= sq._null_p(z, k, paired) > level
        want = sq.spent(k / plan.most, 0.05, spending)
        assert abs((1 - alive.mean()) - want) < 3 * math.sqrt(want * (1 - want) / len(z)) + 1e-4, (k, want)
    assert nominal[-1] < 0.05  # the last look pays for the earlier ones


def _stopped_errors(values, plan, rate):
    """(the plan's rule, the naive rule) error on null paths: decided at any look, stopping there."""
    p, flips = sq.look_statistics((values[:, 0], values[:, 1]), plan, rate=rate)  # (reps, looks)
    ours = sq.crossed(p, flips, plan, plan.alpha)
    naive = (p < plan.alpha).any(-1)
    return float(ours.mean()), float(naive.mean())


@pytest.mark.parametrize(
    ("population", "exact", "paired"),
    [(CorrelatedContinuous(0.3, 0.5, 0.5), False, True), (CorrelatedContinuous(0.3, 0.5, 0.5), True, True),
     (AllOrNothing(0.5, 0.02, 0.9, rho=0.3), True, True), (CorrelatedContinuous(0.3, 0.5, 0.0), False, False)],
    ids=str,
)  # fmt: skip
def test_stopping_when_decided_keeps_the_error_rate(population, exact, paired):
    """Two identical encodings looked at after 3, 5, 7 and 10 seeds, stopping at the first decision:
    called different at most 5% of the time (within two standard errors), paired or by Welch's test
    over independent seeds. Testing at 5% at every look instead: well above 5%."""
    plan = sq.SequentialPlan((3, 5, 7, 10), exact=exact, paired=paired)
    reps = 4000
    values = population.draw(np.random.default_rng(5), reps, plan.most, 32, arms=2)
    ours, naive = _stopped_errors(values, plan, population.kind == "binary")
    assert ours <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps), ours
    if not exact:
        assert naive > 0.08, naive


@pytest.mark.parametrize(
    "population", [CorrelatedContinuous(0.3, 0.5, 0.5), AllOrNothing(0.5, 0.02, 0.9, rho=0.3)], ids=str
)
def test_a_family_decided_in_rounds_keeps_its_family_wise_error(population):
    """Four encodings against one reference, paired by seed, looked at after 3, 5, 7 and 10 seeds, Holm
    recycled over the looks: two encodings truly differ (by 2 SDs of the seed effect, every seed),
    two do not; some of the two called different at most 5% of the time, stopping at any look."""
    plan = sq.SequentialPlan((3, 5, 7, 10), exact=population.kind == "binary")
    reps, questions = 2000, 4
    rng = np.random.default_rng(11)
    values = population.draw(rng, reps, plan.most, 16, arms=questions + 1)
    values[:, 0] += 0.6  # encodings 0 and 1 differ from the reference (the last)
    values[:, 1] -= 0.6
    rate = population.kind == "binary"
    found = [sq.look_statistics((values[:, j], values[:, -1]), plan, rate=rate) for j in range(questions)]
    p = np.stack([f[0] for f in found], 1)  # (reps, questions, looks)
    flips = np.stack([f[1] for f in found], 1)
    decided = sq.holm_recycled(lambda level: sq.crossed(p, flips, plan, level), questions, plan.alpha)
    false = decided[:, 2:].any(-1).mean()
    assert false <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps), false
    if not rate:
        assert decided[:, :2].all(-1).mean() > 0.5  # and the real differences are found


def test_decide_reads_a_family_of_rows():
    rng = np.random.default_rng(2)
    ref = rng.normal(2.0, 0.3, (10, 1)) + rng.normal(0, 0.1, (10, 20))
    rows = {
        "far": (ref + 0.5 + rng.normal(0, 0.05, (10, 20)), ref),
        "alike": (ref + rng.normal(0, 0.05, (10, 20)), ref),
    }
    early = {
        d.question: d for d in sq.decide(PLAN, {k: (a[:7], b[:7]) for k, (a, b) in rows.items()}, rate=False)
    }
    assert not early["far"].decided  # 7 seeds: the exact floor (2/128) is above the look's nominal level
    assert sq.decide(
        sq.SequentialPlan(PLAN.looks, exact=False), {"far": (rows["far"][0][:7], ref[:7])}, rate=False
    )[0].decided
    out = {d.question: d for d in sq.decide(PLAN, rows, rate=False)}
    assert out["far"].decided and not out["alike"].decided
    assert (
        out["far"].looks == 4 and out["far"].seeds == 10 and out["far"].diff == pytest.approx(0.5, abs=0.05)
    )
    summary = sq.sequential_summary(list(out.values()), PLAN)
    assert summary["plan"]["looks"] == (3, 5, 7, 10) and len(summary["decisions"]) == 2
    with pytest.raises(PosencError, match="the same seeds"):
        sq.decide(PLAN, {"a": (ref, ref), "b": (ref[:5], ref[:5])}, rate=False)


def test_sequential_power_grows_with_the_difference_and_stops_early():
    plan = sq.SequentialPlan((3, 5, 7, 10), exact=False)
    small, seeds_small = sq.sequential_power(0.5, plan, alpha=0.0125)
    large, seeds_large = sq.sequential_power(2.0, plan, alpha=0.0125)
    assert small < large and seeds_large < seeds_small <= 10
    exact, _ = sq.sequential_power(2.0, PLAN, alpha=0.0125)
    assert exact <= large
    # the sequential test's power at its last look against scipy's paired t at the same draws' level
    last = sq.boundaries(plan, 0.0125)[-1]
    fixed = sq.SequentialPlan((10,), exact=False)
    assert sq.sequential_power(1.0, fixed, alpha=0.0125)[0] == pytest.approx(
        float(
            np.mean(
                sp.ttest_1samp(
                    np.random.default_rng(0).standard_normal((20_000, 1, 10))[:, 0] + 1.0, 0, axis=1
                ).pvalue
                <= 0.0125
            )
        ),
        abs=0.01,
    )
    assert last < 0.0125
