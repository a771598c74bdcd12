"""Published claims next to what the benchmark measured, judged with intervals.

The claims are data: :data:`CLAIMS` is a list of :class:`Claim` entries (source, what
it says, what the paper reports, and a *test* saying how our records judge it), so
an entry is added by appending one (``CLAIMS.append(Claim(...))`` or a new test type
with a ``judge(records)`` method). Every test reads cells through
:mod:`posenc.bench.stats`, so only converged runs count, and a verdict is

- ``agrees`` / ``disagrees`` only where the 95% interval lies wholly on one side,
- ``inconclusive`` where it straddles the line,
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

from posenc.bench import stats
from posenc.bench.stats import Cell

HOLDS = 1.10  # a perplexity ratio <= this counts as "holds" (does not degrade)
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


def fmt_cell(c: Cell, percent: bool) -> str:
    if not c.runs:
        return "no runs"
    if not c.measured:
        return "not converged"
    if percent:
        text = f"{100 * c.mean:.0f}% [{100 * c.low:.0f}, {100 * c.high:.0f}]"
    else:
        text = f"{c.mean:.2f} [{c.low:.2f}, {c.high:.2f}]"
    return text + (f" ({c.n}/{c.runs} seeds converged)" if c.n < c.runs else f" ({c.n} seeds)")


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
        agree = disagree = undecided = 0
        for task in self.tasks:
            present = [
                n for n in self.order if stats.cell(records, label=n, task=task, column=self.column).measured
            ]
            for better, worse in itertools.combinations(present, 2):  # paper: better > worse
                d = stats.difference(records, better, worse, task=task, column=self.column)
                if d.low > 0:
                    agree += 1
                elif d.high < 0:
                    disagree += 1
                else:
                    undecided += 1
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
        ours = f"{c.mean:.2f}x [{c.low:.2f}, {c.high:.2f}] ({self.task}, {c.n} seeds)"
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
        ours = f"{100 * c.mean:+.0f}% [{100 * c.low:+.0f}, {100 * c.high:+.0f}] loss at {self.multiple:g}x ({c.n} seeds)"
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


def claims(records: Records) -> list[dict[str, str]]:
    """One row per claim of :data:`CLAIMS` whose runs are in ``records``: a claim is left out
    (rather than shown as not measured) unless every encoding it names ran, or for a
    ranking at least two of them. A claim whose runs ran but did not converge stays, as
    not measured."""
    labels = {stats.run_label(r, v) for r in records for v in r["result"]["eval"]}
    rows = []
    for claim in CLAIMS:
        named = _labels_of(claim.test)
        ranking = isinstance(claim.test, Ranking)
        if named and (len(named & labels) < 2 if ranking else not named <= labels):
            continue
        rows.append(claim.row(records))
    return rows


def _labels_of(test: Any) -> set[str]:
    out = set()
    for name in ("label", "a", "b"):
        value = getattr(test, name, None)
        if isinstance(value, str):
            out.add(value)
    out.update(getattr(test, "order", ()))
    return out
