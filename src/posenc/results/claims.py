"""Published claims next to what the benchmark measured, judged with seed-level tests.

The claims are data: ``claims.json`` next to this module lists each claim (source, what
it says, what the paper reports, the scale it was made at, and a *test* saying how our records
judge it: a ``type`` of :data:`TESTS` and that class's fields), and :func:`load_claims` reads it
into the :class:`Claim` entries of :data:`CLAIMS`. An entry is added by adding one to the file (or
``CLAIMS.append(Claim(...))``; a new test type is a class with a ``judge(records)`` method, beside
the others in :mod:`posenc.results.claim_tests`). Every
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
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.analysis import notes
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import MISSING, Where, read_json, typed
from posenc.results import stats
from posenc.results.claim_tests import (
    AGREES,
    DISAGREES,
    FEW_SEEDS,
    INCONCLUSIVE,
    MIXED,
    NOT_AT_SCALE,
    NOT_MEASURED,
    ONE_SIDED,
    SIDES,
    TESTS,
    TIE,
    TIE_RULE,
    UNDECIDED,
    UNINFORMATIVE,
    VERDICTS,
    BaselineRatio,
    Compare,
    Converges,
    Groups,
    LastkRise,
    Ranking,
    Records,
    SeedRatio,
    Test,
    Threshold,
    fmt_cell,
    ranking_verdict,
)
from posenc.results.verdict_rules import Judged, family_verdicts
from posenc.tasks import ALL_TASKS


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

    def judged(self, records: Records) -> tuple[str, str, str, Judged]:
        """``(ours, the test's own verdict, rule, evidence)`` before the family's correction."""
        fixed = self.scale is not None and self.scale.fixed_steps and not isinstance(self.test, Converges)
        counted = _fixed_steps(records) if fixed else records
        ours, verdict, rule = self.test.judge(counted)
        if fixed and any(not stats.converged(r) for r in records):
            rule += "; the paper trains for fixed steps, so a run that did not converge counts as it scored"
        return ours, verdict, rule, self.test.evidence(counted)

    def row(
        self,
        records: Records,
        family: tuple[str, float] | None = None,
        judged: tuple[str, str, str, Judged] | None = None,
    ) -> dict[str, str]:
        """The claim's row: what we measured, the verdict and its rule. ``family``: the verdict and
        Holm-adjusted p-value the table's family of claims gives it (:func:`claims` passes it, with what
        :meth:`judged` gave; alone, the claim is a family of one)."""
        ours, own, rule, evidence = judged or self.judged(records)
        family = family or family_verdicts([evidence])[0]
        verdict = _verdict(own, family)
        if verdict in (AGREES, DISAGREES, INCONCLUSIVE) and not math.isnan(family[1]):
            ours += f"; Holm-adjusted p {family[1]:.2g}"
            rule += f"; {FAMILY_RULE}"
        run = run_scale(records, self.test)
        scale = ""
        if self.scale is not None:
            scale = f"paper: {self.scale.describe()}; run: {_scale_text(*run.values()) or 'not recorded'}"
            if not reaches(run, self.scale):
                ours += f" ({scale})"  # on every verdict: an agreement at a smaller scale says so too
                if verdict == DISAGREES:
                    verdict = NOT_AT_SCALE
                    rule += (
                        "; the paper's scale is beyond the run's, so a disagreement does not contradict it"
                    )
        return {"source": self.source, "claim": self.claim, "paper": self.paper, "ours": ours,
                "verdict": verdict, "rule": rule, "scale": scale}  # fmt: skip


#: How a claim of a table is decided (the family's rule, in each row's rule and under the table).
FAMILY_RULE = (
    "one-sided p-values for and against the claim from its test, Holm's method over the table's claims "
    "at 5%: agrees or disagrees only where the adjusted p-value is below 5% in that direction"
)


def _verdict(own: str, family: tuple[str, float]) -> str:
    """A claim's verdict: its test's where the test could not judge (not measured, undecided, a floor
    tie), else the family's; a ranking whose decided pairs go both ways stays mixed."""
    if own in (NOT_MEASURED, UNDECIDED, UNINFORMATIVE):
        return own
    verdict, _ = family
    if verdict == UNINFORMATIVE:
        return UNINFORMATIVE
    if verdict == INCONCLUSIVE and own == MIXED:
        return MIXED
    return verdict


# ---------------------------------------------------------------------------
# The claims themselves: data (claims.json next to this module).
# ---------------------------------------------------------------------------

CLAIMS_FILE = "claims.json"


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
    family = _family_rows(records)  # the notes' claims judged in the family of the table they stand in
    offset = len(_PAPERS)
    for j, (measure, claim) in enumerate(NOTES_CLAIMS):
        if offset + j in family:
            by_measure.setdefault(measure, []).append((claim, family[offset + j]))
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
    as not measured. The claims shown are one family: their p-values are corrected together
    (Holm, :func:`posenc.results.verdict_rules.family_verdicts`)."""
    return list(_family_rows(records).values())


def _family_rows(records: Records) -> dict[int, dict[str, str]]:
    """``{index in CLAIMS: row}`` of the claims shown for ``records``, judged as one family."""
    present = _present(records)
    shown = [(i, claim) for i, claim in enumerate(CLAIMS) if _shown(claim.test, present)]
    judged = [claim.judged(records) for _, claim in shown]
    family = family_verdicts([j[3] for j in judged])
    return {i: claim.row(records, found, j) for (i, claim), found, j in zip(shown, family, judged)}


def caption(rows: list[dict[str, str]]) -> str:
    """What the claims table's verdicts mean (under its count)."""
    return (
        f"Each claim's test gives one-sided p-values for and against it; the {len(rows)} claims are one family, "
        "corrected together by Holm's method at 5%: a claim agrees or disagrees only where its Holm-adjusted "
        "p-value (in its row) is below 5% in that direction, else it is inconclusive (mixed: a ranking whose "
        "decided pairs go both ways). Uninformative: both sides at the same floor or ceiling on every seed and "
        "example. A claim made at a scale the run does not reach names both scales whatever its verdict, and "
        "a disagreement there reads not reproduced at this scale."
    )


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


__all__ = [
    "AGREES",
    "CLAIMS",
    "CLAIMS_FILE",
    "DISAGREES",
    "FEW_SEEDS",
    "INCONCLUSIVE",
    "MIXED",
    "NOTES_CLAIMS",
    "NOTES_VERDICTS",
    "NOT_AT_SCALE",
    "NOT_MEASURED",
    "ONE_SIDED",
    "SCALE_SHARE",
    "SIDES",
    "TESTS",
    "TIE",
    "TIE_RULE",
    "UNDECIDED",
    "UNINFORMATIVE",
    "VERDICTS",
    "BaselineRatio",
    "Claim",
    "Compare",
    "Converges",
    "Groups",
    "LastkRise",
    "Ranking",
    "Records",
    "Scale",
    "SeedRatio",
    "Test",
    "Threshold",
    "caption",
    "claims",
    "fmt_cell",
    "load_claims",
    "notes_measurements",
    "ranking_verdict",
    "reaches",
    "run_scale",
]
