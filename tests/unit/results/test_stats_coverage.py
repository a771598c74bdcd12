"""The benchmark's statistics checked by simulation against known populations (stat_populations.py).

Each check draws cells exactly as the benchmark's are laid out (seeds x examples, the examples
shared by every seed and encoding) from a population whose true value is known, and counts:

- coverage: how often the stated 95% interval contains the true value, at 3, 5 and 10 seeds, for
  binary examples with seed and example effects on the logit scale and for continuous per-file
  values; asserted within [93%, 97.5%] for the designs the docs call covered;
- family-wise error: how often a column, and a table of ten columns, of identical encodings has
  any pair called different after the Benjamini-Hochberg correction (under this complete null the
  false discovery rate, which the correction holds at 5%, is the family-wise error); asserted at
  most 5% within two Monte-Carlo standard errors;
- power: how often the Welch test over seeds detects the difference the summary calls detectable.

Fixed generator seeds make every number deterministic. Monte-Carlo error: with 2000 replicates
the standard error of a 95% coverage is 0.49 points (the band is -4 / +5 of them); with 1000, of a
5% error rate 0.69 points; with 2000, of an 80% power 0.9 points.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sp
from tests.stat_populations import (
    ASSERTED,
    REPORTED,
    Binary,
    Continuous,
    Windowed,
    coverage,
    familywise_error,
    table_familywise_error,
)

from posenc.results import stats

REPS = 2000


def _interval(population):
    if isinstance(population, Windowed):  # the LM: windows reduced to their files, as the tables do
        return lambda values: stats.interval(
            stats.by_file(values, values.shape[-1] // population.windows), rate=False
        )
    rate = isinstance(population, Binary)
    return lambda values: stats.interval(values, rate=rate)


@pytest.mark.parametrize("seeds", [3, 5, pytest.param(10, marks=pytest.mark.slow)])
def test_intervals_cover_their_stated_level(seeds):
    """Every asserted design: coverage of the 95% interval within [93%, 97.5%]."""
    got = {
        f"{population} x {units}": coverage(
            population, _interval(population), seeds=seeds, units=units, reps=REPS, seed=seeds
        )
        for population, units in ASSERTED
    }
    outside = {k: round(100 * v, 1) for k, v in got.items() if not 0.93 <= v <= 0.975}
    assert not outside, outside


@pytest.mark.parametrize("seed_sd", [0.0, 0.03])
def test_windows_of_one_file_are_not_independent_units(seed_sd):
    """The LM scored window by window: where the files' spread is the larger part (seeds of an LM
    agree to a few hundredths of a bit per byte; its files differ by tenths), counting each window as
    a unit (as if 320 independent samples of text) covers far below 95%; the file as the unit covers
    at its level."""
    population = Windowed(seed_sd, 0.3)
    by_window = coverage(
        population, lambda v: stats.interval(v, rate=False), seeds=3, units=20, reps=REPS, seed=7
    )
    by_file = coverage(population, _interval(population), seeds=3, units=20, reps=REPS, seed=7)
    assert by_window < 0.85 and 0.93 <= by_file <= 0.975, (by_window, by_file)


@pytest.mark.slow
def test_designs_beyond_reach_keep_the_level_the_docs_state():
    """Seed outcomes near all-or-nothing or wide seed spreads at a floor: at least 87% (docs say
    88-93% for these; a percentile bootstrap over 3 seeds gets 70-84% on them)."""
    for population, units in REPORTED:
        for seeds in (3, 10):
            c = coverage(population, _interval(population), seeds=seeds, units=units, reps=REPS, seed=seeds)
            assert c >= 0.87, (str(population), seeds, c)


@pytest.mark.parametrize(
    ("population", "units", "seeds"),
    [
        (Binary(0.5, 0.5, 1.0), 256, 3),
        (Binary(0.8, 0.0, 1.0), 256, 3),
        (Binary(0.2, 1.0, 0.0), 256, 5),
        (Continuous(0.1, 0.5), 64, 3),
    ],
    ids=str,
)
def test_a_column_of_identical_encodings_is_called_different_at_most_5_percent_of_the_time(
    population, units, seeds
):
    """Eight identical encodings (28 pairs), each pair by the column's test, corrected together."""
    rate = isinstance(population, Binary)

    def compare(a, b):
        return stats.compare_arrays(a, b, rate=rate)[3]

    reps = 1000
    error, per_pair = familywise_error(
        population, compare, stats.adjust, rows=8, seeds=seeds, units=units, reps=reps, seed=seeds
    )
    assert error <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps), error
    assert per_pair <= 0.055, per_pair  # each test alone holds its 5% too


def test_a_table_of_identical_encodings_is_called_different_at_most_5_percent_of_the_time():
    """Ten columns of five identical encodings (100 pairs), as a README table has them: corrected
    together, the table shows any significant pair at most 5% of the time (measured 1.5%; 6.3%
    before the test kept the seeds' degrees of freedom, its p-values far in the tail too small);
    corrected column by column (each column's false discovery rate at 5%), one such table in five
    would show one."""

    def compare(a, b):
        return stats.compare_arrays(a, b, rate=True)[3]

    reps = 1000
    together, alone = table_familywise_error(
        Binary(0.5, 0.5, 1.0), compare, stats.adjust, columns=10, rows=5, seeds=3, units=128, reps=reps
    )
    assert together <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps), together
    assert alone > 0.15, alone  # why the table is corrected as one family


