"""Per-cell statistics of benchmark records: means, 95% intervals, tests between rows, power.

A *cell* is one encoding variant (label) x task x column (e.g. ``copy`` / ``em_2x``, exact match
in the 2x length bucket). Its runs are the label's seeds; only runs that converged in-distribution
count (a run that did not is reported, never averaged in). Each converged run contributes the same
*units*: the evaluation examples of the bucket's lengths (tasks; one value per example) or the LM's
test files, so a cell's data is a seeds x units array, and the units are shared (every seed and
every encoding scores the same examples or bytes).

**The seed is the unit.** A training run is one draw; the examples it is scored on are another
source of spread, shared by all seeds. Every interval and test here reads the two-way crossed
random-effects decomposition of the array of seeds x units (method of moments, as in a two-way ANOVA
without replication): the variance of the cell mean is the spread of the seed means
plus the spread of the shared examples' means
(what a fresh set of examples would move), with Satterthwaite's degrees of freedom, so with 3
seeds the t quantile has about 2 degrees of freedom (4.3, not 1.96).

- **Interval of a cell** (:data:`METHOD`): a t interval of the mean with that variance; for rates
  (exact match, token accuracy: values in [0, 1]) on the logit scale (the quasi-binomial interval,
  so that it stays inside [0, 1] and stretches away from a floor or ceiling), and at exactly 0% or
  100% (every seed and example) the Clopper-Pearson bound for the examples
  (``scipy.stats.binomtest``), never zero width. Seeds whose means tie exactly although their
  examples differ (few errors: 253 of 256 on each seed) show no spread; the examples' noise stands
  in for it there. With one converged seed there is no interval.
- **Test between two rows** (:data:`TEST`): Welch's t test over seeds with the examples' variance
  of the difference added (it is ``scipy.stats.ttest_ind(equal_var=False)`` on the seed means when
  that part is zero) and Welch's degrees of freedom of the seed parts alone: the examples' part of
  a difference (what is left of the shared examples after they cancel: mostly a noisy zero) widens
  the interval but never raises the df, which made p-values far in the tail, where a correction
  over a whole table reads them, too small; two rows that are one set of trained runs evaluated two ways
  (``rope`` and ``rope[dynamic:4]``) are compared by a paired t test over seeds on the per-seed
  differences. A row at 0% or 100% on every seed and example has the variance of its Clopper-Pearson
  bound, so a difference from a floor is never "infinitely" significant.
- **Multiplicity** (:data:`CORRECTION`): the tests of a table (every pair of every column, the
  columns a table leaves out for having no significant pair included), or of one claim, are
  corrected together by Benjamini-Hochberg (``scipy.stats.false_discovery_control``).
- **Power**: the smallest difference a column detects with 80% power at its seeds, from the
  observed seed variance (the Welch test's power: Monte Carlo up to 10 seeds, the noncentral t
  past them), and how many seeds a target difference needs.

How well this holds is measured, not assumed: ``tests/unit/results/test_stats_coverage.py`` simulates known
populations (binary examples with seed and example effects on the logit scale, continuous
per-example values) at 3, 5 and 10 seeds and checks the coverage of the 95% intervals and the
error rate of the corrected tests; docs/benchmark.md gives the table, including the designs it
cannot reach (seed outcomes so spread that they are nearly all-or-nothing).

Columns:

| column | unit | statistic |
|---|---|---|
| ``em_in`` / ``em_1.25x`` / ``em_1.5x`` / ``em_2x`` / ``em_4x`` | one evaluation example | mean exact match (greedy decoding; the teacher-forced pass where a record has no free-running scores) |
| ``pre_*`` | one evaluation example | mean share of the answer's tokens right before the first error, free-running |
| ``tok_*`` | one evaluation example | mean teacher-forced answer-token accuracy (the answer's tokens, EOS left out) |
| ``bpb_train`` / ``bpb_2x`` / ``bpb_4x`` | one test file (its windows at L_train, 2x, 4x averaged) | mean bits per byte |
| ``ratio_2x`` / ``ratio_4x`` | one test file (the same bytes at m L and at L) | mean over seeds of exp(mean loss at mL - mean loss at L) |

The LM scores every file of its test split over the same bytes, window by window; a file's windows
share its style and vocabulary, so the file, not the window, is the unit (records written before the
test split, one stretch of validation text, keep the window: m windows at L per window at m L). For
a ratio, the unit values are the linearised (delta-method) contributions of each file to the
ratio of its run, so the same seeds x units code serves it.

:func:`cells` is the public entry point: every cell of a results directory (or of a list
of records) with its mean, interval, seeds and convergence; :func:`cell` computes one,
:func:`pair_test` compares two, :func:`separation` summarises a column.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.records.store import ResultStore
from posenc.results.lengths import in_range as lengths_in_range

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
#: The power a column's minimum detectable difference is computed for.
POWER = 0.8
METHOD = (
    "95% t interval over seeds (seeds x examples variance: the seed means' spread plus the shared "
    "examples', Satterthwaite df; seeds tied exactly: the examples' noise; rates on the logit scale, "
    "Clopper-Pearson at 0% / 100%); "
    "converged runs only"
)
TEST = (
    "Welch t test over seeds (examples' variance added, Welch's degrees of freedom of the seed means; "
    "paired t over seeds, seeds - 1 degrees of freedom, for one model evaluated two ways)"
)
CORRECTION = "Benjamini-Hochberg over every pair of every column of the table"
#: The difference the summary asks "how many seeds would detect it?" for: 10 points for rates,
#: 0.05 for the LM's bits/byte and perplexity ratios.
TARGET = {"rate": 0.10, "lm": 0.05}
#: Length buckets relative to the trained sequence length in tokens (posenc.results.lengths): (name,
#: lo, hi] x the longest training row. They do not overlap, so a row shows where an encoding falls
#: off (a bucket with no evaluation length has no cell).
BUCKETS = (("in", 0.0, 1.0), ("1.25x", 1.0, 1.25), ("1.5x", 1.25, 1.5), ("2x", 1.5, 2.0), ("4x", 2.0, 4.0))
#: Every length past the training one up to 4x (what rankings of "unseen lengths" use).
UNSEEN = ("out", 1.0, 4.0)
#: Every length past the training one up to 2x (the NoPE paper's test set: L < n <= 2L).
UP_TO_2X = ("to2x", 1.0, 2.0)
#: What a task column may read: the buckets and the two wider ranges.
RANGES = (*BUCKETS, UNSEEN, UP_TO_2X)
TASK_COLUMNS = tuple(f"{m}_{b}" for m in ("em", "pre", "tok") for b, _, _ in BUCKETS)
LM_COLUMNS = ("bpb_train", "bpb_2x", "bpb_4x", "ratio_2x", "ratio_4x")


def _scipy_stats() -> Any:
    try:
        from scipy import stats as scipy_stats  # optional dependency: the cli extra
    except ImportError:
        raise PosencError(
            "the benchmark's statistics need scipy: pip install 'posenc[cli]' (bash scripts/setup.sh does)"
        ) from None
    return scipy_stats


@dataclass(frozen=True)
class Cell:
    """One summary cell. ``mean``/``low``/``high`` are NaN when no run converged."""

    mean: float
    low: float
    high: float
    n: int  # converged runs (seeds) averaged
    runs: int  # runs of this label and task (converged or not)
    units: int  # evaluation units per run (examples or windows)

    @property
    def converged(self) -> bool:
        """True when every run of the cell converged (and there is at least one)."""
        return self.runs > 0 and self.n == self.runs

    @property
    def measured(self) -> bool:
        return self.n > 0 and not math.isnan(self.mean)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"converged": self.converged}


#: Appended to the label of a scaling evaluated outside its regime (PI or YaRN without the
#: fine-tune their papers do): a cell of its own, never averaged with the fine-tuned ones.
NOT_FINETUNED = "no fine-tune"


def run_label(record: dict[str, Any], variant: str) -> str:
    """The table label of one evaluation of a run: ``rope``, ``rope[dynamic:4]``, or
    ``rope[linear:4, no fine-tune]`` for a scaling evaluated outside its regime."""
    if variant == "default":
        return record["label"]
    method = record["result"]["eval"][variant].get("method") or {}
    return (
        f"{record['label']}[{variant}, {NOT_FINETUNED}]"
        if method.get("outside_regime")
        else f"{record['label']}[{variant}]"
    )


def converged(record: dict[str, Any]) -> bool:
    return bool(record["result"]["train"].get("converged", False))


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _bucket_lengths(ev: dict[str, Any], spec: dict[str, Any], bucket: str) -> list[int]:
    lo, hi = next((lo, hi) for name, lo, hi in RANGES if name == bucket)
    return lengths_in_range(ev, spec, lo, hi) or []


def units(record: dict[str, Any], variant: str, column: str) -> Any:
    """The per-unit values of one run for ``column``: a 1-D array, or for ratios a pair of
    arrays (loss at m L per block, loss at L per block); None when the run has no such cell."""
    ev = record["result"]["eval"].get(variant)
    if ev is None:
        return None
    spec = record["spec"]
    if spec["task"] == "lm":
        return _lm_units(ev, spec, column)
    metric, _, bucket = column.partition("_")
    if metric not in ("em", "pre", "tok") or bucket not in {b for b, _, _ in RANGES}:
        return None
    picked = _bucket_lengths(ev, spec, bucket)
    if not picked:
        return None
    per = ev["per_example"]
    if metric == "pre":  # free-running correct prefix, as a share of the answer
        if "free_prefix" not in per:  # a record without free-running decoding
            return None
        prefix = np.concatenate([np.asarray(per["free_prefix"][i], dtype=float) for i in picked])
        return prefix / np.concatenate([np.asarray(per["answer_tokens"][i], dtype=float) for i in picked])
    key = {"em": "free_exact_match" if "free_exact_match" in per else "exact_match", "tok": "answer_accuracy"}
    rows = per.get(key[metric])
    if rows is None:  # a record written before answer-token accuracy was kept
        return None
    return np.concatenate([np.asarray(rows[i], dtype=float) for i in picked])


def by_file(values: Any, files: int) -> np.ndarray:
    """Per-file means of values laid out file by file (``files`` equal runs of windows along the
    last axis): the LM's unit. Windows of one file move together (one file's style, vocabulary and
    topic), so treating them as independent units would understate the spread over files."""
    values = np.asarray(values, dtype=float)
    return values.reshape(*values.shape[:-1], files, values.shape[-1] // files).mean(-1)


def _lm_units(ev: dict[str, Any], spec: dict[str, Any], column: str) -> Any:
    lengths, l_train = ev["lengths"], spec["train"]["max_len"]
    windows = [np.asarray([_num(v) for v in row], dtype=float) for row in ev["window_nats"]]
    if l_train not in lengths:
        return None
    files = len(ev.get("files") or ())
    if files and all(len(w) % files == 0 for w in windows):
        windows = [by_file(w, files) for w in windows]  # scored file by file: the file is the unit
    base = windows[lengths.index(l_train)]
    if column == "bpb_train":
        return base / math.log(2)
    kind, _, times = column.partition("_")
    if kind not in ("bpb", "ratio") or not times.endswith("x") or int(times[:-1]) * l_train not in lengths:
        return None
    longer = windows[lengths.index(int(times[:-1]) * l_train)]
    if kind == "bpb":
        return longer / math.log(2)
    multiple = int(times[:-1])
    if not files and ev.get("protocol", "nonoverlapping") == "nonoverlapping":
        # older records (one stretch of validation text): m windows at L per window at mL
        base = base[: len(longer) * multiple].reshape(len(longer), multiple).mean(1)
    return longer, base


def bounded(column: str) -> bool:
    """True for a rate column (values in [0, 1]: exact match, token accuracy, free-running scores):
    its interval is on the logit scale and never zero-width at 0% / 100%."""
    return not (column in LM_COLUMNS or column.startswith(("bpb", "ratio")))


# ---------------------------------------------------------------------------
# Seeds x units arrays: variance of a mean, intervals, tests (vectorised over leading axes).
# ---------------------------------------------------------------------------


def _mean_squares(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-way (seeds x units) mean squares: seeds, units, residual (interaction + noise)."""
    seeds, count = values.shape[-2:]
    grand = values.mean(axis=(-2, -1))
    by_seed = values.mean(-1)
    by_unit = values.mean(-2)
    ms_seed = count * by_seed.var(-1, ddof=1) if seeds > 1 else np.full(grand.shape, np.nan)
    ms_unit = seeds * by_unit.var(-1, ddof=1) if count > 1 else np.zeros(grand.shape)
    if seeds > 1 and count > 1:
        resid = values - by_seed[..., None] - by_unit[..., None, :] + grand[..., None, None]
        ms_resid = (resid**2).sum(axis=(-2, -1)) / ((seeds - 1) * (count - 1))
    else:
        ms_resid = np.zeros(grand.shape)
    return ms_seed, ms_unit, ms_resid


