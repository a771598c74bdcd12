"""Published claims next to what the benchmark measured, judged with intervals.

The claims are data: ``claims.json`` next to this module lists each claim (source, what
it says, what the paper reports, and a *test* saying how our records judge it: a ``type``
of :data:`TESTS` and that class's fields), and :func:`load_claims` reads it into the
:class:`Claim` entries of :data:`CLAIMS`. An entry is added by adding one to the file (or
``CLAIMS.append(Claim(...))``; a new test type is a class with a ``judge(records)`` method). Every test reads cells through
:mod:`posenc.results.stats`, so only converged runs count, and a verdict is

- ``agrees`` / ``disagrees`` only where the 95% interval lies wholly on one side,
- ``inconclusive`` where it straddles the line, or where a claim that one side is
  better meets an exact tie (both at 0% past training, say),
- ``mixed`` (rankings) where some decided pairs agree and others disagree,
- ``not measured`` where the runs are missing or none converged.

The tests compare directions and orderings, never absolute numbers: a 150k-parameter
CPU model is not a 247M-parameter WikiText model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from posenc.analysis import notes
from posenc.checks import did_you_mean
from posenc.datafiles import MISSING, Where, read_json, typed
from posenc.results import stats
from posenc.results.stats import Cell
from posenc.tasks import ALL_TASKS

#: A claim that one side is *better* meets an exact tie (both sides identical on every
#: resample, e.g. both 0% at 2x or both converging on every seed): the task cannot tell
#: them apart, so the claim is neither supported nor refuted. (A claim that one side is
#: *at least as good* is what a tie shows, and agrees.)
TIE = "; a tie: identical on every seed and example"
TIE_RULE = "an exact tie (both sides at the same floor or ceiling) cannot show that one side is better"
VERDICTS = ("agrees", "disagrees", "inconclusive", "mixed", "not measured")

Records = Sequence[dict[str, Any]]


class Test(Protocol):
    def judge(self, records: Records) -> tuple[str, str, str]:
        """``(what we measured, verdict, the rule)``."""
        ...


@dataclass(frozen=True)
class Claim:
    source: str  # the paper (authors, year, setting)
    claim: str  # what it says, in one line
    paper: str  # what it reports
    test: Test  # how our records judge it

    def row(self, records: Records) -> dict[str, str]:
        ours, verdict, rule = self.test.judge(records)
        return {"source": self.source, "claim": self.claim, "paper": self.paper, "ours": ours,
                "verdict": verdict, "rule": rule}  # fmt: skip


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def fmt_cell(c: Cell, percent: bool) -> str:
    if not c.runs:
        return "no runs"
    if not c.measured:
        return "not converged"
    if percent:
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
        return ours, stats.verdict_vs(c, self.threshold, self.side), rule


@dataclass(frozen=True)
class Compare:
    """Cell ``a`` against cell ``b``: the interval of a - b against ``margin`` on ``side``.

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
        d = stats.difference(records, self.a, self.b, task=self.task, column=self.column)
        pct = _percent(self.column)
        scale = 100 if pct else 1
        unit = " points" if pct else ""
        if not d.measured:
            ours = "not converged or not run"
            return ours, "not measured", ""
        ours = (
            f"{self.a} - {self.b}: {scale * d.mean:+.2f} [{scale * d.low:+.2f}, {scale * d.high:+.2f}]{unit}"
        )
        ours += f"; {self.what}" if self.what else ""
        m = self.margin
        if not self.non_inferior and d.low == d.high == 0:
            return ours + TIE, "inconclusive", TIE_RULE
        if self.non_inferior:  # a no worse than b by more than the margin
            if self.side == "<":
                verdict = "agrees" if d.high <= m else ("disagrees" if d.low > m else "inconclusive")
                rule = f"interval of {self.a} - {self.b} wholly <= {m:+g} agrees, wholly above disagrees"
            else:
                verdict = "agrees" if d.low >= -m else ("disagrees" if d.high < -m else "inconclusive")
                rule = f"interval of {self.a} - {self.b} wholly >= {-m:+g} agrees, wholly below disagrees"
        elif self.side == ">":
            verdict = "agrees" if d.low > m else ("disagrees" if d.high <= m else "inconclusive")
            rule = f"interval of {self.a} - {self.b} wholly above {m:+g} agrees, wholly at or below disagrees"
        else:
            verdict = "agrees" if d.high < -m else ("disagrees" if d.low >= -m else "inconclusive")
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
            "each pair of converged encodings in the paper's order: the 95% interval of the difference "
            "decides it or not; agrees if no decided pair disagrees and more pairs agree than are "
            "undecided (disagrees: the reverse), mixed if decided pairs go both ways, else inconclusive"
        )
        if not pairs:
            return "fewer than 2 converged encodings", "not measured", rule
        verdict = ranking_verdict(agree, disagree, undecided)
        ours = f"{agree} pair(s) agree, {disagree} disagree, {undecided} undecided ({', '.join(measured)})"
        return ours, verdict, rule