def test_a_table_corrects_every_column_together(monkeypatch):
    """stats.table_separation adjusts the p-values of all its columns as one family: a pair at
    p = 0.03 alone in its column is significant on its own, not among 20 null pairs of the table."""
    data = {"a": {0: np.zeros(4), 1: np.ones(4)}, "b": {0: np.zeros(4), 1: np.ones(4)}}
    found = {
        ("copy", "em_2x"): ([0.03], data, {"a": "a", "b": "b"}, ["a > b"]),
        ("copy", "em_4x"): ([0.5 + i / 100 for i in range(20)], data, {"a": "a", "b": "b"}, ["a > b"] * 20),
    }
    monkeypatch.setattr(
        stats, "column_tests", lambda records, task, column, labels=None: found[(task, column)]
    )
    alone = stats.separation([], "copy", "em_2x")
    table = stats.table_separation([], list(found))
    assert alone.significant == 1 and alone.pairs == 1 and alone.significant_pairs == ["a > b"]
    assert table[("copy", "em_2x")].significant == 0 and table[("copy", "em_4x")].pairs == 20


@pytest.mark.parametrize("rate", [False, True], ids=["per-file values", "binary examples"])
def test_a_paired_test_keeps_its_level_far_in_the_tail(rate):
    """One model evaluated two ways alike (rope and rope[dynamic:4] where the scaling changes
    nothing): p < 0.005 at most at that rate (a correction over a table reads p-values that small).
    Before the paired test kept the seeds' degrees of freedom, 1.4x (files) and 2.1x (examples)."""
    from scipy.special import expit

    rng = np.random.default_rng(11)
    reps, units = 20000, (256 if rate else 20)
    seed = rng.normal(0.0, 0.3, (reps, 3, 1))
    unit = rng.normal(0.0, 0.5, (reps, 1, units))

    def evaluation():
        if rate:
            return (rng.random((reps, 3, units)) < expit(seed + unit)).astype(float)
        return 2.0 + seed + unit + 0.3 * rng.normal(size=(reps, 3, units))

    p = stats.compare_arrays(evaluation(), evaluation(), rate=rate, paired=True)[3]
    assert np.mean(p < 0.005) <= 0.005 * 1.25, np.mean(p < 0.005) / 0.005


def test_the_test_is_welch_and_paired_t_where_the_examples_add_nothing():
    """One unit per seed: exactly scipy's Welch test and paired t test."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.0, 1.0, 4), rng.normal(1.0, 2.0, 3)
    diff, low, high, p = stats.compare_arrays(a[:, None], b[:, None], rate=False)
    welch = sp.ttest_ind(a, b, equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert (diff, low, high, p) == pytest.approx((a.mean() - b.mean(), ci.low, ci.high, welch.pvalue))
    c = b[:3] + rng.normal(0, 0.1, 3)
    paired = stats.compare_arrays(b[:, None], c[:, None], rate=False, paired=True)[3]
    assert paired == pytest.approx(sp.ttest_rel(b, c).pvalue)


def test_a_floor_against_a_ceiling_is_significant_but_never_infinitely_so():
    zeros, ones = np.zeros((3, 64)), np.ones((3, 64))
    _, _, _, p = stats.compare_arrays(ones, zeros, rate=True)
    assert 0 < p < 0.01
    assert stats.compare_arrays(zeros, zeros, rate=True)[3] == 1.0  # a tie
    assert stats.min_permutation_p(3, 3) == pytest.approx(0.1)  # no exact permutation test can
    assert stats.min_permutation_p(4, 4) < 0.05  # 4 seeds per side is the fewest that can


@pytest.mark.parametrize("seeds", [3, 12])
def test_the_detectable_difference_is_detected_80_percent_of_the_time(seeds):
    """Seed means N(0, 1) against N(d, 1), d = stats.detectable(1, seeds): Welch's test rejects at
    5% in 80% of replicates (within 3 Monte-Carlo standard errors)."""
    d = stats.detectable(1.0, seeds)
    rng = np.random.default_rng(seeds)
    a = rng.normal(0.0, 1.0, (REPS, seeds, 1))
    b = rng.normal(d, 1.0, (REPS, seeds, 1))
    rejected = np.mean(stats.compare_arrays(a, b, rate=False)[3] < 0.05)
    assert abs(rejected - 0.8) < 3 * np.sqrt(0.8 * 0.2 / REPS), rejected


def test_twelve_seeds_cut_the_detectable_difference_to_about_a_third_of_three():
    """What docs/benchmark.md says 12 seeds buy over 3 (not "half"): detectable 3.5 -> 1.2 seed
    standard deviations (x0.34); and the seeds a difference of one seed SD needs."""
    assert stats.detectable(1.0, 3) == pytest.approx(3.52, abs=0.02)
    assert stats.detectable(1.0, 12) / stats.detectable(1.0, 3) == pytest.approx(0.34, abs=0.01)
    assert stats.seeds_needed(1.0, 1.0) == 17
    assert stats.seeds_needed(1.0, 0.0) == 2 and stats.seeds_needed(0.01, 1.0) is None
