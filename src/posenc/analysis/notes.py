"""Every claim of the notes posenc was built from, with its verdict and where to see it.

Five notes: lecture notes, a video script, a notebook summary, an interview answer and a
widely shared tutorial (:data:`NOTES`). :data:`CLAIMS` lists what each says, item by item,
with a verdict; the table is data, ``notes_claims.json`` next to this module, read by
:func:`load_notes` into frozen :class:`NoteClaim` entries (a bad entry is one error naming it):

* ``holds`` / ``corrected`` -- settled by a demonstration of
  :mod:`posenc.analysis.demonstrations` (``check``), one of whose named findings
  (``fact``) is true exactly when the note is right; ``tests/unit/analysis/test_notes.py`` holds every
  row to it;
* ``pending`` -- a claim about trained models that ``posenc compare`` measures
  (``measure``, a key of :data:`MEASURES`); :func:`with_measurements` fills these in from
  benchmark records (:func:`posenc.results.claims.notes_measurements`) as ``holds``,
  ``contradicted`` or ``inconclusive``, decided by tests over seeds;
* ``not checked`` -- outside what posenc models (the text says why).

``truth`` may quote a demonstration's numbers as ``{key.number:format}`` (``{key.number:<1e-12}``
states rounding-level values as a bound); :func:`render_truth` fills them. docs/notes.md is :func:`markdown` (``python
scripts/update_notes_page.py``); the report, ``posenc notes`` and ``posenc show`` read
the same table.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import SimpleNamespace
from typing import Any

from posenc.analysis.demonstrations import DEMONSTRATIONS, Demonstration, run
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import Where, read_json, typed
from posenc.core.errors import PosencError

HOLDS, CORRECTED, PENDING, NOT_CHECKED = "holds", "corrected", "pending", "not checked"
# Verdicts of measured claims (with_measurements): decided only where a test over seeds decides.
CONTRADICTED, INCONCLUSIVE = "contradicted", "inconclusive"
VERDICTS = (HOLDS, CORRECTED, PENDING, NOT_CHECKED, CONTRADICTED, INCONCLUSIVE)
MEASURED_VERDICTS = (HOLDS, CONTRADICTED, INCONCLUSIVE)
PENDING_TEXT = "pending: measured by posenc compare"
#: The measured verdicts shipped with posenc (next to this module).
MEASURED_FILE = "notes_measured.json"


@dataclass(frozen=True)
class NoteClaim:
    id: str  # "L1": note letter + number
    note: str  # key of NOTES
    where: str  # the note's section
    says: str  # what the note claims (quoted or closely paraphrased)
    verdict: str  # one of VERDICTS
    truth: str  # what holds, may quote "{check.number:format}"
    command: str  # where to see it
    check: str | None = None  # key of posenc.analysis.demonstrations.DEMONSTRATIONS
    fact: str | None = None  # the demonstration's finding: True exactly when the note is right
    encoding: str | None = None  # registry name the claim is about (`posenc show NAME` prints it)
    measure: str | None = None  # key of MEASURES (pending claims)


@dataclass(frozen=True)
class Note:
    title: str  # the note, as the page heads it
    label: str  # how running text names it ("the lecture notes")


@dataclass(frozen=True)
class NotesTable:
    """The contents of :data:`CLAIMS_FILE`."""

    about: str
    notes: dict[str, Note]  # key -> the note
    measures: dict[str, str]  # what `posenc compare` measures to settle each pending claim
    claims: tuple[NoteClaim, ...]


#: The claims table, next to this module.
CLAIMS_FILE = "notes_claims.json"


def load_notes(data: Any = None) -> NotesTable:
    """:data:`CLAIMS_FILE` (or ``data``, its parsed form) as a :class:`NotesTable`, every
    reference checked: a claim's note, verdict, measure (pending claims) and demonstration."""
    where = Where(CLAIMS_FILE)
    table = typed(NotesTable, read_json("posenc.analysis", CLAIMS_FILE) if data is None else data, where)
    seen: set[str] = set()
    for i, c in enumerate(table.claims):
        key = f"claims[{i}] ({c.id})"
        if c.id in seen:
            raise where.error(f"{key}.id", c.id, "used by an earlier claim")
        seen.add(c.id)
        for name, value, valid in (
            ("note", c.note, table.notes),
            ("verdict", c.verdict, VERDICTS),
            ("measure", c.measure, table.measures),
            ("check", c.check, DEMONSTRATIONS),
        ):
            if value is not None and value not in valid:
                raise where.error(
                    f"{key}.{name}", value, f"one of {', '.join(valid)}{did_you_mean(value, valid)}"
                )
        if (c.verdict == PENDING) != (c.measure is not None):
            raise where.error(f"{key}.measure", c.measure, "a pending claim names its measure, no other does")
    return table


