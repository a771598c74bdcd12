"""Power, detectable differences and the seed spread they read (posenc.results.design), by simulation.

The claim checked: a detectable difference printed for a family's questions, from the spread the
table estimates (pooled over the questions, its upper 70% bound), at the level the correction
applies, is found at least 75% of the time when it is the true difference. The old way (the
median of each row's SD, before the correction) is checked to fall short, so the test can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sp
from tests.stat_populations import Correlated, CorrelatedContinuous

from posenc.core.errors import PosencError
from posenc.results import design, paired


@pytest.mark.parametrize("seeds", [3, 5, 10])
@pytest.mark.parametrize("alpha", [0.05, 0.0125])
def test_paired_power_is_the_paired_t_tests(seeds, alpha):
    """The noncentral t's power against scipy's ttest_rel on normal differences (4000 replicates)."""
    shift = design.detectable(1.0, seeds, alpha=alpha) * 0.8
    want = design.paired_power(shift, 1.0, seeds, alpha=alpha)
    d = np.random.default_rng(seeds).normal(shift, 1.0, (4000, seeds))
    got = np.mean(sp.ttest_1samp(d, 0.0, axis=1).pvalue < alpha)
    assert abs(got - want) < 3 * np.sqrt(want * (1 - want) / 4000), (got, want)


def test_the_exact_test_pays_for_its_floor():
    """The sign-flip floor: no power where 2 / 2^seeds is above the level, less than the t test's near
    it, about the t test's where the floor is far below the level."""
    assert design.paired_power(5.0, 1.0, 5, alpha=0.05, exact=True) == 0.0  # 2/32 > 5%
    assert design.detectable(1.0, 7, alpha=0.0125, exact=True) == np.inf  # 2/128 > 1.25%
    near = design.detectable(1.0, 8, alpha=0.0125)
    assert design.paired_power(near, 1.0, 8, alpha=0.0125, exact=True) < 0.7  # 2/256: all but one seed agree
    far = design.detectable(1.0, 10, alpha=0.05)
    assert design.paired_power(far, 1.0, 10, alpha=0.05, exact=True) == pytest.approx(0.8, abs=0.03)
    # independent seeds: Welch's test with the permutation floor (2 / C(2n, n))
    assert design.detectable(1.0, 5, alpha=0.00625, paired=False, exact=True) == np.inf  # 2/252 > 0.625%
    six = design.detectable(1.0, 6, alpha=0.00625, paired=False)
    assert design.power(six, 1.0, 6, alpha=0.00625, paired=False, exact=True) < 0.75
    eight = design.detectable(1.0, 8, alpha=0.00625, paired=False)
    assert design.power(eight, 1.0, 8, alpha=0.00625, paired=False, exact=True) == pytest.approx(
        0.8, abs=0.02
    )
    # past 14 seeds the exact test's power is taken as the t test's: within 2.5 points of it at 16
    sixteen = design.detectable(1.0, 16, alpha=0.00625)
    assert design.paired_power(sixteen, 1.0, 16, alpha=0.00625, exact=True) == pytest.approx(0.8, abs=1e-4)
    assert design._exact_power(sixteen, 16, 0.00625) == pytest.approx(0.8, abs=0.025)


@pytest.mark.parametrize(
    ("seeds", "paired_", "exact"), [(3, True, False), (7, True, True), (5, False, False)]
)
def test_the_detectable_difference_has_the_stated_power(seeds, paired_, exact):
    d = design.detectable(2.0, seeds, alpha=0.02, paired=paired_, exact=exact)
    assert design.power(d, 2.0, seeds, alpha=0.02, paired=paired_, exact=exact) == pytest.approx(
        0.8, abs=0.01
    )
    needed = design.seeds_needed(d, 2.0, alpha=0.02, paired=paired_, exact=exact)
    assert needed == seeds or (needed < seeds and exact)  # an exact test's power steps with its floor


def test_the_family_level_and_bad_input():
    assert design.family_level(4) == pytest.approx(0.0125)
    assert design.family_level(4, method="fixed-sequence") == pytest.approx(0.05)
    with pytest.raises(PosencError, match="questions must be at least 1"):
        design.family_level(0)
    with pytest.raises(PosencError, match="method must be one of"):
        design.family_level(3, method="bh")
    assert design.seeds_needed(0.5, 0.0) == 2 and design.seeds_needed(0.0, 1.0) is None
    assert np.isnan(design.detectable(0.0, 5)) and np.isnan(design.detectable(1.0, 1))


