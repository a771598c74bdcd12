"""posenc.extend.evidence: exact retrieval intervals, McNemar's paired test, the paired test over
documents, and the effective context length, each checked against what it states by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.core.errors import PosencError
from posenc.extend import evidence as ev

pytest.importorskip("scipy")

LENGTHS = (2048, 4096, 8192, 16384)
DRAWS = 2000


def test_a_rate_has_the_clopper_pearson_interval_never_zero_wide_at_the_ends():
    from scipy.stats import binomtest

    cell = ev.rate([True] * 17 + [False] * 3)
    expected = binomtest(17, 20).proportion_ci(confidence_level=0.95, method="exact")
    assert (cell.successes, cell.n, cell.value) == (17, 20, 0.85)
    assert (cell.low, cell.high) == pytest.approx((expected.low, expected.high))
    full = ev.rate([1] * 20)
    assert full.high == 1.0 and full.low == pytest.approx(0.025 ** (1 / 20))  # (alpha/2)^(1/n)
    assert ev.rate([0] * 20).high == pytest.approx(1 - 0.025 ** (1 / 20))


def test_the_rate_interval_covers_at_its_stated_level():
    rng = np.random.default_rng(0)
    for p, n in ((0.9, 20), (0.5, 24), (0.97, 40)):
        hits = rng.binomial(n, p, size=DRAWS)
        covered = [
            ev.rate([1] * k + [0] * (n - k)).low <= p <= ev.rate([1] * k + [0] * (n - k)).high for k in hits
        ]
        assert np.mean(covered) >= 0.94, (p, n, np.mean(covered))


def test_outcomes_must_be_right_or_wrong_and_the_same_prompts_for_a_paired_test():
    with pytest.raises(PosencError, match="outcomes must be right/wrong"):
        ev.rate([0.5, 1.0])
    with pytest.raises(PosencError, match="non-empty"):
        ev.rate([])
    with pytest.raises(PosencError, match="same prompts"):
        ev.mcnemar([1, 0, 1], [1, 0])
    with pytest.raises(PosencError, match="confidence"):
        ev.rate([1, 0], confidence=1.5)


def test_mcnemar_reads_only_the_discordant_prompts():
    from scipy.stats import binomtest

    first = [1] * 10 + [1] * 7 + [0] * 1 + [0] * 2
    second = [1] * 10 + [0] * 7 + [1] * 1 + [0] * 2
    paired = ev.mcnemar(first, second)
    assert (paired.both, paired.first_only, paired.second_only, paired.neither) == (10, 7, 1, 2)
    assert paired.p_value == pytest.approx(binomtest(7, 8, 0.5).pvalue)
    assert ev.mcnemar([1, 0, 1], [1, 0, 1]).p_value == 1.0  # nothing discordant: no evidence either way


def test_mcnemar_holds_its_error_rate_when_two_scalings_are_alike_and_finds_a_real_gap():
    """Prompts of varying difficulty, both scalings with the same chance on each: the exact test
    rejects at most 5% of the time at p < 0.05; with a 30-point gap on 40 prompts it mostly rejects."""
    rng = np.random.default_rng(1)
    rejected, found = 0, 0
    for _ in range(DRAWS // 2):
        chance = rng.uniform(0.3, 1.0, size=40)
        a, b = rng.random(40) < chance, rng.random(40) < chance
        rejected += ev.mcnemar(a, b).p_value < 0.05
        worse = rng.random(40) < chance - 0.3
        found += ev.mcnemar(a, worse).p_value < 0.05
    assert rejected / (DRAWS // 2) <= 0.05
    assert found / (DRAWS // 2) >= 0.8


def test_the_paired_test_over_documents_is_the_t_test_of_the_differences():
    from scipy.stats import ttest_rel

    a = [2.31, 2.52, 2.44, 2.60, 2.38]
    b = [2.29, 2.47, 2.43, 2.55, 2.31]
    paired = ev.paired_documents(a, b)
    assert paired.p_value == pytest.approx(ttest_rel(a, b).pvalue)
    assert paired.ratio == pytest.approx(math.exp(np.mean(np.subtract(a, b))))
    assert paired.low < paired.ratio < paired.high
    with pytest.raises(PosencError, match="same documents"):
        ev.paired_documents([2.0, 2.1], [2.0])


def _true_length(d: list[float], margin: float) -> int | None:
    best = None
    for length, value in zip(LENGTHS, d):
        if value < -margin - 1e-12:
            break
        best = length
    return best


def _retrieval_coverage(p: list[float], r: float, n: int, margin: float, seed: int) -> tuple[float, float]:
    """(share of draws with low <= E <= high, share with the point estimate == E)."""
    rng = np.random.default_rng(seed)
    truth = _true_length([x - r for x in p], margin)
    covered = exact = 0
    for _ in range(DRAWS):
        reference = rng.random(n) < r
        outcomes = {length: rng.random(n) < q for length, q in zip(LENGTHS, p)}
        got = ev.retrieval_effective_length(outcomes, reference=reference, margin=margin)
        order = [None, *LENGTHS]
        covered += order.index(got.low) <= order.index(truth) <= order.index(got.high)
        exact += got.length == truth
    return covered / DRAWS, exact / DRAWS


@pytest.mark.parametrize(
    "p, r, margin",
    [
        ([0.95, 0.9, 0.85, 0.6], 0.95, 0.10),  # the third length is exactly at the threshold: it holds
        ([0.95, 0.84, 0.84, 0.5], 0.95, 0.10),  # just below it from the second length on
        ([0.9, 0.9, 0.9, 0.9], 0.9, 0.10),  # every length holds
        ([0.5, 0.5, 0.4, 0.3], 0.95, 0.10),  # not even the shortest
    ],
)
def test_the_effective_length_interval_covers_the_true_length_at_its_stated_level(p, r, margin):
    covered, exact = _retrieval_coverage(p, r, 30, margin, seed=len(p) + int(100 * p[1]))
    assert covered >= 0.95 - 0.01, covered  # 2,000 draws: one standard error is 0.5 point
    if p[1] in (0.9, 0.84):  # near a threshold the point estimate alone is often wrong; the interval is not
        assert exact < covered


def test_the_coverage_check_catches_an_interval_without_the_reference_noise_and_the_multiplicity():
    """Ten lengths all exactly at the threshold (every one holds): an interval that reads each length
    at 95% two-sided and takes the reference's rate as known says "fails" somewhere in a quarter of
    the draws; the stated one (Bonferroni over the lengths, the reference's own bound) does not."""
    rng = np.random.default_rng(3)
    lengths = [1024 * (i + 1) for i in range(10)]
    r, margin, n = 0.9, 0.2, 30

    def naive_high(outcomes, reference):
        best = None
        for length in lengths:
            if ev.upper_bound(int(np.sum(outcomes[length])), n, 0.025) - np.mean(reference) < -margin:
                break
            best = length
        return best

    stated = naive = 0
    for _ in range(DRAWS):
        reference = rng.random(n) < r
        outcomes = {length: rng.random(n) < r - margin for length in lengths}
        stated += (
            ev.retrieval_effective_length(outcomes, reference=reference, margin=margin).high == lengths[-1]
        )
        naive += naive_high(outcomes, reference) == lengths[-1]
    assert stated / DRAWS >= 0.95
    assert naive / DRAWS < 0.85


def test_the_effective_length_shows_what_twenty_prompts_decide():
    """All right everywhere: 20 prompts cannot show a length within 10 points (the one-sided bound of
    20/20 at 1.25% is 0.80), 50 can (0.92); a collapse to 0/20 is shown at once."""
    perfect = {length: [1] * 20 for length in LENGTHS}
    twenty = ev.retrieval_effective_length(perfect, margin=0.1)
    assert (twenty.length, twenty.low, twenty.high) == (
        16384,
        2048,
        16384,
    )  # the own shortest holds by definition
    fifty = ev.retrieval_effective_length({length: [1] * 50 for length in LENGTHS}, margin=0.1)
    assert fifty.low == 16384
    collapsed = ev.retrieval_effective_length({**perfect, 8192: [0] * 20, 16384: [0] * 20}, margin=0.1)
    assert (collapsed.length, collapsed.high) == (4096, 4096)
    assert collapsed.lengths[2].high < -0.1 and "Bonferroni over 4 lengths" in collapsed.method


def test_the_perplexity_effective_length_covers_at_its_stated_level():
    """Ten documents whose losses vary by document and by length; the fourth length is 10% worse
    than allowed, the third exactly at 1.09x (inside the 1.1x margin)."""
    rng = np.random.default_rng(5)
    margin = 1.1
    shift = [-0.05, 0.0, math.log(1.09), math.log(1.1) + 0.1]
    truth = _true_length([-s for s in shift], math.log(margin))
    assert truth == 8192
    covered = exact = 0
    for _ in range(DRAWS):
        base = rng.normal(2.5, 0.3, size=10)
        losses = {length: base + s + rng.normal(0, 0.04, size=10) for length, s in zip(LENGTHS, shift)}
        got = ev.perplexity_effective_length(losses, reference=base, margin=margin)
        order = [None, *LENGTHS]
        covered += order.index(got.low) <= order.index(truth) <= order.index(got.high)
        exact += got.length == truth
    assert covered / DRAWS >= 0.94, covered / DRAWS
    assert exact < covered


def test_effective_length_inputs_are_checked_by_name():
    with pytest.raises(PosencError, match="margin"):
        ev.retrieval_effective_length({2048: [1, 0]}, margin=2.0)
    with pytest.raises(PosencError, match="margin"):
        ev.perplexity_effective_length({2048: [2.0, 2.1]}, margin=0.9)
    with pytest.raises(PosencError, match="lengths"):
        ev.retrieval_effective_length({}, margin=0.1)
    with pytest.raises(PosencError, match="same 2 documents"):
        ev.perplexity_effective_length({2048: [2.0, 2.1], 4096: [2.0]}, margin=1.1)
