"""Published claims next to what the benchmark measured, judged with intervals.

The claims are data: :data:`CLAIMS` is a list of :class:`Claim` entries (source, what
it says, what the paper reports, and a *test* saying how our records judge it), so
an entry is added by appending one (``CLAIMS.append(Claim(...))`` or a new test type
with a ``judge(records)`` method). Every test reads cells through
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
from posenc.results import stats
from posenc.results.stats import Cell

HOLDS = 1.10  # a perplexity ratio <= this counts as "holds" (does not degrade)
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
    what: str = ""  # e.g. "copy, 2x bucket"

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
        rule = (
            "each pair of converged encodings in the paper's order: the 95% interval of the difference "
            "decides it or not; agrees if no decided pair disagrees and more pairs agree than are "
            "undecided (disagrees: the reverse), mixed if decided pairs go both ways, else inconclusive"
        )
        if not pairs:
            return "fewer than 2 converged encodings", "not measured", rule
        verdict = ranking_verdict(agree, disagree, undecided)
        ours = f"{agree} pair(s) agree, {disagree} disagree, {undecided} undecided ({', '.join(self.tasks)})"
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


ALIBI = "ALiBi paper (Press et al. 2022), WikiText-103, L_train 512"
NOPE = "NoPE paper (Kazemnejad et al. 2023), train <= 20, test <= 40"
EXTENSION = "Context extension (dynamic NTK: emozilla 2023; YaRN: Peng et al. 2023; PI: Chen et al. 2023)"


def _alibi_ratio(name: str, two: float, five: float) -> Claim:
    side = "<=" if two <= HOLDS else ">="
    return Claim(
        ALIBI,
        f"{name}: perplexity ratio at 2x L_train {'holds' if side == '<=' else 'degrades'}",
        f"{two:.2f} at 2x, {five:.2f} at ~5x",
        Threshold(name, "lm", "ratio_2x", HOLDS, side, "LM, 2x L_train"),
    )


def _nope_copy(name: str, high: bool) -> Claim:
    return Claim(
        NOPE + ", copy",
        f"{name}: exact match past the training length is {'high' if high else 'near zero'}",
        "~100%" if high else "~0%",
        Threshold(name, "copy", "em_2x", 0.9 if high else 0.1, ">=" if high else "<=", "copy, 2x bucket"),
    )


CLAIMS: list[Claim] = [
    *(
        _alibi_ratio(n, two, five)
        for n, (two, five) in {
            "sinusoidal": (2.17, 6.6),
            "rope": (1.06, 1.57),
            "t5": (0.96, 1.04),
            "alibi": (0.95, 0.93),
        }.items()
    ),  # fmt: skip
    Claim(
        NOPE,
        "length-generalisation ranking (mean reciprocal rank over 10 tasks)",
        "nope 0.69 > t5 0.55 > alibi 0.50 > rope 0.33 > sinusoidal 0.22",
        Ranking(("nope", "t5", "alibi", "rope", "sinusoidal"), ("copy", "passkey"), "em_out"),
    ),
    *(
        _nope_copy(n, high)
        for n, high in {
            "nope": True,
            "t5": True,
            "rope": False,
            "sinusoidal": False,
            "learned": False,
        }.items()
    ),  # fmt: skip
    *(
        Claim(
            "NoPE paper (Kazemnejad et al. 2023), last-k loss, 1B code model",
            f"{n}: {text}",
            text,
            LastkRise(n, 1.5, 0.10, explodes=n == "rope"),
        )
        for n, text in {
            "rope": "explodes by 1.2-1.4x",
            "nope": "holds to ~1.5x",
            "alibi": "holds to ~1.5x",
        }.items()
    ),  # fmt: skip
    Claim(
        "Randomized positions (Ruoss et al. 2023), 15 tasks",
        "randomized positions improve accuracy on unseen lengths",
        "+12.0% average",
        Compare("rope+rand", "rope", "copy", "tok_out", ">", what="copy, answer-token accuracy past n_train"),
    ),
    Claim(
        EXTENSION,
        "dynamic NTK without fine-tuning holds perplexity where plain RoPE degrades",
        "holds to ~2x the original context",
        Compare("rope[dynamic:4]", "rope", "lm", "ratio_4x", "<", what="LM ratio at 4x"),
    ),
    Claim(
        EXTENSION,
        "dynamic YaRN without fine-tuning holds perplexity where plain RoPE degrades",
        "holds past the original context",
        Compare("rope[yarn-dynamic]", "rope", "lm", "ratio_4x", "<", what="LM ratio at 4x"),
    ),
    *(
        Claim(
            EXTENSION,
            f"{name} after a short fine-tune at 4x L_train holds to 4x",
            "holds at the target length",
            Threshold(f"rope[{scaling}]", "lm", "ratio_4x", HOLDS, "<=", "LM ratio at 4x, after fine-tuning"),
        )
        for name, scaling in (("PI", "linear:4"), ("YaRN", "yarn:4"))
    ),  # fmt: skip
    Claim(
        "ALiBi paper (Press et al. 2022)",
        "T5 bias trains >= 2x slower than sinusoidal",
        ">= 2x",
        SeedRatio("sinusoidal", "t5", "copy", "steps_per_second", 2.0, ">="),
    ),
    *(
        Claim(
            "KERPLE / Sandwich / FIRE papers",
            f"{n} extrapolates at least as well as ALiBi",
            "<= ALiBi",
            Compare(n, "alibi", "lm", "ratio_4x", "<", margin=0.05, non_inferior=True, what="LM ratio at 4x"),
        )
        for n in ("kerple_log", "kerple_power", "sandwich", "fire")
    ),  # fmt: skip
]


# ---------------------------------------------------------------------------
# The notes posenc was built from (posenc.analysis.notes): their claims about trained
# models, each a key of notes.MEASURES judged by one or more claims here.
# ---------------------------------------------------------------------------

COPY_2X = "copy, 2x bucket (n 10..16, trained on n <= 8)"
COPY_IN = "copy, in-distribution (n <= 8)"


def _notes_source(measure: str) -> str:
    ids = [c.id for c in notes.CLAIMS if c.measure == measure]
    return f"The notes posenc was built from ({', '.join(ids)}; docs/notes.md)"


def _n(measure: str, claim: str, paper: str, test: Test) -> tuple[str, Claim]:
    return measure, Claim(_notes_source(measure), claim, paper, test)


def _variant_rows(measure: str, tag: str, says: str, better: bool) -> list[tuple[str, Claim]]:
    """A variant against the default run of each additive encoding the notes discuss,
    in-distribution and at 2x: ``better`` (the variant is higher) or no worse (margin 5 points)."""
    rows = []
    for name in ("sinusoidal", "learned"):
        if better:  # learns the task where the default does not (sinusoidal, unscaled, does not)
            converges: Test = Converges(f"{name}[{tag}]", name, "copy", ">")
        else:
            converges = Converges(name, f"{name}[{tag}]", "copy", ">=")
        rows.append(_n(measure, f"{name}: {says} (learning copy at all)", "no number given", converges))
        for column, what, where in (("em_in", COPY_IN, "in-distribution"), ("em_2x", COPY_2X, "at 2x")):
            if better:
                test: Test = Compare(f"{name}[{tag}]", name, "copy", column, ">", what=what)
            else:  # the default (add) at least as good as the variant, within 5 points
                test = Compare(
                    name, f"{name}[{tag}]", "copy", column, ">", 0.05, non_inferior=True, what=what
                )
            rows.append(_n(measure, f"{name}: {says} ({where})", "no number given", test))
    return rows


#: ``(measure, claim)`` pairs: the notes' claims about trained models, judged on the copy task
#: (2x bucket: up to twice the longest training n). "Extrapolates" reads as exact match of at
#: least 50% there, "excellent" as at least 90% (the NoPE paper's "near 100%"), "fails" as at
#: most 10%.
NOTES_CLAIMS: list[tuple[str, Claim]] = [
    _n("extrapolation:sinusoidal", 'sinusoidal "can extrapolate to longer sequences"', ">= 50% past training",
       Threshold("sinusoidal", "copy", "em_2x", 0.5, ">=", COPY_2X)),
    _n("extrapolation:sinusoidal",
       'sinusoidal "can extrapolate", with token embeddings x sqrt(d_model) as in the original Transformer',
       ">= 50% past training", Threshold("sinusoidal[scaled-emb]", "copy", "em_2x", 0.5, ">=", COPY_2X)),
    _n("extrapolation:learned", 'learned "cannot extrapolate" past its training length', "<= 10% past training",
       Threshold("learned", "copy", "em_2x", 0.1, "<=", COPY_2X + ", untrained rows past n_train")),
    _n("extrapolation:rope", 'RoPE "excellent extrapolation"', ">= 90% past training",
       Threshold("rope", "copy", "em_2x", 0.9, ">=", COPY_2X)),
    _n("extrapolation:t5", 'T5 bias "excellent length extrapolation"', ">= 90% past training",
       Threshold("t5", "copy", "em_2x", 0.9, ">=", COPY_2X)),
    _n("extrapolation:alibi", 'ALiBi "excellent extrapolation"', ">= 90% past training",
       Threshold("alibi", "copy", "em_2x", 0.9, ">=", COPY_2X)),
    _n("extrapolation:integer_index", 'integer positions "don\'t generalise well to unseen lengths"',
       "< 50% past training", Threshold("integer_index", "copy", "em_2x", 0.5, "<=", COPY_2X)),
    _n("extrapolation:relative", "relative encodings (RoPE, T5, ALiBi) generalise to longer sequences "
       "better than absolute ones (sinusoidal, learned)", "better",
       Groups(("rope", "t5", "alibi"), ("sinusoidal", "learned"), "copy", "em_2x", COPY_2X)),
    _n("in_distribution:learned_vs_sinusoidal", 'learned "often works as well as sinusoidal" (learning copy at all)',
       "as well", Converges("learned", "sinusoidal", "copy", ">=")),
    _n("in_distribution:learned_vs_sinusoidal", 'learned "often works as well as sinusoidal"',
       "as well", Compare("learned", "sinusoidal", "copy", "em_in", ">", 0.05, non_inferior=True, what=COPY_IN)),
    *_variant_rows("open:add_vs_concat", "concat", "adding works at least as well as concatenating", better=False),
    *_variant_rows("open:every_layer", "every_layer", "position at every layer works better than at the input only",
                   better=True),
    *_variant_rows("open:warmup", "pe-warmup:200", "fading position in over 200 steps works better", better=True),
    *_variant_rows("open:scaling", "scaled-emb", "token embeddings x sqrt(d_model) (a quieter position "
                   "signal relative to tokens) work better", better=True),
    _n("open:scaling", "a learned gain on the sinusoid (scaled_sinusoidal) works better than the fixed one "
       "(learning copy at all)", "no number given", Converges("scaled_sinusoidal", "sinusoidal", "copy", ">")),
    _n("open:scaling", "a learned gain on the sinusoid (scaled_sinusoidal) works better than the fixed one",
       "no number given", Compare("scaled_sinusoidal", "sinusoidal", "copy", "em_in", ">", what=COPY_IN)),
]  # fmt: skip
CLAIMS += [claim for _, claim in NOTES_CLAIMS]

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
