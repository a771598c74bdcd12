"""Per-cell statistics of benchmark records: mean, 95% interval, runs, convergence.

A *cell* is one encoding variant (label) x task x column (e.g. ``copy`` / ``em_2x``,
exact match in the 2x length bucket). Its runs are the label's seeds; only runs that
converged in-distribution count (a run that did not is reported, never averaged in).
Each converged run contributes the same *units*: the evaluation examples of the
bucket's lengths (tasks; one value per example) or the LM's scored windows.

Interval: a crossed (two-way) bootstrap over seeds and evaluation units, both
resampled with replacement (``scipy.stats.bootstrap`` with the seed indices and the
unit indices as two samples, percentile method, 95%, 2000 resamples, fixed generator
so that summaries are reproducible). It covers both sources of spread: training
randomness (which seed) and the finite test set (which examples). With 3 seeds the
seed part can only be as wide as the runs are apart; the percentile bootstrap is
known to be somewhat narrow with so few seeds, so read "inconclusive" generously.

Columns:

| column | unit | statistic |
|---|---|---|
| ``em_in`` / ``em_1.25x`` / ``em_1.5x`` / ``em_2x`` / ``em_4x`` | one evaluation example | mean exact match (greedy decoding; the teacher-forced pass where a record has no free-running scores) |
| ``pre_*`` | one evaluation example | mean share of the answer's tokens right before the first error, free-running |
| ``tok_*`` | one evaluation example | mean teacher-forced answer-token accuracy (the answer's tokens, EOS left out) |
| ``bpb_train`` | one scored window at L_train | mean bits per byte |
| ``ratio_2x`` / ``ratio_4x`` | m x L_train bytes (one window at m L, m at L) | mean over seeds of exp(mean loss at mL - mean loss at L) |

:func:`cells` is the public entry point: every cell of a results directory (or of a list
of records) with its mean, interval, seeds and convergence; :func:`cell` computes one.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posenc.errors import PosencError
from posenc.records.store import ResultStore
from posenc.results.lengths import in_range as lengths_in_range

CONFIDENCE = 0.95
RESAMPLES = 2000
METHOD = (
    "95% percentile bootstrap over seeds and evaluation examples (crossed, 2000 resamples, "
    "scipy.stats.bootstrap); converged runs only"
)
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
LM_COLUMNS = ("bpb_train", "ratio_2x", "ratio_4x")


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


def _lm_units(ev: dict[str, Any], spec: dict[str, Any], column: str) -> Any:
    lengths, l_train = ev["lengths"], spec["train"]["max_len"]
    windows = [np.asarray([_num(v) for v in row], dtype=float) for row in ev["window_nats"]]
    if l_train not in lengths:
        return None
    base = windows[lengths.index(l_train)]
    if column == "bpb_train":
        return base / math.log(2)
    if not column.startswith("ratio_"):
        return None
    multiple = int(column[len("ratio_") : -1])
    if multiple * l_train not in lengths:
        return None
    longer = windows[lengths.index(multiple * l_train)]
    if ev.get("protocol", "nonoverlapping") == "nonoverlapping":  # m windows at L per window at mL
        base = base[: len(longer) * multiple].reshape(len(longer), multiple).mean(1)
    return longer, base


def _stat_mean(values: np.ndarray) -> Callable[..., np.ndarray]:
    """statistic(seed_idx, unit_idx): mean of values[seeds][:, units], vectorised over resamples."""

    def statistic(seeds: np.ndarray, picks: np.ndarray, axis: int = -1) -> np.ndarray:
        chosen = values[seeds[..., :, None], picks[..., None, :]]  # (..., S, U)
        return chosen.mean(axis=(-1, -2))

    return statistic


def _stat_ratio(longer: np.ndarray, base: np.ndarray) -> Callable[..., np.ndarray]:
    def statistic(seeds: np.ndarray, picks: np.ndarray, axis: int = -1) -> np.ndarray:
        a = longer[seeds[..., :, None], picks[..., None, :]].mean(-1)  # (..., S)
        b = base[seeds[..., :, None], picks[..., None, :]].mean(-1)
        return np.exp(a - b).mean(-1)

    return statistic


def bootstrap_interval(statistic: Callable[..., np.ndarray], sizes: Sequence[int]) -> tuple[float, float]:
    """95% percentile interval of ``statistic(*index arrays)`` over crossed resamples.

    Factor k (e.g. seeds, evaluation units) has ``sizes[k]`` levels; each is resampled
    with replacement independently of the others (``scipy.stats.bootstrap`` with the
    index arrays as its samples). A factor with a single level is held fixed; with every
    factor fixed the interval is the point itself. ``statistic`` receives index arrays
    with matching leading (resample) dimensions.
    """
    try:
        from scipy import stats as scipy_stats  # optional dependency: the cli extra
    except ImportError:
        raise PosencError(
            "the benchmark's intervals need scipy: pip install 'posenc[cli]' (bash scripts/setup.sh does)"
        ) from None
    indices = [np.arange(size) for size in sizes]
    free = [k for k, size in enumerate(sizes) if size >= 2]
    if not free:
        value = float(statistic(*indices))
        return value, value

    def wrapped(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        args = list(indices)
        for k, idx in zip(free, resampled):
            args[k] = idx
        lead = np.broadcast_shapes(*(a.shape[:-1] for a in args))
        return statistic(*(np.broadcast_to(a, lead + a.shape[-1:]) for a in args))

    result = scipy_stats.bootstrap(
        tuple(indices[k] for k in free),
        wrapped,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        paired=False,
        batch=200,
        rng=np.random.default_rng(0),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _collect(records: Sequence[dict[str, Any]], label: str, task: str, column: str) -> tuple[list[Any], int]:
    """(unit data of the converged runs, number of runs) of one cell."""
    data, runs = [], 0
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
                data.append(got)
    return data, runs


def _statistic(data: list[Any]) -> tuple[Callable[..., np.ndarray], int, int]:
    """(statistic(seed_idx, unit_idx), seeds, units) of a cell's converged unit data."""
    if isinstance(data[0], tuple):
        longer = np.stack([d[0] for d in data])
        base = np.stack([d[1] for d in data])
        return _stat_ratio(longer, base), len(data), longer.shape[1]
    values = np.stack(data)
    return _stat_mean(values), len(data), values.shape[1]