_TABLE = load_notes()
NOTES: dict[str, str] = {key: note.title for key, note in _TABLE.notes.items()}
LABELS: dict[str, str] = {
    key: note.label for key, note in _TABLE.notes.items()
}  # how running text names each note
MEASURES: dict[str, str] = _TABLE.measures
CLAIMS: tuple[NoteClaim, ...] = _TABLE.claims


def claims(
    *,
    note: str | None = None,
    verdict: str | None = None,
    encoding: str | None = None,
    measured: bool = False,
) -> tuple[NoteClaim, ...]:
    """:data:`CLAIMS` (``measured``: with the shipped measurements, :func:`measured_claims`),
    optionally only one note's, one verdict's or one encoding's."""
    if note is not None and note not in NOTES:
        raise PosencError(f"note must be one of {', '.join(NOTES)}, got {note!r}")
    if verdict is not None and verdict not in VERDICTS:
        raise PosencError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    return tuple(
        c
        for c in (measured_claims() if measured else CLAIMS)
        if (note is None or c.note == note)
        and (verdict is None or c.verdict == verdict)
        and (encoding is None or c.encoding == encoding)
    )


def checks_of(selected: Iterable[NoteClaim]) -> list[str]:
    """Demonstrations the claims need: their ``check`` and every ``{key.number}`` their text quotes."""
    keys: list[str] = []
    for c in selected:
        keys += [c.check] if c.check else []
        keys += [f.split(".")[0] for _, f, _, _ in string.Formatter().parse(c.truth) if f]
    return list(dict.fromkeys(keys))


class _Number(float):
    """A demonstration's number; the format spec ``<1e-12`` prints "< 1e-12" for rounding-level values.

    Rounding noise (1.1e-16 here, 2.2e-16 on another machine) is stated as a bound, so the
    generated page does not depend on the machine that wrote it.
    """

    def __format__(self, spec: str) -> str:
        if spec.startswith("<"):
            bound = float(spec[1:])
            return f"< {spec[1:]}" if abs(self) < bound else format(float(self), ".2g")
        return format(float(self), spec)


def render_truth(claim: NoteClaim, demos: Mapping[str, Demonstration]) -> str:
    """``claim.truth`` with its ``{key.number:format}`` fields filled from ``demos``."""
    spaces = {
        key: SimpleNamespace(**{k: _Number(v) for k, v in demo.numbers.items()})
        for key, demo in demos.items()
    }
    return claim.truth.format(**spaces)


def verdict_text(claim: NoteClaim) -> str:
    return PENDING_TEXT if claim.verdict == PENDING else claim.verdict


def with_measurements(
    measured: Mapping[str, tuple[str, str]],
    selected: Iterable[NoteClaim] = CLAIMS,
    *,
    command: str | None = None,
) -> tuple[NoteClaim, ...]:
    """The claims with pending rows settled: ``measured[measure] = (verdict, truth)``.

    The verdict is one of :data:`MEASURED_VERDICTS` (``holds``, ``contradicted``,
    ``inconclusive``), or ``pending`` with a text saying why nothing was measured.
    Pending claims whose ``measure`` is not in ``measured`` stay as they are; ``command``
    (the run that measured them) replaces the settled rows' ``posenc compare``.
    """
    out = []
    for c in selected:
        if c.verdict == PENDING and c.measure is not None and c.measure in measured:
            verdict, truth = measured[c.measure]
            if verdict not in (*MEASURED_VERDICTS, PENDING):
                raise PosencError(
                    f"a measured verdict must be one of {', '.join(MEASURED_VERDICTS)} (or pending), "
                    f"got {verdict!r} for {c.measure}"
                )
            truth = truth.replace("{", "{{").replace("}", "}}")  # quoted as is by render_truth
            c = replace(c, verdict=verdict, truth=truth, command=command or c.command)
        out.append(c)
    return tuple(out)


