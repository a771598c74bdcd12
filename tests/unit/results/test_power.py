"""Power (``posenc.results.power``, read through ``posenc.results.stats``) checked by simulation: how
often the Welch test over seeds detects the difference the summary calls detectable (with 2000
replicates, the standard error of an 80% power is 0.9 points), and what more seeds buy."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.results import stats

REPS = 2000


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
