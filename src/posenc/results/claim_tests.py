"""How the benchmark's records judge a published claim: one test type per kind of claim (a cell
against a line, two rows compared, a ranking, groups, convergence counts, seed ratios, a ratio to a
baseline, the rise of the last-k loss), each with a ``judge(records)`` that gives ``(what we
measured, verdict, the rule)`` from the seed-level intervals and tests of
:mod:`posenc.results.stats`. :data:`TESTS` names each type as ``claims.json`` does; the verdicts and
what each means: :mod:`posenc.results.claims`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from posenc.results import stats
from posenc.results.pair_tests import difference_variance
from posenc.results.stats import Cell
from posenc.results.verdict_rules import Judged, floor_tie, margin_p, ordered_p, per_seed_p, threshold_p

AGREES, DISAGREES, INCONCLUSIVE, MIXED = "agrees", "disagrees", "inconclusive", "mixed"
UNDECIDED, UNINFORMATIVE = "undecided", "uninformative"
NOT_AT_SCALE, NOT_MEASURED = "not reproduced at this scale", "not measured"
VERDICTS = (AGREES, DISAGREES, INCONCLUSIVE, MIXED, UNDECIDED, UNINFORMATIVE, NOT_AT_SCALE, NOT_MEASURED)
#: Both sides at the same floor or ceiling on every seed and example: the task tells them apart in
#: no way, so the claim is neither supported nor refuted (for "better" and for "at least as good").
TIE = "; a tie: identical on every seed and example"
TIE_RULE = "both sides at the same floor or ceiling on every seed and example: uninformative"
FEW_SEEDS = "fewer than 2 converged seeds on a side: undecided"
#: A one-sided decision at this level matches a two-sided 95% interval.
ONE_SIDED = stats.ALPHA / 2

Records = Sequence[dict[str, Any]]


class Test(Protocol):
    def judge(self, records: Records) -> tuple[str, str, str]:
        """``(what we measured, verdict, the rule)``."""
        ...

    def evidence(self, records: Records) -> Judged:
        """The one-sided p-values for and against the claim, which the claims of a table are corrected
        over together (:func:`posenc.results.verdict_rules.family_verdicts`)."""
        ...


NOT_TESTED = Judged(math.nan, math.nan, measured=False)


def _matrix(records: Records, label: str, task: str, column: str) -> np.ndarray | None:
    data = stats.collect(records, label, task, column)[0]
    return np.stack([stats.as_units(data[s]) for s in sorted(data)]) if data else None


def _pair(records: Records, a: str, b: str, task: str, column: str) -> tuple[Any, Any, bool] | None:
    """The two rows' seeds x units arrays as the tables compare them (paired within one set of trained
    runs, over every seed both converged on), and whether they are paired; None without runs."""
    left, right = stats.collect(records, a, task, column)[0], stats.collect(records, b, task, column)[0]
    same = stats.group(records, a, task) == stats.group(records, b, task) and a != b
    if same:
        shared = sorted(set(left) & set(right))
        left, right = {s: left[s] for s in shared}, {s: right[s] for s in shared}
    if not left or not right:
        return None
    stack = [np.stack([stats.as_units(side[s]) for s in sorted(side)]) for side in (left, right)]
    return stack[0], stack[1], same


def _one_sided(records: Records, a: str, b: str, task: str, column: str, line: float) -> tuple[float, float]:
    """``(p that a - b > line, p that a - b < line)`` by the tables' test of the pair (NaN: untestable)."""
    found = _pair(records, a, b, task, column)
    if found is None or min(found[0].shape[0], found[1].shape[0]) < 2:
        return math.nan, math.nan
    diff, variance, df = difference_variance(found[0], found[1], rate=stats.bounded(column), paired=found[2])
    return margin_p(float(diff), float(variance), float(df), line)


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def fmt_cell(c: Cell, percent: bool) -> str:
    if not c.runs:
        return "no runs"
    if not c.measured:
        return "not converged"
    if math.isnan(c.low):
        text = f"{100 * c.mean:.0f}% [one seed]" if percent else f"{c.mean:.2f} [one seed]"
    elif percent:
        text = f"{100 * c.mean:.0f}% [{100 * c.low:.0f}, {100 * c.high:.0f}]"
    else:
        text = f"{c.mean:.2f} [{c.low:.2f}, {c.high:.2f}]"
    return text + (f" ({c.n}/{c.runs} seeds converged)" if c.n < c.runs else f" ({_seeds(c.n)})")


