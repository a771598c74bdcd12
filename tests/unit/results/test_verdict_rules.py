"""The rules claims' verdicts follow (posenc.results.verdict_rules): scale labels on every verdict, no
agreement from a floor tie, a family of claims corrected together (simulated under the null)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.stat_populations import Binary, Continuous

from posenc.core.errors import PosencError
from posenc.results import stats
from posenc.results import verdict_rules as rules

BILLION = {"parameters": 1e9, "train_length": None, "steps": None}
RUN = {"parameters": 166e3, "train_length": 64, "steps": 900}


def test_an_agreement_at_a_smaller_scale_says_so():
    label = rules.scale_label(rules.AGREES, BILLION, RUN)
    assert label.startswith("agrees at a smaller scale than the paper's")
    assert (
        "paper: 1B parameters" in label and "run: 166k parameters, trained at length 64, 900 steps" in label
    )
    assert rules.scale_label(rules.DISAGREES, BILLION, RUN).startswith("disagrees at a smaller scale")
    assert rules.scale_label(rules.AGREES, {"parameters": 200e3}, RUN) == ""  # within twice the run's
    assert rules.scale_label(rules.AGREES, None, RUN) == ""


def test_a_tie_at_a_floor_is_one_whatever_the_converged_seeds():
    """learned 2/3 against learned[concat] 3/3, both 0 of 384: a tie (the old check needed equal shapes)."""
    assert rules.floor_tie(np.zeros((2, 384)), np.zeros((3, 384)))
    assert rules.floor_tie(np.ones((3, 10)), np.ones((5, 10)))
    assert not rules.floor_tie(np.zeros((3, 10)), np.ones((3, 10)))
    assert not rules.floor_tie(np.full((3, 10), 0.5), np.full((3, 10), 0.5))  # no floor: a test decides
    b = np.zeros((3, 10))
    b[1, 4] = 1
    assert not rules.floor_tie(np.zeros((2, 10)), b) and not rules.floor_tie(np.zeros((0, 10)), b)


@pytest.mark.parametrize("rate", [True, False])
def test_a_cells_one_sided_p_matches_its_interval_where_the_seeds_spread_most(rate):
    """Where the seeds' part of a cell's variance is the larger (its interval then has seeds - 1 degrees of
    freedom), the one-sided p-value at the 95% interval's bound is 2.5%: the family's verdicts read the
    same evidence as the intervals did, only corrected."""
    rng = np.random.default_rng(3)
    population = Binary(0.3, 1.0, 0.0) if rate else Continuous(0.5, 0.1)
    values = population.draw(rng, 1, 4, 64)[0, 0]
    assert float(stats.mean_variance(values)[2]) == 3  # the seeds' df
    _, low, high = stats.interval(values, rate=rate)
    assert rules.threshold_p(values, low, ">=", rate=rate)[0] == pytest.approx(0.025, abs=1e-6)
    assert rules.threshold_p(values, high, "<=", rate=rate)[0] == pytest.approx(0.025, abs=1e-6)
    p_for, p_against = rules.threshold_p(values, high, ">=", rate=rate)
    assert p_against == pytest.approx(0.025, abs=1e-6) and p_for == pytest.approx(0.975, abs=1e-6)


@pytest.mark.parametrize(
    "population", [Continuous(0.2, 0.5), Continuous(0.0, 0.5), Binary(0.5, 0.5, 1.0)], ids=str
)
def test_a_cells_p_value_keeps_its_level_far_in_the_tail(population):
    """A cell whose true mean is on the line, 3 seeds: p < 0.05 and p < 0.002 (where a correction over
    22 claims reads) at most at those rates. With Satterthwaite's df (the cell interval's, which rise
    where the examples' part looks the larger) p < 0.002 came 3.7x too often (seed SD 0.2, 20 files)."""
    rng = np.random.default_rng(8)
    rate = population.kind == "binary"
    truth = population.truth()
    cells = population.draw(rng, 3000, 3, 128 if rate else 20)[:, 0]
    p = np.array([2 * min(rules.threshold_p(cell, truth, ">=", rate=rate)) for cell in cells])
    for level in (0.05, 0.002):
        assert np.mean(p < level) <= level + 2 * math.sqrt(level * (1 - level) / len(p)), (
            level,
            np.mean(p < level),
        )


def test_a_cell_at_a_floor_is_judged_as_its_interval_bound():
    """At exactly 0 a cell reads as its interval does (one error more): p 2.5% at the interval's bound,
    and never stronger evidence than the cell with one example of one seed right."""
    zeros = np.zeros((3, 128))
    edge = stats.interval(zeros, rate=True)[2]
    assert rules.threshold_p(zeros, edge, "<=", rate=True)[0] == pytest.approx(0.025, rel=1e-3)
    one = zeros.copy()
    one[0, 0] = 1.0
    assert rules.threshold_p(zeros, 0.5, "<=", rate=True) == rules.threshold_p(one, 0.5, "<=", rate=True)
    assert rules.threshold_p(zeros, 0.5, "<=", rate=True)[0] < 0.02
    assert rules.threshold_p(zeros, 0.5, ">=", rate=True)[0] > 0.98
    with pytest.raises(PosencError, match="side must be"):
        rules.threshold_p(zeros, 0.5, ">", rate=True)
    assert all(math.isnan(p) for p in rules.threshold_p(zeros[:1], 0.5, "<=", rate=True))


def test_holm():
    assert rules.holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx(
        [0.03, 0.06, 0.06, math.nan], nan_ok=True
    )
    assert rules.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert rules.holm([]) == []


def test_family_verdicts():
    judged = [
        rules.Judged(0.001, 0.999),
        rules.Judged(0.999, 0.0001),
        rules.Judged(0.015, 0.985),  # agrees alone at 95% (an interval wholly above the line) ...
        rules.Judged(0.98, 0.02),
        rules.Judged(0.5, 0.5, uninformative=True),
        rules.Judged(math.nan, math.nan, measured=False),
    ]
    got = [v for v, _ in rules.family_verdicts(judged)]  # ... not among four (Holm: 0.06)
    assert got == [rules.AGREES, rules.DISAGREES, rules.INCONCLUSIVE, rules.INCONCLUSIVE, rules.UNINFORMATIVE,
                   rules.INCONCLUSIVE]  # fmt: skip
    assert rules.family_verdicts(judged)[2][1] == pytest.approx(0.06)


def test_a_family_of_claims_at_their_lines_is_decided_at_most_5_percent_of_the_time():
    """22 claims (quick's count), each a cell whose true mean lies exactly on its line, 3 seeds: Holm over
    the family decides some claim at most 5% of the time; each interval alone (the old rule) decides
    some claim far more often."""
    reps, claims = 500, 22
    population = Continuous(0.2, 0.5)
    rng = np.random.default_rng(22)
    truth = population.truth()
    family, alone = [], []
    for _ in range(reps):
        cells = population.draw(rng, 1, 3, 20, arms=claims)[0]
        judged = [rules.Judged(*rules.threshold_p(cell, truth, ">=", rate=False)) for cell in cells]
        family.append(any(v != rules.INCONCLUSIVE for v, _ in rules.family_verdicts(judged)))
        _, low, high = stats.interval(cells, rate=False)  # the old rule: each 95% interval alone
        alone.append(bool(np.any((low > truth) | (high < truth))))
    assert np.mean(family) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps), np.mean(family)
    assert np.mean(alone) > 0.4, np.mean(alone)