def _seed_part(
    values: np.ndarray, squares: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variance of the mean from the spread of the seed means, its df = seeds - 1, the residual mean
    square); ``squares``: :func:`_mean_squares` of ``values`` where the caller has them already.

    Seeds whose means tie exactly although their examples differ (rates with few errors: three
    seeds each 253 of 256 right, on different examples) show no spread, which cannot be the truth: the
    examples' noise alone moves a seed's mean. There the residual mean square, what a seed mean
    varies by with no seed effect at all, stands in, with its own df, instead of a zero-width interval.
    """
    seeds, count = values.shape[-2:]
    ms_seed, _, ms_resid = _mean_squares(values) if squares is None else squares
    tie = (ms_seed == 0) & (ms_resid > 0)
    part = np.where(tie, ms_resid, ms_seed) / (seeds * count)
    df = np.where(tie, (seeds - 1.0) * max(count - 1, 1), seeds - 1.0)
    return part, np.asarray(df, dtype=float), ms_resid


def _satterthwaite(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum of variance parts and Satterthwaite's df of the sum."""
    total = sum(p for p, _ in parts)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = sum(np.where(p > 0, p**2 / d, 0.0) for p, d in parts)
        df = np.where(denom > 0, total**2 / denom, parts[0][1])
    return np.asarray(total, dtype=float), np.asarray(df, dtype=float)