def _percent(column: str) -> bool:
    return column.startswith(("em_", "tok_"))


@dataclass(frozen=True)
class Threshold:
    """One cell against a line: ``side`` is ``">="`` or ``"<="`` (what the paper says)."""

    label: str
    task: str
    column: str
    threshold: float
    side: str
    what: str = ""  # e.g. "copy, n_train < n <= 2 n_train"

    def judge(self, records: Records) -> tuple[str, str, str]:
        c = stats.cell(records, label=self.label, task=self.task, column=self.column)
        line = f"{100 * self.threshold:.0f}%" if _percent(self.column) else f"{self.threshold:g}"
        rule = f"95% interval wholly {self.side} {line} agrees, wholly on the other side disagrees"
        ours = fmt_cell(c, _percent(self.column)) + (f"; {self.what}" if self.what else "")
        verdict = stats.verdict_vs(c, self.threshold, self.side)
        return ours, verdict, rule + ("; " + FEW_SEEDS if verdict == UNDECIDED else "")

    def evidence(self, records: Records) -> Judged:
        values = _matrix(records, self.label, self.task, self.column)
        if values is None or values.shape[0] < 2:
            return NOT_TESTED
        return Judged(*threshold_p(values, self.threshold, self.side, rate=stats.bounded(self.column)))


@dataclass(frozen=True)
class Compare:
    """Cell ``a`` against cell ``b``: the 95% interval of a - b (:func:`posenc.results.stats.pair_test`:
    Welch t over seeds, paired for one model evaluated two ways) against ``margin`` on ``side``.

    ``side=">"``: the paper says a is higher (agrees if the whole interval of a - b is
    above ``margin``); ``"<"``: lower. ``non_inferior=True`` reads "a at least as good
    as b" with ``margin`` as the allowed slack: agrees if the interval stays within it.
    """

    a: str
    b: str
    task: str
    column: str
    side: str
    margin: float = 0.0
    non_inferior: bool = False
    what: str = ""

    def judge(self, records: Records) -> tuple[str, str, str]:
        d = stats.pair_test(records, self.a, self.b, task=self.task, column=self.column)
        pct = _percent(self.column)
        scale = 100 if pct else 1
        unit = " points" if pct else ""
        if not d.measured:
            return "not converged or not run", NOT_MEASURED, ""
        if not d.testable and not d.tie:
            ours = f"{self.a} - {self.b}: {scale * d.diff:+.2f}{unit} ({d.n_a} vs {d.n_b} converged seeds)"
            return ours, UNDECIDED, FEW_SEEDS
        ours = (
            f"{self.a} - {self.b}: {scale * d.diff:+.2f} [{scale * d.low:+.2f}, {scale * d.high:+.2f}]{unit}"
        )
        ours += f", {d.test}"
        ours += f"; {self.what}" if self.what else ""
        if self._tie(records):
            return ours + TIE, UNINFORMATIVE, TIE_RULE
        m = self.margin
        if self.non_inferior:  # a no worse than b by more than the margin
            if self.side == "<":
                verdict = AGREES if d.high <= m else (DISAGREES if d.low > m else INCONCLUSIVE)
                rule = f"interval of {self.a} - {self.b} wholly <= {m:+g} agrees, wholly above disagrees"
            else:
                verdict = AGREES if d.low >= -m else (DISAGREES if d.high < -m else INCONCLUSIVE)
                rule = f"interval of {self.a} - {self.b} wholly >= {-m:+g} agrees, wholly below disagrees"
        elif self.side == ">":
            verdict = AGREES if d.low > m else (DISAGREES if d.high <= m else INCONCLUSIVE)
            rule = f"interval of {self.a} - {self.b} wholly above {m:+g} agrees, wholly at or below disagrees"
        else:
            verdict = AGREES if d.high < -m else (DISAGREES if d.low >= -m else INCONCLUSIVE)
            rule = (
                f"interval of {self.a} - {self.b} wholly below {-m:+g} agrees, wholly at or above disagrees"
            )
        return ours, verdict, rule

    def _tie(self, records: Records) -> bool:
        """Both sides at the same floor or ceiling on every converged seed and unit, whatever their
        numbers of converged seeds (2 of 3 against 3 of 3, both 0 of 384: a tie)."""
        found = _pair(records, self.a, self.b, self.task, self.column)
        return found is not None and stats.bounded(self.column) and floor_tie(found[0], found[1])

    def evidence(self, records: Records) -> Judged:
        if _pair(records, self.a, self.b, self.task, self.column) is None:
            return NOT_TESTED
        if self._tie(records):
            return Judged(math.nan, math.nan, uninformative=True)
        m = self.margin
        # the line a - b is tested against, and whether the claim says a - b lies above it
        line, above = {(True, "<"): (m, False), (True, ">"): (-m, True), (False, ">"): (m, True),
                       (False, "<"): (-m, False)}[(self.non_inferior, self.side)]  # fmt: skip
        p_above, p_below = _one_sided(records, self.a, self.b, self.task, self.column, line)
        return Judged(p_above, p_below) if above else Judged(p_below, p_above)