def _tally(records: Records, pairs_per_task: Sequence[tuple[str, Any]], column: str) -> tuple[int, int, int]:
    """``(agree, disagree, undecided)`` over pairs ``(better, worse)`` per task, each pair with
    converged runs on both sides decided by the 95% interval of better - worse (others skipped)."""
    agree = disagree = undecided = 0
    for task, pairs in pairs_per_task:
        for better, worse in pairs:
            d = stats.difference(records, better, worse, task=task, column=column)
            if not d.measured:
                continue
            if d.low > 0:
                agree += 1
            elif d.high < 0:
                disagree += 1
            else:
                undecided += 1
    return agree, disagree, undecided


def ranking_verdict(agree: int, disagree: int, undecided: int) -> str:
    """A ranking's verdict from its pairs: decided ones must outnumber the undecided."""
    if agree and disagree:
        return "mixed"
    if agree > undecided:
        return "agrees"
    if disagree > undecided:
        return "disagrees"
    return "inconclusive"


@dataclass(frozen=True)
class Groups:
    """Every encoding of ``better`` against every one of ``worse`` on one column (higher =
    better), pairs with converged runs on both sides: agrees only if the interval decides
    every pair for ``better``, disagrees only if it decides every pair for ``worse``, mixed
    if it decides pairs both ways, else inconclusive."""

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
            f"each converged pair ({', '.join(self.better)}) x ({', '.join(self.worse)}): the 95% interval of "
            "the difference decides it or not; agrees only if every pair is decided for the first group"
        )
        pairs = agree + disagree + undecided
        if not pairs:
            return "no pair with converged runs on both sides", "not measured", rule
        if agree == pairs:
            verdict = "agrees"
        elif disagree == pairs:
            verdict = "disagrees"
        else:
            verdict = "mixed" if agree and disagree else "inconclusive"
        ours = f"{agree} pair(s) agree, {disagree} disagree, {undecided} undecided"
        return ours + (f"; {self.what}" if self.what else ""), verdict, rule


@dataclass(frozen=True)
class Converges:
    """How many seeds of ``a`` learn the task in-distribution (converge) against ``b``: the
    interval of the difference in converged fractions (bootstrap over each side's seeds).
    ``side=">"``: a converges more often; ``">="``: at least as often."""

    a: str
    b: str
    task: str
    side: str = ">"

    def judge(self, records: Records) -> tuple[str, str, str]:
        def flags(label: str) -> np.ndarray:
            return np.asarray([float(stats.converged(r)) for r in records
                               if r["label"] == label and r["spec"]["task"] == self.task])  # fmt: skip

        fa, fb = flags(self.a), flags(self.b)
        rule = (
            f"seeds converged in-distribution, {self.a} minus {self.b} (fractions); interval wholly "
            f"{'above' if self.side == '>' else 'at or above'} 0 agrees, wholly on the other side disagrees"
        )
        if not len(fa) or not len(fb):
            return "not run", "not measured", rule
        low, high = stats.bootstrap_interval(
            lambda sa, sb: fa[sa].mean(-1) - fb[sb].mean(-1), (len(fa), len(fb))
        )
        ours = f"{self.a}: {int(fa.sum())}/{len(fa)} seeds converged, {self.b}: {int(fb.sum())}/{len(fb)} ({self.task})"
        if self.side == ">":
            if low == high == 0:
                return ours + TIE, "inconclusive", TIE_RULE
            verdict = "agrees" if low > 0 else ("disagrees" if high <= 0 else "inconclusive")
        else:
            verdict = "agrees" if low >= 0 else ("disagrees" if high < 0 else "inconclusive")
        return ours, verdict, rule


