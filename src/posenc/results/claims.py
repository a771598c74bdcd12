"""Published claims next to what the benchmark measured, judged with seed-level tests.

The claims are data: ``claims.json`` next to this module lists each claim (source, what
it says, what the paper reports, the scale it was made at, and a *test* saying how our records
judge it: a ``type`` of :data:`TESTS` and that class's fields), and :func:`load_claims` reads it
into the :class:`Claim` entries of :data:`CLAIMS`. An entry is added by adding one to the file (or
``CLAIMS.append(Claim(...))``; a new test type is a class with a ``judge(records)`` method). Every
test reads cells through :mod:`posenc.results.stats` (intervals and tests over seeds), and a
verdict is

- ``agrees`` / ``disagrees`` only where a test decides (a 95% interval wholly on one side of the
  line; for a ranking or a group, pairs that differ after a Benjamini-Hochberg correction over the
  claim's pairs; for convergence counts Boschloo's exact test at 2.5% one-sided),
- ``inconclusive`` where it does not, ``mixed`` (rankings) where decided pairs go both ways,
- ``undecided`` with fewer than 2 converged seeds on a side (no spread to test against),
- ``uninformative`` where both sides sit at the same floor or ceiling on every seed and example
  (the task cannot tell them apart, so neither "better" nor "as good" is shown),
- ``not reproduced at this scale`` in place of ``disagrees`` where the paper's scale (parameters,
  training length, steps: :class:`Scale`) is beyond the run's (less than half of it); both scales
  are named,
- ``not measured`` where the runs are missing or none converged.

Where the paper trains for a fixed number of steps (:attr:`Scale.fixed_steps`: the ALiBi, NoPE
and randomized-positions papers), a run that did not converge in-distribution counts with what it
scored (a failure, ranked as such), not dropped; elsewhere only converged runs count.

The tests compare directions and orderings, never absolute numbers: a 150k-parameter
CPU model is not a 247M-parameter WikiText model.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from posenc.analysis import notes
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import MISSING, Where, read_json, typed
from posenc.results import stats
from posenc.results.stats import Cell
from posenc.tasks import ALL_TASKS

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


@dataclass(frozen=True)
class Scale:
    """The scale a claim was made at (None: not stated) and whether its paper trains for a fixed
    number of steps (a run that does not converge is then a failure, not an absence)."""

    what: str
    parameters: float | None = None
    train_length: int | None = None  # tokens (LM) or the longest training n (tasks)
    steps: int | None = None
    fixed_steps: bool = False

    def describe(self) -> str:
        return _scale_text(self.parameters, self.train_length, self.steps) or "no scale stated"


def _count(x: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:g}"


def _scale_text(parameters: float | None, length: float | None, steps: float | None) -> str:
    parts = []
    if parameters:
        parts.append(f"{_count(parameters)} parameters")
    if length:
        parts.append(f"trained at length {length:g}")
    if steps:
        parts.append(f"{_count(steps)} steps")
    return ", ".join(parts)


#: A run reaches a paper's scale when each stated dimension is at least this share of the paper's.
SCALE_SHARE = 0.5


def run_scale(records: Records, test: Any) -> dict[str, float | None]:
    """The scale of the runs a test reads: median parameters, longest training length, median steps."""
    cells = _cells_of(test)
    runs = [
        r
        for r in records
        if any((stats.run_label(r, v), r["spec"]["task"]) in cells for v in r["result"]["eval"])
    ]

    def median(values: list[float]) -> float | None:
        values = [v for v in values if v]
        return float(np.median(values)) if values else None

    return {
        "parameters": median([r["result"].get("num_parameters") or 0 for r in runs]),
        "train_length": median([r["spec"]["train"]["max_len"] for r in runs]),
        "steps": median([r["result"]["train"].get("steps") or 0 for r in runs]),
    }


def reaches(run: dict[str, float | None], scale: Scale) -> bool:
    """True when every dimension the paper states is at least :data:`SCALE_SHARE` of it in the run
    (a dimension the run does not record is not held against it)."""
    for key in ("parameters", "train_length", "steps"):
        paper, ours = getattr(scale, key), run.get(key)
        if paper and ours and ours < SCALE_SHARE * paper:
            return False
    return True


def _fixed_steps(records: Records) -> list[dict[str, Any]]:
    """The records with every run counted as it scored (a paper that trains for fixed steps)."""
    out = []
    for r in records:
        if stats.converged(r):
            out.append(r)
            continue
        r = copy.copy(r)
        r["result"] = dict(r["result"], train=dict(r["result"]["train"], converged=True))
        out.append(r)
    return out


@dataclass(frozen=True)
class Claim:
    source: str  # the paper (authors, year, setting)
    claim: str  # what it says, in one line
    paper: str  # what it reports
    test: Test  # how our records judge it
    scale: Scale | None = None  # the scale the claim was made at

    def row(self, records: Records) -> dict[str, str]:
        fixed = self.scale is not None and self.scale.fixed_steps and not isinstance(self.test, Converges)
        ours, verdict, rule = self.test.judge(_fixed_steps(records) if fixed else records)
        if fixed and any(not stats.converged(r) for r in records):
            rule += "; the paper trains for fixed steps, so a run that did not converge counts as it scored"
        run = run_scale(records, self.test)
        scale = ""
        if self.scale is not None:
            scale = f"paper: {self.scale.describe()}; run: {_scale_text(*run.values()) or 'not recorded'}"
            if verdict == DISAGREES and not reaches(run, self.scale):
                verdict = NOT_AT_SCALE
                ours += f" ({scale})"
                rule += "; the paper's scale is beyond the run's, so a disagreement does not contradict it"
        return {"source": self.source, "claim": self.claim, "paper": self.paper, "ours": ours,
                "verdict": verdict, "rule": rule, "scale": scale}  # fmt: skip


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
        if d.tie:
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

    def judge(self, records: Records) -> tuple[str, str, str]:
        def flags(label: str) -> list[bool]:
            return [stats.converged(r) for r in records
                    if r["label"] == label and r["spec"]["task"] == self.task]  # fmt: skip

        fa, fb = flags(self.a), flags(self.b)
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
        sp = stats._scipy_stats()
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

    def judge(self, records: Records) -> tuple[str, str, str]:
        def by_seed(label: str) -> dict[int, float]:
            return {
                r["spec"]["seed"]: float(r["result"]["timing"][self.key])
                for r in records
                if r["label"] == label
                and r["spec"]["task"] == self.task
                and r["result"]["timing"].get(self.key)
            }

        a, b = by_seed(self.a), by_seed(self.b)
        ratios = [a[s] / b[s] for s in sorted(set(a) & set(b)) if b[s]]
        c = stats.per_seed(ratios)
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
    values = [stats._num(v) for v in ev["window_nats"][ev["lengths"].index(length)]]
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

    def judge(self, records: Records) -> tuple[str, str, str]:
        ratios = []
        for r in records:
            if r["label"] != self.label or r["spec"]["task"] != "lm" or not stats.converged(r):
                continue
            l_train = r["spec"]["train"]["max_len"]
            base = _lm_window_nats(r, "default", l_train)
            scaled = _lm_window_nats(r, self.variant, self.multiple * l_train)
            if base is not None and scaled is not None:
                ratios.append(math.exp(scaled - base))
        c = stats.per_seed(ratios)
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

    def judge(self, records: Records) -> tuple[str, str, str]:
        rises = []
        for r in records:
            if r["label"] != self.label or r["spec"]["task"] != "lm" or not stats.converged(r):
                continue
            lk = r["result"]["eval"]["default"]["lastk"]
            l_train = r["spec"]["train"]["max_len"]
            loss = {c / l_train: float(v) for c, v in zip(lk["contexts"], lk["nats_per_byte"])}
            if 1.0 in loss and self.multiple in loss and loss[1.0] > 0:
                rises.append(loss[self.multiple] / loss[1.0] - 1)
        c = stats.per_seed(rises)
        side = ">=" if self.explodes else "<="
        rule = f"last-k loss at {self.multiple:g}x vs 1x L_train; interval wholly {side} {100 * self.threshold:+.0f}% agrees"
        if not c.measured:
            return f"no converged run measured at {self.multiple:g}x", NOT_MEASURED, rule
        if c.n < 2:
            return f"{100 * c.mean:+.0f}% loss at {self.multiple:g}x (1 seed)", UNDECIDED, FEW_SEEDS
        ours = f"{100 * c.mean:+.0f}% [{100 * c.low:+.0f}, {100 * c.high:+.0f}] loss at {self.multiple:g}x ({_seeds(c.n)})"
        return ours, stats.verdict_vs(c, self.threshold, side), rule


# ---------------------------------------------------------------------------
# The claims themselves: data (claims.json next to this module).
# ---------------------------------------------------------------------------

CLAIMS_FILE = "claims.json"
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


@dataclass(frozen=True)
class _Paper:  # an entry of "papers"
    source: str
    claim: str
    paper: str
    test: dict[str, Any]
    scale: str | None = None  # a key of "scales"


@dataclass(frozen=True)
class _Note:  # an entry of "notes": the source is the notes' own ids for the measure
    measure: str
    claim: str
    paper: str
    test: dict[str, Any]
    scale: str | None = None  # a key of "scales"


def _notes_source(measure: str) -> str:
    ids = [c.id for c in notes.CLAIMS if c.measure == measure]
    return f"The notes posenc was built from ({', '.join(ids)}; docs/notes.md)"


def _columns(task: str) -> tuple[str, ...]:
    """The columns a claim may judge: the summary's, and for tasks every unseen length together
    (``out``: up to 4x) and every one up to 2x (``to2x``)."""
    if task == "lm":
        return stats.columns(task)
    wider = (stats.UNSEEN[0], stats.UP_TO_2X[0])
    return (*stats.columns(task), *(f"{metric}_{name}" for metric in ("em", "tok") for name in wider))


def _test(raw: dict[str, Any], where: Where, key: str) -> Test:
    kind = raw.get("type")
    if kind not in TESTS:
        raise where.error(f"{key}.type", kind, f"one of {', '.join(TESTS)}{did_you_mean(kind, TESTS)}")
    cls = TESTS[kind]
    test = typed(cls, {k: v for k, v in raw.items() if k != "type"}, where, prefix=f"{key}.")
    side = getattr(test, "side", None)
    if side is not None and side not in SIDES[cls]:
        raise where.error(f"{key}.side", side, f"one of {', '.join(SIDES[cls])} for a {kind} test")
    column = getattr(test, "column", None)
    tasks = getattr(test, "tasks", None) or ([test.task] if hasattr(test, "task") else [])  # LastkRise: LM
    for task in tasks:
        if task not in ALL_TASKS:
            raise where.error(f"{key}.task", task, f"not a task; tasks: {', '.join(ALL_TASKS)}")
        if column is not None and column not in _columns(task):
            raise where.error(f"{key}.column", column, f"one of {', '.join(_columns(task))} for {task}")
    return test


def _scale(name: str | None, scales: dict[str, Scale], where: Where, key: str) -> Scale | None:
    if name is None:
        return None
    if name not in scales:
        raise where.error(key, name, f"one of the scales: {', '.join(scales)}{did_you_mean(name, scales)}")
    return scales[name]


def load_claims(data: Any = None) -> tuple[list[Claim], list[tuple[str, Claim]]]:
    """``(papers' claims, [(measure, notes claim)])`` from :data:`CLAIMS_FILE` (or ``data``, its
    parsed form); a bad entry is one PosencError naming the entry and the key."""
    where = Where(CLAIMS_FILE)
    data = read_json("posenc.results", CLAIMS_FILE) if data is None else data
    if not isinstance(data, dict) or set(data) != {"about", "scales", "papers", "notes"}:
        raise where.error(
            "(top level)", MISSING, 'must be an object with "about", "scales", "papers" and "notes"'
        )
    if not isinstance(data["scales"], dict):
        raise where.error("scales", data["scales"], "must be an object: name -> scale")
    scales = {
        name: typed(Scale, raw, where, prefix=f"scales.{name}.") for name, raw in data["scales"].items()
    }
    papers = []
    for i, raw in enumerate(data["papers"]):
        entry = typed(_Paper, raw, where, prefix=f"papers[{i}].")
        test = _test(entry.test, where, f"papers[{i}].test")
        scale = _scale(entry.scale, scales, where, f"papers[{i}].scale")
        papers.append(Claim(entry.source, entry.claim, entry.paper, test, scale))
    notes_claims = []
    for i, raw in enumerate(data["notes"]):
        note = typed(_Note, raw, where, prefix=f"notes[{i}].")
        if note.measure not in notes.MEASURES:
            raise where.error(
                f"notes[{i}].measure",
                note.measure,
                f"not a key of posenc.analysis.notes.MEASURES{did_you_mean(note.measure, notes.MEASURES)}",
            )
        test = _test(note.test, where, f"notes[{i}].test")
        scale = _scale(note.scale, scales, where, f"notes[{i}].scale")
        claim = Claim(_notes_source(note.measure), note.claim, note.paper, test, scale)
        notes_claims.append((note.measure, claim))
    return papers, notes_claims


_PAPERS, NOTES_CLAIMS = load_claims()
#: Every claim judged: the papers', then the notes' about trained models (judged on the copy
#: task, 2x bucket: up to twice the longest training n; "extrapolates" reads as exact match of
#: at least 50% there, "excellent" as at least 90%, "fails" as at most 10%). A list: append a
#: :class:`Claim` to judge one more.
CLAIMS: list[Claim] = [*_PAPERS, *(claim for _, claim in NOTES_CLAIMS)]

#: A notes claim's verdict from the benchmark's: tests decide, nothing else (a claim beyond the
#: run's scale is never contradicted by it).
NOTES_VERDICTS = {
    AGREES: notes.HOLDS,
    DISAGREES: notes.CONTRADICTED,
    INCONCLUSIVE: notes.INCONCLUSIVE,
    MIXED: notes.INCONCLUSIVE,
    UNDECIDED: notes.INCONCLUSIVE,
    UNINFORMATIVE: notes.INCONCLUSIVE,
    NOT_AT_SCALE: notes.INCONCLUSIVE,
}


def notes_measurements(records: Records) -> dict[str, tuple[str, str]]:
    """``{measure: (verdict, text)}`` for :func:`posenc.analysis.notes.with_measurements`.

    A measure's rows (:data:`NOTES_CLAIMS`) that ran: it *holds* if every measured row
    agrees, is *contradicted* if every measured row disagrees (within the claim's scale), else
    *inconclusive* (undecided, uninformative or not reproduced at this scale among them); a
    measure none of whose rows were measured (not run, or no seed converged) stays
    pending with what happened. The text quotes each row (claim: ours, verdict).
    """
    by_measure: dict[str, list[tuple[Claim, dict[str, str]]]] = {}
    present = _present(records)
    for measure, claim in NOTES_CLAIMS:
        if _shown(claim.test, present):
            by_measure.setdefault(measure, []).append((claim, claim.row(records)))
    out = {}
    for measure, rows in by_measure.items():
        verdicts = {NOTES_VERDICTS[r["verdict"]] for _, r in rows if r["verdict"] in NOTES_VERDICTS}
        text = "; ".join(
            f"{c.claim}: {r['ours']} ({r['verdict']})" for c, r in rows if r["verdict"] != NOT_MEASURED
        )
        unmeasured = [c.claim for c, r in rows if r["verdict"] == NOT_MEASURED]
        if unmeasured:
            none = "not measured (no run converged in-distribution)"
            text = f"{text}; {none}: {'; '.join(unmeasured)}" if text else f"{none}: {'; '.join(unmeasured)}"
        if not verdicts:
            out[measure] = (notes.PENDING, f"{text[0].upper()}{text[1:]}.")
        elif verdicts == {notes.HOLDS}:
            out[measure] = (notes.HOLDS, f"Holds: {text}.")
        elif verdicts == {notes.CONTRADICTED}:
            out[measure] = (notes.CONTRADICTED, f"Contradicted: {text}.")
        elif all(r["verdict"] in (NOT_AT_SCALE, NOT_MEASURED) for _, r in rows):
            out[measure] = (notes.INCONCLUSIVE, f"Not reproduced at this scale: {text}.")
        else:
            out[measure] = (notes.INCONCLUSIVE, f"Inconclusive: {text}.")
    return out


def claims(records: Records) -> list[dict[str, str]]:
    """One row per claim of :data:`CLAIMS` whose runs are in ``records``: a claim is left out
    (rather than shown as not measured) unless every encoding it names ran on its task, or
    for a ranking at least two of them. A claim whose runs ran but did not converge stays,
    as not measured."""
    present = _present(records)
    return [claim.row(records) for claim in CLAIMS if _shown(claim.test, present)]


def _shown(test: Any, present: set[tuple[str, str]]) -> bool:
    """A ranking needs two of the runs it orders; any other test every run it reads."""
    cells = _cells_of(test)
    if not cells:
        return True
    if isinstance(test, Ranking):
        return len(cells & present) >= 2
    return cells <= present


def _present(records: Records) -> set[tuple[str, str]]:
    """Every (label, task) of the records, scalings included."""
    return {(stats.run_label(r, v), r["spec"]["task"]) for r in records for v in r["result"]["eval"]}


def _cells_of(test: Any) -> set[tuple[str, str]]:
    """The (label, task) pairs a test reads."""
    labels = {
        getattr(test, name) for name in ("label", "a", "b") if isinstance(getattr(test, name, None), str)
    }
    labels.update(getattr(test, "order", ()), getattr(test, "better", ()), getattr(test, "worse", ()))
    if isinstance(test, BaselineRatio):
        labels = {f"{test.label}[{test.variant}]"}
    tasks = getattr(test, "tasks", None) or (getattr(test, "task", None) or "lm",)
    return {(label, task) for label in labels for task in tasks}