@dataclass(frozen=True)
class Ranking:
    """The paper's order (best first) checked pair by pair on one column (higher = better)."""

    order: tuple[str, ...]
    tasks: tuple[str, ...]
    column: str
    scores: dict[str, float] = field(default_factory=dict)  # the paper's numbers, for display

    def judge(self, records: Records) -> tuple[str, str, str]:
        pairs_per_task = [
            (task, itertools.combinations(self.order, 2))
            for task in self.tasks  # paper: better > worse
        ]
        agree, disagree, undecided = _tally(records, pairs_per_task, self.column)
        pairs = agree + disagree + undecided
        measured = [task for task in self.tasks if any(r["spec"]["task"] == task for r in records)]
        rule = (
            "each pair of encodings in the paper's order, Welch t over seeds with a Benjamini-Hochberg "
            "correction over the claim's pairs (5%); agrees if no decided pair disagrees and more pairs "
            "agree than are undecided (disagrees: the reverse), mixed if decided pairs go both ways, else "
            "inconclusive"
        )
        if not pairs:
            return "fewer than 2 encodings measured", NOT_MEASURED, rule
        verdict = ranking_verdict(agree, disagree, undecided)
        ours = f"{agree} pair(s) agree, {disagree} disagree, {undecided} undecided ({', '.join(measured)})"
        return ours, verdict, rule

    def evidence(self, records: Records) -> Judged:
        """More than half of the measured pairs decided in the paper's order (or against it), Holm within
        the claim: :func:`posenc.results.verdict_rules.ordered_p`."""
        pairs = [(task, a, b) for task in self.tasks for a, b in itertools.combinations(self.order, 2)]
        return _most_pairs(records, pairs, self.column, everyone=False)


def _tally(records: Records, pairs_per_task: Sequence[tuple[str, Any]], column: str) -> tuple[int, int, int]:
    """``(agree, disagree, undecided)`` over pairs ``(better, worse)`` per task with runs on both
    sides: each pair's test (:func:`posenc.results.stats.pair_test`), the p-values corrected together
    (Benjamini-Hochberg); a pair with fewer than 2 seeds on a side, or a tie, is undecided."""
    tests = []
    for task, pairs in pairs_per_task:
        for better, worse in pairs:
            d = stats.pair_test(records, better, worse, task=task, column=column)
            if d.measured:
                tests.append(d)
    adjusted = stats.adjust([d.p if d.testable and not d.tie else math.nan for d in tests])
    agree = sum(1 for d, q in zip(tests, adjusted) if q < stats.ALPHA and d.diff > 0)
    disagree = sum(1 for d, q in zip(tests, adjusted) if q < stats.ALPHA and d.diff < 0)
    return agree, disagree, len(tests) - agree - disagree


def ranking_verdict(agree: int, disagree: int, undecided: int) -> str:
    """A ranking's verdict from its pairs: decided ones must outnumber the undecided."""
    if agree and disagree:
        return MIXED
    if agree > undecided:
        return AGREES
    if disagree > undecided:
        return DISAGREES
    return INCONCLUSIVE


