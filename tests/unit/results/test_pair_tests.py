"""The tests between rows and their correction (``posenc.results.pair_tests``, read through
``posenc.results.stats``) checked by simulation against known populations (tests/stat_populations.py).

Family-wise error: how often a column, and a table of ten columns, of identical encodings has any
pair called different after the Benjamini-Hochberg correction (under this complete null the false
discovery rate, which the correction holds at 5%, is the family-wise error); asserted at most 5%
within two Monte-Carlo standard errors (with 1000 replicates, 0.69 points of a 5% error rate). The
paired test keeps its level far in the tail; with one unit per seed the tests are scipy's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sp
from tests.stat_populations import (
    Binary,
    Continuous,
    familywise_error,
    table_familywise_error,
)

from posenc.results import stats


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