def cell(records: Sequence[dict[str, Any]], *, label: str, task: str, column: str) -> Cell:
    """Mean, 95% interval (:data:`METHOD`), converged runs and runs of one cell.

    ``label`` names the encoding variant as the tables do (``rope``, ``rope+rand``,
    ``rope[dynamic:4]`` for a scaling evaluated on the ``rope`` runs).
    """
    data, runs = _collect(records, label, task, column)
    if not data:
        return Cell(math.nan, math.nan, math.nan, 0, runs, 0)
    statistic, seeds, count = _statistic(data)
    mean = float(statistic(np.arange(seeds), np.arange(count)))
    low, high = bootstrap_interval(statistic, (seeds, count))
    return Cell(mean, min(low, mean), max(high, mean), seeds, runs, count)


def difference(records: Sequence[dict[str, Any]], a: str, b: str, *, task: str, column: str) -> Cell:
    """Mean and interval of cell ``a`` minus cell ``b`` (same task and column).

    Seeds are resampled for each side separately, evaluation units jointly (both sides
    score the same examples or bytes), so a shared hard example does not widen the
    interval. ``n``: the fewer converged seeds of the two sides.
    """
    left, runs_a = _collect(records, a, task, column)
    right, runs_b = _collect(records, b, task, column)
    if not left or not right:
        return Cell(math.nan, math.nan, math.nan, 0, max(runs_a, runs_b), 0)
    stat_a, seeds_a, count = _statistic(left)
    stat_b, seeds_b, count_b = _statistic(right)
    if count != count_b:
        raise ValueError(f"{a} and {b} were scored on different evaluation units ({count} vs {count_b})")

    def statistic(sa: np.ndarray, sb: np.ndarray, u: np.ndarray) -> np.ndarray:
        return stat_a(sa, u) - stat_b(sb, u)

    sizes = (seeds_a, seeds_b, count)
    point = float(statistic(*(np.arange(k) for k in sizes)))
    low, high = bootstrap_interval(statistic, sizes)
    return Cell(point, min(low, point), max(high, point), min(seeds_a, seeds_b), max(runs_a, runs_b), count)


def per_seed(values: Sequence[float]) -> Cell:
    """Mean and interval of one number per seed (bootstrap over seeds), e.g. steps/s ratios."""
    array = np.asarray([float(v) for v in values if not math.isnan(float(v))])
    if not len(array):
        return Cell(math.nan, math.nan, math.nan, 0, len(values), 0)

    def statistic(seeds: np.ndarray) -> np.ndarray:
        return array[seeds].mean(-1)

    mean = float(array.mean())
    low, high = bootstrap_interval(statistic, (len(array),))
    return Cell(mean, min(low, mean), max(high, mean), len(array), len(values), 1)


@dataclass(frozen=True)
class Separation:
    """What one column can tell apart, from its cells (one per row of the table).

    ``separated`` of ``pairs`` pairs of measured cells have 95% intervals that do not overlap.
    ``detectable`` is the median interval width of the column's cells that have a spread: two
    cells that wide separate only if their means differ by more than it, so it is the smallest
    difference the column can show with the number of seeds run (NaN when no cell has a spread: every
    one at a floor or a ceiling, where the column tells nothing apart).
    """

    separated: int
    pairs: int
    detectable: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def separation(column: Sequence[Cell]) -> Separation:
    """:class:`Separation` of one column's cells (cells without a converged seed are skipped)."""
    measured = [c for c in column if c.measured]
    separated = sum(1 for a, b in itertools.combinations(measured, 2) if a.high < b.low or b.high < a.low)
    widths = [c.high - c.low for c in measured if c.high > c.low]
    detectable = float(np.median(widths)) if widths else math.nan
    return Separation(separated, len(measured) * (len(measured) - 1) // 2, detectable)


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
    and :data:`LM_COLUMNS` for the LM (``bpb_train``, ``ratio_2x``, ``ratio_4x``).

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
    ``"inconclusive"`` if it straddles, ``"not measured"`` without converged runs."""
    if not c.measured:
        return "not measured"
    if side == ">=":
        return "agrees" if c.low >= threshold else ("disagrees" if c.high < threshold else "inconclusive")
    if side == "<=":
        return "agrees" if c.high <= threshold else ("disagrees" if c.low > threshold else "inconclusive")
    raise ValueError(f"side must be '>=' or '<=', got {side!r}")