@dataclass(frozen=True)
class Groups:
    """Every encoding of ``better`` against every one of ``worse`` on one column (higher =
    better), pairs with runs on both sides, tested as :func:`_tally` does: agrees only if every
    pair is decided for ``better``, disagrees only if every pair is decided for ``worse``, mixed
    if pairs are decided both ways, else inconclusive."""

    better: tuple[str, ...]
    worse: tuple[str, ...]
    task: str
    column: str
    what: str = ""

    def judge(self, records: Records) -> tuple[str, str, str]:
        agree, disagree, undecided = _tally(
            records, [(self.task, itertools.product(self.better, self.worse))], self.column
        )
        rule = (
            f"each pair ({', '.join(self.better)}) x ({', '.join(self.worse)}): Welch t over seeds, "
            "Benjamini-Hochberg over the pairs (5%); agrees only if every pair is decided for the first group"
        )
        pairs = agree + disagree + undecided
        if not pairs:
            return "no pair with converged runs on both sides", NOT_MEASURED, rule
        if agree == pairs:
            verdict = AGREES
        elif disagree == pairs:
            verdict = DISAGREES
        else:
            verdict = MIXED if agree and disagree else INCONCLUSIVE
        ours = f"{agree} pair(s) agree, {disagree} disagree, {undecided} undecided"
        return ours + (f"; {self.what}" if self.what else ""), verdict, rule

    def evidence(self, records: Records) -> Judged:
        """Every pair in the claim's direction (or every one against it): the largest one-sided p-value
        of the pairs (an intersection-union test, no correction within the claim)."""
        pairs = [(self.task, a, b) for a, b in itertools.product(self.better, self.worse)]
        return _most_pairs(records, pairs, self.column, everyone=True)


def _most_pairs(
    records: Records, pairs: Sequence[tuple[str, str, str]], column: str, *, everyone: bool
) -> Judged:
    """Evidence that the pairs ``(task, better, worse)`` with runs on both sides are ordered as the claim
    says: every one of them (``everyone``: the largest p), or more than half (Holm's ``ordered_p``)."""
    present = {(stats.run_label(r, v), r["spec"]["task"]) for r in records for v in r["result"]["eval"]}
    found = [
        _one_sided(records, a, b, task, column, 0.0)
        for task, a, b in pairs
        if (a, task) in present and (b, task) in present and _pair(records, a, b, task, column) is not None
    ]
    if not found:
        return NOT_TESTED
    better, worse = ([f[i] for f in found] for i in (0, 1))
    if everyone:
        if any(math.isnan(p) for p in better):
            return NOT_TESTED
        return Judged(max(better), max(worse))
    needed = len(found) // 2 + 1
    return Judged(ordered_p(better, needed), ordered_p(worse, needed))