def shipped_measurements() -> tuple[str, dict[str, tuple[str, str]]]:
    """``(command, {measure: (verdict, text)})`` shipped with posenc (:data:`MEASURED_FILE`,
    written by ``python scripts/update_notes_page.py --results DIR``); ``("", {})`` if none."""
    try:
        text = resources.files("posenc.analysis").joinpath(MEASURED_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    data = json.loads(text)
    return data["command"], {k: (v[0], v[1]) for k, v in data["measurements"].items()}


def measured_claims(selected: Iterable[NoteClaim] = CLAIMS) -> tuple[NoteClaim, ...]:
    """The claims with the shipped measurements filled in (what the page, ``posenc notes``,
    the report and the tour show)."""
    command, measured = shipped_measurements()
    return with_measurements(measured, selected, command=command or None)


def counts(selected: Iterable[NoteClaim] = CLAIMS) -> dict[str, int]:
    """How many claims have each verdict."""
    found = {v: 0 for v in VERDICTS}
    for c in selected:
        found[c.verdict] += 1
    return found


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_line(selected: Iterable[NoteClaim]) -> str:
    """``"N claims: a hold, b corrected, ..."`` (measured verdicts only when there are any)."""
    selected = tuple(selected)
    total = counts(selected)
    parts = [f"{total[HOLDS]} hold", f"{total[CORRECTED]} corrected"]
    parts += [f"{total[v]} {v}" for v in (CONTRADICTED, INCONCLUSIVE) if total[v]]
    parts += [f"{total[PENDING]} pending (measured by `posenc compare`)", f"{total[NOT_CHECKED]} not checked"]
    return f"{len(selected)} claims: {', '.join(parts)}"


def markdown(
    demos: Mapping[str, Demonstration] | None = None,
    selected: Iterable[NoteClaim] | None = None,
    measured_by: str | None = None,
) -> str:
    """docs/notes.md: every claim, note by note, with verdict, what holds and the command to see it.

    ``selected`` defaults to :func:`measured_claims` (the shipped measurements) and
    ``measured_by`` to the command that made them: the ``posenc compare`` run whose
    records settled the measured claims, named on the page.
    """
    if selected is None:
        selected = measured_claims()
        measured_by = measured_by or shipped_measurements()[0] or None
    selected = tuple(selected)
    demos = demos if demos is not None else run(checks_of(selected))
    lines = [
        "# The notes, claim by claim",
        "",
        "posenc was built from five notes on positional encoding that students and teachers pass",
        "around. This page lists what each of them claims, item by item, with a verdict and the",
        "command that shows it. It is generated from `posenc.analysis.notes.CLAIMS` by",
        "`python scripts/update_notes_page.py`; `tests/unit/analysis/test_notes.py` recomputes every",
        "demonstration and fails when a verdict no longer matches it. The same table is in the",
        "report (`posenc report`) and in `posenc notes`; `posenc show NAME` prints the",
        "corrections about encoding NAME, and the guided tour (`python -m posenc`) the five",
        "errors a reader meets first.",
        "",
        f"**{summary_line(selected)}.**",
        "",
        "Verdicts: *holds* and *corrected* rest on a numeric demonstration (`posenc notes --demo KEY`",
        "prints one); claims about trained models are settled by the train-short / test-long",
        "benchmark (*holds* or *contradicted* only where a test over seeds decides, else",
        "*inconclusive*, as is a claim beyond the benchmark's scale; *pending* until measured);",
        "*not checked* claims are outside what posenc models.",
        "",
        "The tutorial's code runs as `from posenc.reference.tutorial import Embedding, PositionalEncoding`",
        "(its `from src.layers import ...`); `python -m posenc.reference.tutorial` runs its usage",
        "example and its try-it-yourself block.",
    ]
    if measured_by:
        lines += [
            "",
            f"The measured verdicts come from `{measured_by}` (the copy task; `--seeds` in the",
            "command says which training seeds; what each measured row compares, and the open questions in full:",
            'docs/benchmark.md, section "The notes\' claims about trained models").',
            "`python scripts/update_notes_page.py --results DIR` rewrites this page from such a run.",
        ]
    for key, title in NOTES.items():
        rows = [c for c in selected if c.note == key]
        if not rows:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| # | the note says | verdict | what holds | see it |",
            "|---|---|---|---|---|",
        ]
        for c in rows:
            verdict = f"**{c.verdict}**" if c.verdict in (CORRECTED, CONTRADICTED) else verdict_text(c)
            demo = f"posenc notes --demo {c.check}"
            see = f"`{c.command}`" + (f"; `{demo}`" if c.check and c.command != demo else "")
            lines.append(
                f"| {c.id} | {_md(c.says)} <br>*{_md(c.where)}* | {verdict} | {_md(render_truth(c, demos))} | {see} |"
            )
    lines += [
        "",
        "## What posenc compare measures for the pending claims",
        "",
        "| key | measured |",
        "|---|---|",
        *(f"| `{k}` | {_md(v)} |" for k, v in MEASURES.items()),
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "CLAIMS",
    "CONTRADICTED",
    "CORRECTED",
    "NoteClaim",
    "DEMONSTRATIONS",
    "HOLDS",
    "INCONCLUSIVE",
    "LABELS",
    "MEASURED_VERDICTS",
    "MEASURES",
    "NOTES",
    "NOT_CHECKED",
    "PENDING",
    "PENDING_TEXT",
    "VERDICTS",
    "checks_of",
    "claims",
    "counts",
    "markdown",
    "measured_claims",
    "shipped_measurements",
    "render_truth",
    "summary_line",
    "verdict_text",
    "with_measurements",
]