def mean_variance(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, variance of the mean, df)`` of a seeds x units array (leading axes vectorised).

    Variance: the part of the seed means (their spread, seeds - 1 df) plus the
    shared units' part (the spread of the unit means beyond the residual noise, never negative),
    df by Satterthwaite, but no more than seeds - 1 where the seed part is the larger. One seed: NaN
    variance. One unit per seed: the t test's variance of a mean, s^2 / seeds, with seeds - 1 df.
    """
    values = np.asarray(values, dtype=float)
    seeds, count = values.shape[-2:]
    mean = values.mean(axis=(-2, -1))
    if seeds < 2:
        nan = np.full(mean.shape, np.nan)
        return mean, nan, nan
    squares = _mean_squares(values)
    seed_part, seed_df, ms_resid = _seed_part(values, squares)
    ms_unit = squares[1]
    unit_part = np.maximum(ms_unit - ms_resid, 0.0) / (seeds * count)
    variance, df = _satterthwaite(
        [(seed_part, seed_df), (unit_part, np.full(mean.shape, max(count - 1, 1.0)))]
    )
    # Satterthwaite's df runs high at very few df: where the seed part is the larger one, the
    # interval keeps its df (seeds - 1).
    df = np.where(seed_part >= unit_part, np.minimum(df, seed_df), df)
    return mean, variance, df


@functools.lru_cache(maxsize=256)
def _clopper_pearson_edge(count: int, confidence: float) -> float:
    """How far from 0% the Clopper-Pearson interval of 0 successes in ``count`` examples reaches
    (the same from 100% for ``count`` of ``count``)."""
    ci = _scipy_stats().binomtest(0, count).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.high)


def interval(values: Any, *, rate: bool, confidence: float = CONFIDENCE) -> tuple[Any, Any, Any]:
    """``(mean, low, high)`` of a seeds x units array (leading axes vectorised): the t interval of
    :func:`mean_variance`; ``rate``: values in [0, 1], the interval on the logit scale, and at
    exactly 0 or 1 the Clopper-Pearson bound for the units. NaN bounds with fewer than 2 seeds."""
    sp = _scipy_stats()
    from scipy.special import expit, logit

    values = np.asarray(values, dtype=float)
    mean, variance, df = mean_variance(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = sp.t.ppf(1 - (1 - confidence) / 2, df)
        half = q * np.sqrt(variance)
        if rate:
            inside = (mean > 0) & (mean < 1)
            m = np.where(inside, mean, 0.5)
            centre, spread = logit(m), half / (m * (1 - m))
            low = np.where(inside, expit(centre - spread), mean)
            high = np.where(inside, expit(centre + spread), mean)
            edge = _clopper_pearson_edge(values.shape[-1], confidence)
            low = np.where(mean >= 1, 1 - edge, low)
            high = np.where(mean <= 0, edge, high)
        else:
            low, high = mean - half, mean + half
    unknown = np.isnan(variance)
    low, high = np.where(unknown, np.nan, low), np.where(unknown, np.nan, high)
    if np.ndim(mean) == 0:
        return float(mean), float(low), float(high)
    return mean, low, high


def _arm_part(values: np.ndarray, rate: bool, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seed part of an arm's variance, its df, its residual mean square); an arm of rates at 0 or 1
    on every seed and unit gets the variance of its Clopper-Pearson bound instead of none."""
    part, df, ms_resid = _seed_part(values)
    if rate and np.any(part == 0):
        seeds, count = values.shape[-2:]
        mean = values.mean(axis=(-2, -1))
        edge = _clopper_pearson_edge(count, confidence)
        q = _scipy_stats().t.ppf(1 - (1 - confidence) / 2, seeds - 1)
        at_edge = (part == 0) & ((mean <= 0) | (mean >= 1))
        part = np.where(at_edge, (edge / q) ** 2, part)
        df = np.where(at_edge, seeds - 1.0, df)
    return part, df, ms_resid