@pytest.mark.parametrize("df", [2, 4, 8, 20])
def test_the_upper_bound_of_a_pooled_sd_holds_at_its_level(df):
    """Groups of normal values whose pooled df is ``df``: the true SD is below the upper 70% bound 70%
    of the time (2000 replicates)."""
    rng = np.random.default_rng(df)
    hits = []
    for _ in range(2000):
        groups = [rng.normal(0.0, 1.5, 3) for _ in range(df // 2)]
        hits.append(design.pooled_spread(groups).upper >= 1.5)
    assert abs(np.mean(hits) - 0.7) < 3 * np.sqrt(0.21 / 2000), np.mean(hits)
    assert design.pooled_spread([[1.0], [np.nan, 2.0]]).df == 0


def _rate_offset(population: Correlated, diff: float) -> float:
    """The logit offset of arm 0 at which its true rate is ``diff`` above arm 1's."""
    base = population.truth(1)
    return optimize.brentq(
        lambda x: (
            Correlated(population.p, population.seed_sd, population.example_sd, population.rho, (x,)).truth(0)
            - base
            - diff
        ),
        -10,
        10,
    )


def _printed_and_found(population, *, seeds, questions, reps, exact, rng, old=False):
    """Per replicate: the detectable difference a table of ``questions`` encodings against a reference
    prints (from the spread of its paired differences as the table estimates it), and whether a fresh
    pair of encodings that truly differ by it is found by the test at the family's level."""
    alpha = design.family_level(questions)
    rate = population.kind == "binary"
    table = population.draw(rng, reps, seeds, 128, arms=questions + 1)
    means = table.mean(-1)  # (reps, arms, seeds)
    found = np.zeros(reps, dtype=bool)
    printed = np.zeros(reps)
    for r in range(reps):
        diffs = [means[r, j] - means[r, -1] for j in range(questions)]
        if old:  # the median of each row's own SD, at 5%, Welch over independent seeds
            sd = float(np.median([np.std(means[r, j], ddof=1) for j in range(questions + 1)]))
            printed[r] = design.detectable(sd, seeds, alpha=0.05, paired=False)
        else:
            printed[r] = design.detectable(design.pooled_spread(diffs).upper, seeds, alpha=alpha, exact=exact)
        if rate:
            shifted = Correlated(population.p, population.seed_sd, population.example_sd, population.rho,
                                 (_rate_offset(population, min(printed[r], 0.6)),))  # fmt: skip
            fresh = shifted.draw(rng, 1, seeds, 128, arms=2)[0]
        else:
            fresh = population.draw(rng, 1, seeds, 128, arms=2)[0]
            fresh[0] += printed[r]
        found[r] = paired.paired_arrays(fresh[0], fresh[1], rate=rate, exact=exact)[3] < alpha
    return printed, found


@pytest.mark.parametrize(
    ("population", "seeds", "exact"),
    [
        (CorrelatedContinuous(0.3, 0.5, 0.5), 3, False),
        (CorrelatedContinuous(0.3, 0.5, 0.5), 5, False),
        (CorrelatedContinuous(0.1, 0.5, 0.8), 10, True),
        (Correlated(0.5, 0.3, 1.0, 0.5), 8, False),
    ],
    ids=str,
)
def test_the_printed_detectable_difference_is_found_at_least_75_percent_of_the_time(population, seeds, exact):
    """A family of 4 questions (4 encodings against a reference, paired by seed, Holm: each at 1.25% at
    its first step): the difference printed from the table's own pooled spread of paired differences
    (its upper 70% bound) is, as the true difference of a fresh pair, found at 1.25% at least 75% of
    the time (400 replicates)."""
    printed, found = _printed_and_found(
        population, seeds=seeds, questions=4, reps=400, exact=exact, rng=np.random.default_rng(seeds)
    )
    assert np.all(np.isfinite(printed))
    assert found.mean() >= 0.75, found.mean()


def test_the_old_detectable_difference_is_found_far_less_often_after_the_correction():
    """What the tables printed before (the median of the rows' SDs, Welch at 5%, before the correction),
    read at the level a family of 4 applies, paired: found far less often than the 80% it stated."""
    population = CorrelatedContinuous(0.3, 0.5, 0.0)  # no shared seed effect: pairing buys nothing
    rng = np.random.default_rng(3)
    printed, found = _printed_and_found(
        population, seeds=3, questions=4, reps=400, exact=False, rng=rng, old=True
    )
    assert found.mean() < 0.5, found.mean()