@dataclass(frozen=True)
class SeedRatio:
    """A per-seed number from two runs of the same seed (e.g. steps/s of a over b),
    against a line, with a bootstrap interval over seeds."""

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
            return "not run", "not measured", rule
        ours = f"{c.mean:.2f}x [{c.low:.2f}, {c.high:.2f}] ({self.task}, {_seeds(c.n)})"
        return ours, stats.verdict_vs(c, self.threshold, self.side), rule


@dataclass(frozen=True)
class LastkRise:
    """Last-k loss at ``multiple`` x L_train relative to 1x (the NoPE paper's protocol):
    ``explodes`` (rise above ``threshold``) or holds; interval over converged seeds."""

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
            return f"no converged run measured at {self.multiple:g}x", "not measured", rule
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
}
#: The sides each test type reads (what the paper says: higher, lower, at least, at most).
SIDES: dict[type, tuple[str, ...]] = {
    Threshold: (">=", "<="),
    Compare: (">", "<"),
    Converges: (">", ">="),
    SeedRatio: (">=", "<="),
}


@dataclass(frozen=True)
class _Paper:  # an entry of "papers"
    source: str
    claim: str
    paper: str
    test: dict[str, Any]


@dataclass(frozen=True)
class _Note:  # an entry of "notes": the source is the notes' own ids for the measure
    measure: str
    claim: str
    paper: str
    test: dict[str, Any]


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


def load_claims(data: Any = None) -> tuple[list[Claim], list[tuple[str, Claim]]]:
    """``(papers' claims, [(measure, notes claim)])`` from :data:`CLAIMS_FILE` (or ``data``, its
    parsed form); a bad entry is one PosencError naming the entry and the key."""
    where = Where(CLAIMS_FILE)
    data = read_json("posenc.results", CLAIMS_FILE) if data is None else data
    if not isinstance(data, dict) or set(data) != {"about", "papers", "notes"}:
        raise where.error("(top level)", MISSING, 'must be an object with "about", "papers" and "notes"')
    papers = []
    for i, raw in enumerate(data["papers"]):
        entry = typed(_Paper, raw, where, prefix=f"papers[{i}].")
        papers.append(
            Claim(entry.source, entry.claim, entry.paper, _test(entry.test, where, f"papers[{i}].test"))
        )
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
        notes_claims.append((note.measure, Claim(_notes_source(note.measure), note.claim, note.paper, test)))
    return papers, notes_claims


_PAPERS, NOTES_CLAIMS = load_claims()
#: Every claim judged: the papers', then the notes' about trained models (judged on the copy
#: task, 2x bucket: up to twice the longest training n; "extrapolates" reads as exact match of
#: at least 50% there, "excellent" as at least 90%, "fails" as at most 10%). A list: append a
#: :class:`Claim` to judge one more.
CLAIMS: list[Claim] = [*_PAPERS, *(claim for _, claim in NOTES_CLAIMS)]

#: A notes claim's verdict from the benchmark's: intervals decide, nothing else.
NOTES_VERDICTS = {
    "agrees": notes.HOLDS,
    "disagrees": notes.CONTRADICTED,
    "inconclusive": notes.INCONCLUSIVE,
    "mixed": notes.INCONCLUSIVE,
}


def notes_measurements(records: Records) -> dict[str, tuple[str, str]]:
    """``{measure: (verdict, text)}`` for :func:`posenc.analysis.notes.with_measurements`.

    A measure's rows (:data:`NOTES_CLAIMS`) that ran: it *holds* if every measured row
    agrees, is *contradicted* if every measured row disagrees, else *inconclusive*; a
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
            f"{c.claim}: {r['ours']} ({r['verdict']})" for c, r in rows if r["verdict"] != "not measured"
        )
        unmeasured = [c.claim for c, r in rows if r["verdict"] == "not measured"]
        if unmeasured:
            none = "not measured (no run converged in-distribution)"
            text = f"{text}; {none}: {'; '.join(unmeasured)}" if text else f"{none}: {'; '.join(unmeasured)}"
        if not verdicts:
            out[measure] = (notes.PENDING, f"{text[0].upper()}{text[1:]}.")
        elif verdicts == {notes.HOLDS}:
            out[measure] = (notes.HOLDS, f"Holds: {text}.")
        elif verdicts == {notes.CONTRADICTED}:
            out[measure] = (notes.CONTRADICTED, f"Contradicted: {text}.")
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
    tasks = getattr(test, "tasks", None) or (getattr(test, "task", None) or "lm",)
    return {(label, task) for label in labels for task in tasks}