@dataclass(frozen=True)
class Converges:
    """How many seeds of ``a`` learn the task in-distribution (converge) against ``b``: Boschloo's
    exact test on the two counts (``scipy.stats.boschloo_exact``), one-sided at 2.5%.
    ``side=">"``: a converges more often; ``">="``: at least as often (shown only by a converging
    more often; equal counts at 0 or at every seed are uninformative, and a significantly lower
    count disagrees)."""

    a: str
    b: str
    task: str
    side: str = ">"

    def _flags(self, records: Records) -> tuple[list[bool], list[bool]]:
        def flags(label: str) -> list[bool]:
            return [stats.converged(r) for r in records
                    if r["label"] == label and r["spec"]["task"] == self.task]  # fmt: skip

        return flags(self.a), flags(self.b)

    def evidence(self, records: Records) -> Judged:
        fa, fb = self._flags(records)
        if len(fa) < 2 or len(fb) < 2:
            return NOT_TESTED
        ka, kb = sum(fa), sum(fb)
        if (ka, kb) in ((0, 0), (len(fa), len(fb))):
            return Judged(math.nan, math.nan, uninformative=True)
        sp = stats.scipy_stats()
        table = [[ka, len(fa) - ka], [kb, len(fb) - kb]]
        more = float(sp.boschloo_exact(table, alternative="greater").pvalue)
        less = float(sp.boschloo_exact(table, alternative="less").pvalue)
        return Judged(more, less)

    def judge(self, records: Records) -> tuple[str, str, str]:
        fa, fb = self._flags(records)
        rule = (
            f"seeds converged in-distribution, {self.a} against {self.b}: Boschloo's exact test, "
            f"one-sided at {ONE_SIDED:.1%} each way; fewer than 2 runs on a side: undecided; both at 0 "
            "or at every seed: uninformative"
        )
        if not fa or not fb:
            return "not run", NOT_MEASURED, rule
        ka, kb = sum(fa), sum(fb)
        ours = f"{self.a}: {ka}/{len(fa)} seeds converged, {self.b}: {kb}/{len(fb)} ({self.task})"
        if len(fa) < 2 or len(fb) < 2:
            return ours, UNDECIDED, rule
        if (ka, kb) in ((0, 0), (len(fa), len(fb))):
            return ours + TIE, UNINFORMATIVE, rule
        sp = stats.scipy_stats()
        table = [[ka, len(fa) - ka], [kb, len(fb) - kb]]
        more = float(sp.boschloo_exact(table, alternative="greater").pvalue)
        less = float(sp.boschloo_exact(table, alternative="less").pvalue)
        ours += f"; Boschloo p = {more:.3f} (more often), {less:.3f} (less often)"
        if more < ONE_SIDED:
            return ours, AGREES, rule
        if less < ONE_SIDED:
            return ours, DISAGREES, rule
        return ours, INCONCLUSIVE, rule


@dataclass(frozen=True)
class SeedRatio:
    """A per-seed number from two runs of the same seed (e.g. steps/s of a over b),
    against a line, with a t interval over seeds."""

    a: str
    b: str
    task: str
    key: str  # a key of record["result"]["timing"]
    threshold: float
    side: str

    def _ratios(self, records: Records) -> list[float]:
        def by_seed(label: str) -> dict[int, float]:
            return {
                r["spec"]["seed"]: float(r["result"]["timing"][self.key])
                for r in records
                if r["label"] == label
                and r["spec"]["task"] == self.task
                and r["result"].get("timing", {}).get(self.key)
            }

        a, b = by_seed(self.a), by_seed(self.b)
        return [a[s] / b[s] for s in sorted(set(a) & set(b)) if b[s]]

    def evidence(self, records: Records) -> Judged:
        return _per_seed_evidence(self._ratios(records), self.threshold, self.side)

    def judge(self, records: Records) -> tuple[str, str, str]:
        c = stats.per_seed(self._ratios(records))
        rule = f"per-seed {self.key} of {self.a} over {self.b}; interval wholly {self.side} {self.threshold:g} agrees"
        if not c.measured:
            return "not run", NOT_MEASURED, rule
        if c.n < 2:
            return f"{c.mean:.2f}x ({self.task}, 1 seed)", UNDECIDED, FEW_SEEDS
        ours = f"{c.mean:.2f}x [{c.low:.2f}, {c.high:.2f}] ({self.task}, {_seeds(c.n)})"
        return ours, stats.verdict_vs(c, self.threshold, self.side), rule


def _lm_window_nats(record: dict[str, Any], variant: str, length: int) -> float | None:
    ev = record["result"]["eval"].get(variant)
    if ev is None or length not in ev["lengths"]:
        return None
    values = [stats.number(v) for v in ev["window_nats"][ev["lengths"].index(length)]]
    return float(np.mean(values)) if values else None