@dataclass(frozen=True)
class Comparison:
    """Row ``a`` minus row ``b`` in one column: the difference, its interval, the test's two-sided
    p-value (before any multiplicity correction), seeds on each side and the test's name."""

    diff: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    test: str
    tie: bool = False  # both rows identical on every seed and unit (e.g. both at 0%)

    @property
    def measured(self) -> bool:
        return self.n_a > 0 and self.n_b > 0 and not math.isnan(self.diff)

    @property
    def testable(self) -> bool:
        """Two converged seeds or more on each side (fewer: the spread over seeds is unknown)."""
        return self.n_a >= 2 and self.n_b >= 2 and not math.isnan(self.p)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


WELCH = "Welch t over seeds"
PAIRED = "paired t over seeds"


def compare_arrays(
    a: Any, b: Any, *, rate: bool, paired: bool = False, confidence: float = CONFIDENCE
) -> tuple[Any, Any, Any, Any]:
    """``(a - b, low, high, p)`` of two seeds x units arrays on the same units (leading axes
    vectorised): Welch's t over seeds with the units' part of the difference added, or with
    ``paired`` (seed i of ``a`` and of ``b`` are one trained run) a paired t over seeds on ``a - b``.
    p is two-sided; a difference of exactly 0 with no spread (a tie) has p = 1."""
    sp = _scipy_stats()
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"the two rows were scored on different units ({a.shape[-1]} vs {b.shape[-1]})")
    if paired:
        diff, variance, df = mean_variance(a - b)
        # the df of the seeds' differences, as the unpaired test keeps Welch's (see below): the
        # examples' part let them grow, and p-values far in the tail came out 4-10x too small
        df = np.minimum(df, a.shape[-2] - 1.0)
    else:
        sa, sb, count = a.shape[-2], b.shape[-2], a.shape[-1]
        diff = a.mean(axis=(-2, -1)) - b.mean(axis=(-2, -1))
        if sa < 2 or sb < 2:
            nan = np.full(np.shape(diff), np.nan)
            variance, df = nan, nan
        else:
            part_a, df_a, res_a = _arm_part(a, rate, confidence)
            part_b, df_b, res_b = _arm_part(b, rate, confidence)
            if count > 1:
                by_unit = a.mean(-2) - b.mean(-2)
                unit = np.maximum(by_unit.var(-1, ddof=1) - res_a / sa - res_b / sb, 0.0) / count
            else:
                unit = np.zeros(np.shape(diff))
            variance, df = _satterthwaite(
                [(part_a, df_a), (part_b, df_b), (unit, np.full(np.shape(diff), max(count - 1, 1.0)))]
            )
            # The units' part of a difference estimates what is left of the shared examples after
            # they cancel (nothing, when two rows differ alike on every example): a noisy, mostly
            # zero estimate. It adds to the variance but never to the df, which stay the seeds'
            # (Welch's): letting it raise them made p-values far in the tail, where a correction over
            # a whole table reads them, too small (measured: 1.2-2.2x the nominal rate at 0.0005).
            _, seed_df = _satterthwaite([(part_a, df_a), (part_b, df_b)])
            df = np.minimum(df, seed_df)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(variance)
        half = sp.t.ppf(1 - (1 - confidence) / 2, df) * se
        stat = np.abs(diff) / se
        p = np.where(se > 0, 2 * sp.t.sf(stat, df), np.where(diff == 0, 1.0, 0.0))
    p = np.where(np.isnan(variance), np.nan, p)
    low, high = diff - half, diff + half
    if np.ndim(diff) == 0:
        return float(diff), float(low), float(high), float(p)
    return diff, low, high, p


def adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (``scipy.stats.false_discovery_control``); NaN entries
    (untestable pairs) stay NaN and are not counted in the family."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = _scipy_stats().false_discovery_control(p[ok], method="bh")
    return out.tolist()


def min_permutation_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value an exact permutation test over seeds can give with ``n_a``
    and ``n_b`` seeds (both arms apart on every seed): 2 / C(n_a + n_b, n_a), at most 1."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


# ---------------------------------------------------------------------------
# Power: the smallest difference a Welch test over seeds detects, and how many seeds a difference needs.
# ---------------------------------------------------------------------------


#: Replicates of the Monte-Carlo power of the Welch test at few seeds (fixed generator).
POWER_DRAWS = 20000


@functools.lru_cache(maxsize=64)
def _welch_draws(seeds: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seeds)
    return rng.standard_normal((POWER_DRAWS, seeds)), rng.standard_normal((POWER_DRAWS, seeds))


def power(diff: float, seed_sd: float, seeds: int, *, alpha: float = ALPHA) -> float:
    """Power of the two-sided Welch t test over seeds (``seeds`` per side, seed means with
    standard deviation ``seed_sd`` on both sides) to detect ``diff``. Up to 10 seeds by Monte Carlo
    on ``scipy.stats.ttest_ind(equal_var=False)`` (fixed draws: Welch's df swings with so few
    seeds, and the noncentral t of Student's test would promise too much: 80% power at 3.07 seed
    SDs with 3 seeds, where Welch's test has 70%); past 10 seeds the noncentral t (``scipy.stats.nct``,
    2 seeds - 2 df), which Welch's test then matches."""
    sp = _scipy_stats()
    if seeds < 2 or not seed_sd > 0:
        return math.nan
    shift = abs(diff) / seed_sd
    if seeds <= 10:
        a, b = _welch_draws(seeds)
        p = sp.ttest_ind(a, b + shift, axis=1, equal_var=False).pvalue
        return float(np.mean(p < alpha))
    df = 2 * seeds - 2
    nc = shift / math.sqrt(2 / seeds)
    crit = sp.t.ppf(1 - alpha / 2, df)
    return float(sp.nct.sf(crit, df, nc) + np.nan_to_num(sp.nct.cdf(-crit, df, nc)))


@functools.lru_cache(maxsize=256)
def _detectable_unit(seeds: int, power_level: float, alpha: float) -> float:
    """:func:`detectable` for a seed SD of 1 (it scales with the SD), by bisection."""
    lo, hi = 0.0, 1.0
    while power(hi, 1.0, seeds, alpha=alpha) < power_level:
        lo, hi = hi, 2 * hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid, 1.0, seeds, alpha=alpha) < power_level else (lo, mid)
    return hi


