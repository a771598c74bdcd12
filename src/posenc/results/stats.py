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

The module's parts: what a record gives a cell (its columns, buckets and per-unit values:
:mod:`posenc.results.record_units`), the interval of a seeds x units array
(:mod:`posenc.results.intervals`), the tests between rows and their correction
(:mod:`posenc.results.pair_tests`) and the power of those tests (:mod:`posenc.results.power`); this
module reads records into cells, pairs and columns with them, and re-exports their names.

How well this holds is measured, not assumed: ``tests/unit/results/test_intervals.py`` (and
``test_pair_tests.py``, ``test_power.py``) simulates known
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

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.records.store import ResultStore
from posenc.results.intervals import (
    ALPHA,
    CONFIDENCE,
    METHOD,
    interval,
    mean_squares,
    mean_variance,
    scipy_stats,
    seed_variance,
)
from posenc.results.pair_tests import (
    CORRECTION,
    PAIRED,
    TEST,
    WELCH,
    Comparison,
    adjust,
    compare_arrays,
    min_permutation_p,
)
from posenc.results.power import POWER, POWER_DRAWS, TARGET, detectable, power, seeds_needed
from posenc.results.record_units import (
    BUCKETS,
    LM_COLUMNS,
    NOT_FINETUNED,
    RANGES,
    TASK_COLUMNS,
    UNSEEN,
    UP_TO_2X,
    bounded,
    by_file,
    columns,
    converged,
    labels_and_tasks,
    number,
    run_label,
    units,
)


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


def collect(
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


def as_units(got: Any) -> np.ndarray:
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
    return np.stack([as_units(data[s]) for s in order])


def cell(records: Sequence[dict[str, Any]], *, label: str, task: str, column: str) -> Cell:
    """Mean, 95% interval (:data:`METHOD`), converged runs and runs of one cell.

    ``label`` names the encoding variant as the tables do (``rope``, ``rope+rand``,
    ``rope[dynamic:4]`` for a scaling evaluated on the ``rope`` runs). With one converged seed the
    interval is NaN (unknown: the spread over seeds cannot be seen).
    """
    data, runs = collect(records, label, task, column)
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
    left, runs_a = collect(records, a, task, column)
    right, runs_b = collect(records, b, task, column)
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
    _, runs_a = collect(records, a, task, column)
    _, runs_b = collect(records, b, task, column)
    units_ = next((len(as_units(v)) for v in collect(records, a, task, column)[0].values()), 0)
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
    part, _, _ = seed_variance(values)
    return float(math.sqrt(float(part) * values.shape[0]))


def column_tests(
    records: Sequence[dict[str, Any]], task: str, column: str, labels: Iterable[str] | None = None
) -> tuple[list[float], dict[str, dict[int, Any]], dict[str, str | None], list[str]]:
    """The raw p-values of one column's pairs (NaN: untestable), its rows' data and groups, and
    each pair as "a > b" (the row ahead first)."""
    rows = [lab for lab, t in labels_and_tasks(records) if t == task] if labels is None else list(labels)
    data = {lab: collect(records, lab, task, column)[0] for lab in rows}
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
    p, data, groups, order = column_tests(records, task, column, labels)
    return _separation(p, adjust(p), data, groups, order, column)


def table_separation(
    records: Sequence[dict[str, Any]], columns_: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Separation]:
    """:class:`Separation` of every ``(task, column)`` of a table, every pair of every column
    corrected together (:data:`CORRECTION`), so that the table as a whole, not each column, holds
    its false discovery rate at 5% (a column left out of the printed table for having no significant
    pair was still in the correction)."""
    found = {key: column_tests(records, *key) for key in columns_}
    flat = [q for p, _, _, _ in found.values() for q in p]
    adjusted = adjust(flat)
    out, at = {}, 0
    for (task, column), (p, data, groups, order) in found.items():
        out[(task, column)] = _separation(p, adjusted[at : at + len(p)], data, groups, order, column)
        at += len(p)
    return out


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


__all__ = [
    "ALPHA",
    "BUCKETS",
    "CONFIDENCE",
    "CORRECTION",
    "LM_COLUMNS",
    "METHOD",
    "NOT_FINETUNED",
    "PAIRED",
    "POWER",
    "POWER_DRAWS",
    "RANGES",
    "TARGET",
    "TASK_COLUMNS",
    "TEST",
    "UNSEEN",
    "UP_TO_2X",
    "WELCH",
    "Cell",
    "Comparison",
    "Separation",
    "adjust",
    "as_units",
    "bounded",
    "by_file",
    "cell",
    "cells",
    "collect",
    "column_tests",
    "columns",
    "compare_arrays",
    "converged",
    "detectable",
    "difference",
    "group",
    "interval",
    "labels_and_tasks",
    "mean_squares",
    "mean_variance",
    "min_permutation_p",
    "number",
    "pair_test",
    "per_seed",
    "power",
    "run_label",
    "scipy_stats",
    "seed_variance",
    "seeds_needed",
    "separation",
    "table_separation",
    "units",
    "verdict_vs",
]