@dataclass(frozen=True)
class BaselineRatio:
    """Perplexity of a scaling of a trained model (``variant`` of the ``label`` runs, e.g. PI after
    its fine-tune) at ``multiple`` x L_train over the *unscaled* model's perplexity at L_train, per
    seed: so a scaling cannot "hold" by degrading its own baseline. t interval over seeds against
    ``threshold`` on ``side``."""

    label: str
    variant: str
    multiple: int
    threshold: float
    side: str = "<="
    what: str = ""

    def _ratios(self, records: Records) -> list[float]:
        ratios = []
        for r in records:
            if r["label"] != self.label or r["spec"]["task"] != "lm" or not stats.converged(r):
                continue
            l_train = r["spec"]["train"]["max_len"]
            base = _lm_window_nats(r, "default", l_train)
            scaled = _lm_window_nats(r, self.variant, self.multiple * l_train)
            if base is not None and scaled is not None:
                ratios.append(math.exp(scaled - base))
        return ratios

    def evidence(self, records: Records) -> Judged:
        return _per_seed_evidence(self._ratios(records), self.threshold, self.side)

    def judge(self, records: Records) -> tuple[str, str, str]:
        c = stats.per_seed(self._ratios(records))
        rule = (
            f"perplexity of {self.label}[{self.variant}] at {self.multiple}x L_train over the unscaled "
            f"{self.label} at L_train, per seed; interval wholly {self.side} {self.threshold:g} agrees"
        )
        if not c.measured:
            return "not measured", NOT_MEASURED, rule
        if c.n < 2:
            return f"{c.mean:.2f} (1 seed)", UNDECIDED, FEW_SEEDS
        ours = f"{c.mean:.2f} [{c.low:.2f}, {c.high:.2f}] ({_seeds(c.n)})" + (
            f"; {self.what}" if self.what else ""
        )
        return ours, stats.verdict_vs(c, self.threshold, self.side), rule


@dataclass(frozen=True)
class LastkRise:
    """Last-k loss at ``multiple`` x L_train relative to 1x (the NoPE paper's protocol):
    ``explodes`` (rise above ``threshold``) or holds; t interval over converged seeds."""

    label: str
    multiple: float
    threshold: float
    explodes: bool

    def _rises(self, records: Records) -> list[float]:
        rises = []
        for r in records:
            if r["label"] != self.label or r["spec"]["task"] != "lm" or not stats.converged(r):
                continue
            lk = r["result"]["eval"]["default"]["lastk"]
            l_train = r["spec"]["train"]["max_len"]
            loss = {c / l_train: float(v) for c, v in zip(lk["contexts"], lk["nats_per_byte"])}
            if 1.0 in loss and self.multiple in loss and loss[1.0] > 0:
                rises.append(loss[self.multiple] / loss[1.0] - 1)
        return rises

    def evidence(self, records: Records) -> Judged:
        return _per_seed_evidence(self._rises(records), self.threshold, ">=" if self.explodes else "<=")

    def judge(self, records: Records) -> tuple[str, str, str]:
        c = stats.per_seed(self._rises(records))
        side = ">=" if self.explodes else "<="
        rule = f"last-k loss at {self.multiple:g}x vs 1x L_train; interval wholly {side} {100 * self.threshold:+.0f}% agrees"
        if not c.measured:
            return f"no converged run measured at {self.multiple:g}x", NOT_MEASURED, rule
        if c.n < 2:
            return f"{100 * c.mean:+.0f}% loss at {self.multiple:g}x (1 seed)", UNDECIDED, FEW_SEEDS
        ours = f"{100 * c.mean:+.0f}% [{100 * c.low:+.0f}, {100 * c.high:+.0f}] loss at {self.multiple:g}x ({_seeds(c.n)})"
        return ours, stats.verdict_vs(c, self.threshold, side), rule


def _per_seed_evidence(values: Sequence[float], threshold: float, side: str) -> Judged:
    p_for, p_against = per_seed_p(values, threshold, side)
    return NOT_TESTED if math.isnan(p_for) else Judged(p_for, p_against)


#: A test's ``"type"`` in the file -> its class (the file's other keys are the class's fields).
TESTS: dict[str, type] = {
    "threshold": Threshold,
    "compare": Compare,
    "ranking": Ranking,
    "groups": Groups,
    "converges": Converges,
    "seed_ratio": SeedRatio,
    "lastk_rise": LastkRise,
    "baseline_ratio": BaselineRatio,
}
#: The sides each test type reads (what the paper says: higher, lower, at least, at most).
SIDES: dict[type, tuple[str, ...]] = {
    Threshold: (">=", "<="),
    Compare: (">", "<"),
    Converges: (">", ">="),
    SeedRatio: (">=", "<="),
    BaselineRatio: (">=", "<="),
}