def detectable(seed_sd: float, seeds: int, *, power_level: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest difference :func:`power` detects with ``power_level`` at ``seeds`` per side
    (NaN without a spread or with fewer than 2 seeds)."""
    if seeds < 2 or not seed_sd > 0 or not math.isfinite(seed_sd):
        return math.nan
    return seed_sd * _detectable_unit(seeds, power_level, alpha)


def seeds_needed(
    diff: float, seed_sd: float, *, power_level: float = POWER, alpha: float = ALPHA, most: int = 1000
) -> int | None:
    """The fewest seeds per side at which :func:`power` reaches ``power_level`` for ``diff`` (None
    if more than ``most``; 2 if the spread is 0)."""
    if not seed_sd > 0:
        return 2

    def enough(seeds: int) -> bool:  # the detectable difference falls as seeds grow
        return detectable(seed_sd, seeds, power_level=power_level, alpha=alpha) <= abs(diff)

    if not enough(most):
        return None
    lo, hi = 1, most  # not enough at lo (or lo < 2), enough at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid >= 2 and enough(mid) else (mid, hi)
    return hi


def _collect(
    records: Sequence[dict[str, Any]], label: str, task: str, column: str
) -> tuple[dict[int, Any], int]:
    """({seed: unit data} of the converged runs, number of runs) of one cell."""
    data: dict[int, Any] = {}
    runs = 0
    for record in records:
        if record["spec"]["task"] != task:
            continue
        for variant in record["result"]["eval"]:
            if run_label(record, variant) != label:
                continue
            got = units(record, variant, column)
            if got is None:
                continue
            runs += 1
            if converged(record):
                data[int(record["spec"]["seed"])] = got
    return data, runs


def _as_units(got: Any) -> np.ndarray:
    """A run's unit values; for a ratio the linearised contributions of each block,
    r * (1 + d_j - mean(d)) with d_j = loss at m L - loss at L of block j (their mean is r)."""
    if isinstance(got, tuple):
        d = np.asarray(got[0], dtype=float) - np.asarray(got[1], dtype=float)
        r = math.exp(float(d.mean()))
        return r * (1 + d - d.mean())
    return np.asarray(got, dtype=float)


def _matrix(data: dict[int, Any], seeds: Sequence[int] | None = None) -> np.ndarray:
    """Seeds x units array of a cell's data (``seeds``: in that order)."""
    order = sorted(data) if seeds is None else seeds
    return np.stack([_as_units(data[s]) for s in order])


def cell(records: Sequence[dict[str, Any]], *, label: str, task: str, column: str) -> Cell:
    """Mean, 95% interval (:data:`METHOD`), converged runs and runs of one cell.

    ``label`` names the encoding variant as the tables do (``rope``, ``rope+rand``,
    ``rope[dynamic:4]`` for a scaling evaluated on the ``rope`` runs). With one converged seed the
    interval is NaN (unknown: the spread over seeds cannot be seen).
    """
    data, runs = _collect(records, label, task, column)
    if not data:
        return Cell(math.nan, math.nan, math.nan, 0, runs, 0)
    values = _matrix(data)
    mean, low, high = interval(values, rate=bounded(column))
    return Cell(mean, low, high, values.shape[0], runs, values.shape[1])


def group(records: Sequence[dict[str, Any]], label: str, task: str) -> str | None:
    """The trained runs behind a row: the record label of its runs (``rope`` for ``rope``,
    ``rope[dynamic:4]`` and ``rope[linear:4]``: one set of trained models, evaluated or
    fine-tuned several ways). None when no run has that row."""
    for record in records:
        if record["spec"]["task"] == task and any(
            run_label(record, v) == label for v in record["result"]["eval"]
        ):
            return str(record["label"])
    return None


def pair_test(records: Sequence[dict[str, Any]], a: str, b: str, *, task: str, column: str) -> Comparison:
    """Row ``a`` against row ``b`` in one column: the difference of their means, its 95% interval
    and the test's p-value (:data:`TEST`; before any multiplicity correction). Rows of one set of
    trained runs (:func:`group`) are paired by seed; others are independent samples of seeds."""
    left, runs_a = _collect(records, a, task, column)
    right, runs_b = _collect(records, b, task, column)
    same = group(records, a, task) == group(records, b, task) and a != b
    if same:
        shared = sorted(set(left) & set(right))
        left = {s: left[s] for s in shared}
        right = {s: right[s] for s in shared}
    name = PAIRED if same else WELCH
    if not left or not right:
        return Comparison(math.nan, math.nan, math.nan, math.nan, len(left), len(right), name)
    xa, xb = _matrix(left), _matrix(right)
    diff, low, high, p = compare_arrays(xa, xb, rate=bounded(column), paired=same)
    tie = bool(xa.shape == xb.shape and np.ptp(xa) == 0 and np.ptp(xb) == 0 and xa.flat[0] == xb.flat[0])
    return Comparison(diff, low, high, 1.0 if tie else p, xa.shape[0], xb.shape[0], name, tie)


def difference(records: Sequence[dict[str, Any]], a: str, b: str, *, task: str, column: str) -> Cell:
    """Mean and 95% interval of cell ``a`` minus cell ``b`` (same task and column) as a
    :class:`Cell` (``n``: the fewer converged seeds of the two sides); :func:`pair_test` has the
    p-value too."""
    c = pair_test(records, a, b, task=task, column=column)
    _, runs_a = _collect(records, a, task, column)
    _, runs_b = _collect(records, b, task, column)
    units_ = next((len(_as_units(v)) for v in _collect(records, a, task, column)[0].values()), 0)
    return Cell(c.diff, c.low, c.high, min(c.n_a, c.n_b), max(runs_a, runs_b), units_)


def per_seed(values: Sequence[float]) -> Cell:
    """Mean and 95% t interval of one number per seed (e.g. steps/s ratios); NaN values are
    left out; NaN bounds with fewer than 2 numbers."""
    array = np.asarray([float(v) for v in values if not math.isnan(float(v))])
    if not len(array):
        return Cell(math.nan, math.nan, math.nan, 0, len(values), 0)
    mean, low, high = interval(array[:, None], rate=False)
    return Cell(mean, low, high, len(array), len(values), 1)


@dataclass(frozen=True)
class Separation:
    """What one column can tell apart, from the runs of its rows.

    ``significant`` of ``pairs`` tested pairs of rows (``significant_pairs``: each as "a > b", the
    row with the larger value first) differ by :data:`TEST` after the :data:`CORRECTION` (5%;
    :func:`separation`: the column's pairs alone). Rows that are one set of trained runs evaluated several
    ways (:func:`group`) are compared within their group (paired) and stand for their group by
    their base row against other groups, so one model is not counted as several encodings.
    ``untestable``: pairs with fewer than 2 converged seeds on a side. ``detectable``: the smallest
    difference a Welch test over ``seeds`` seeds per side detects with 80% power at 5% (before the
    correction), from the column's median seed standard deviation ``seed_sd``; ``seeds_for_target``:
    how many seeds per side ``target`` needs (None: more than 1000; NaN/None without a spread: every
    cell at a floor or a ceiling, where the column tells nothing apart). ``reachable``: False when
    no test of the column could reach 5% with its seeds by an exact permutation test either
    (:func:`min_permutation_p`), i.e. significance rests on the t test's normality.
    """

    significant: int
    significant_pairs: list[str]
    pairs: int
    untestable: int
    detectable: float
    seeds: int
    seed_sd: float
    target: float
    seeds_for_target: int | None
    permutation_min_p: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seed_sd(values: np.ndarray) -> float:
    """Standard deviation of a single run's mean (its seed part of the variance x seeds)."""
    if values.shape[0] < 2:
        return math.nan
    part, _, _ = _seed_part(values)
    return float(math.sqrt(float(part) * values.shape[0]))


def _column_tests(
    records: Sequence[dict[str, Any]], task: str, column: str, labels: Iterable[str] | None = None
) -> tuple[list[float], dict[str, dict[int, Any]], dict[str, str | None], list[str]]:
    """The raw p-values of one column's pairs (NaN: untestable), its rows' data and groups, and
    each pair as "a > b" (the row ahead first)."""
    rows = [lab for lab, t in labels_and_tasks(records) if t == task] if labels is None else list(labels)
    data = {lab: _collect(records, lab, task, column)[0] for lab in rows}
    data = {lab: got for lab, got in data.items() if got}
    groups = {lab: group(records, lab, task) for lab in data}
    pairs: list[tuple[str, str]] = []
    for i, a in enumerate(data):
        for b in list(data)[i + 1 :]:
            if groups[a] == groups[b]:
                pairs.append((a, b))  # one model, two evaluations: paired, within the group
            elif a == groups[a] and b == groups[b]:
                pairs.append((a, b))  # two trained models, by their base rows
    tests = [pair_test(records, a, b, task=task, column=column) for a, b in pairs]
    order = [f"{a} > {b}" if t.diff > 0 else f"{b} > {a}" for (a, b), t in zip(pairs, tests)]
    return [t.p if t.testable else math.nan for t in tests], data, groups, order


def _separation(
    p: Sequence[float],
    adjusted: Sequence[float],
    data: dict[str, dict[int, Any]],
    groups: dict[str, Any],
    order: Sequence[str],
    column: str,
) -> Separation:
    found = [pair for pair, q in zip(order, adjusted) if not math.isnan(q) and q < ALPHA]
    significant = len(found)
    sds = [_seed_sd(_matrix(data[lab])) for lab in data if groups[lab] == lab]
    sds = [s for s in sds if not math.isnan(s)]
    spread = [s for s in sds if s > 0]
    seed_sd = float(np.median(spread)) if spread else math.nan
    counts = [len(got) for got in data.values()]
    seeds = int(np.median(counts)) if counts else 0
    target = TARGET["rate"] if bounded(column) else TARGET["lm"]
    return Separation(
        significant=significant,
        significant_pairs=found,
        pairs=sum(1 for q in p if not math.isnan(q)),
        untestable=sum(1 for q in p if math.isnan(q)),
        detectable=detectable(seed_sd, seeds),
        seeds=seeds,
        seed_sd=seed_sd,
        target=target,
        seeds_for_target=seeds_needed(target, seed_sd) if spread else None,
        permutation_min_p=min_permutation_p(seeds, seeds) if seeds else math.nan,
    )


def separation(
    records: Sequence[dict[str, Any]], task: str, column: str, labels: Iterable[str] | None = None
) -> Separation:
    """:class:`Separation` of one column over the rows ``labels`` (default: every row of ``task``),
    its pairs corrected on their own (a table of one column; :func:`table_separation` corrects a
    table's columns together)."""
    p, data, groups, order = _column_tests(records, task, column, labels)
    return _separation(p, adjust(p), data, groups, order, column)


def table_separation(
    records: Sequence[dict[str, Any]], columns_: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Separation]:
    """:class:`Separation` of every ``(task, column)`` of a table, every pair of every column
    corrected together (:data:`CORRECTION`), so that the table as a whole, not each column, holds
    its false discovery rate at 5% (a column left out of the printed table for having no significant
    pair was still in the correction)."""
    found = {key: _column_tests(records, *key) for key in columns_}
    flat = [q for p, _, _, _ in found.values() for q in p]
    adjusted = adjust(flat)
    out, at = {}, 0
    for (task, column), (p, data, groups, order) in found.items():
        out[(task, column)] = _separation(p, adjusted[at : at + len(p)], data, groups, order, column)
        at += len(p)
    return out


def labels_and_tasks(records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every (label, task) the records hold, scalings included."""
    out: dict[tuple[str, str], None] = {}
    for record in records:
        for variant in record["result"]["eval"]:
            out[(run_label(record, variant), record["spec"]["task"])] = None
    return list(out)


def columns(task: str) -> tuple[str, ...]:
    return LM_COLUMNS if task == "lm" else TASK_COLUMNS


def cells(
    source: str | os.PathLike | Sequence[dict[str, Any]],
    *,
    labels: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
) -> dict[tuple[str, str, str], Cell]:
    """Per-cell statistics of a benchmark run: ``{(label, task, column): Cell}``.

    ``source`` is a results directory (what ``posenc compare --out DIR`` wrote: the
    records of the grid its summaries were made from, ``DIR/grid.json``, as the tables
    read them) or a list of records. ``labels`` / ``tasks`` keep only those (default:
    every label and task in the records; labels as the tables print them: ``rope``,
    ``rope+rand``, ``rope[dynamic:4]``).

    Each :class:`Cell` has the ``mean`` over the converged seeds, the 95% interval
    ``low`` .. ``high`` (:data:`METHOD`), ``n`` converged seeds out of ``runs``, ``units``
    evaluation units per seed, and ``converged`` (every seed converged in-distribution);
    with no converged seed, ``mean``/``low``/``high`` are NaN (``measured`` is False).
    Columns are :data:`TASK_COLUMNS` for tasks (``em_in``, ``em_2x``, ``em_4x``, ``tok_*``)
    and :data:`LM_COLUMNS` for the LM (``bpb_train``, ``bpb_2x``, ``bpb_4x``, ``ratio_2x``, ``ratio_4x``).

    >>> table = cells("posenc-results", tasks=["copy"])  # doctest: +SKIP
    >>> c = table[("alibi", "copy", "em_2x")]  # doctest: +SKIP
    >>> f"{c.mean:.0%} [{c.low:.0%}, {c.high:.0%}], {c.n}/{c.runs} seeds"  # doctest: +SKIP
    '61% [55%, 68%], 3/3 seeds'
    """
    if isinstance(source, (str, os.PathLike)):
        root = Path(source)
        if not (root / "runs").is_dir():
            raise PosencError(f"{root}: not a posenc compare results directory (no runs/ in it)")
        records: Sequence[dict[str, Any]] = ResultStore(root).records()
    else:
        records = source
    wanted_labels = None if labels is None else set(labels)
    wanted_tasks = None if tasks is None else set(tasks)
    out = {}
    for label, task in labels_and_tasks(records):
        if (wanted_labels is not None and label not in wanted_labels) or (
            wanted_tasks is not None and task not in wanted_tasks
        ):
            continue
        for column in columns(task):
            out[(label, task, column)] = cell(records, label=label, task=task, column=column)
    return out


def verdict_vs(c: Cell, threshold: float, side: str) -> str:  # noqa: D401
    """``"agrees"`` if the whole interval is on ``side`` (``">="`` or ``"<="``) of
    ``threshold``, ``"disagrees"`` if the whole interval is on the other side,
    ``"inconclusive"`` if it straddles, ``"undecided"`` with one converged seed (no interval),
    ``"not measured"`` without converged runs."""
    if not c.measured:
        return "not measured"
    if c.n < 2:
        return "undecided"
    if side == ">=":
        return "agrees" if c.low >= threshold else ("disagrees" if c.high < threshold else "inconclusive")
    if side == "<=":
        return "agrees" if c.high <= threshold else ("disagrees" if c.low > threshold else "inconclusive")
    raise ValueError(f"side must be '>=' or '<=', got {side!r}")
