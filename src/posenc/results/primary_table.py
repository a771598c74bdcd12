"""The primary questions of a summary as a table (Markdown for the docs, a rich Table for the terminal)
with the lines under it: each column's detectable difference, the rows whose seeds split into learned
and not learned, and what the numbers mean (:mod:`posenc.results.primary` computes them)."""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from posenc.records.columns import bounded
from posenc.records.questions import TESTS
from posenc.results.primary import TEST_NAMES
from posenc.results.tables import column_header

HEAD = ("question", "difference [95% interval]", "seeds", "p", "Holm p", "decided")
SEQUENTIAL_HEAD = (
    "question",
    "difference [95% interval]",
    "seeds",
    "p at each look",
    "decided at",
    "decided",
)


def _p(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2g}" if value < 0.01 else f"{value:.2f}"


def _level(value: float) -> str:
    """A test's level as a percentage: ``0.625%``."""
    return f"{100 * value:.3g}%"


def _difference(entry: dict[str, Any]) -> str:
    diff, low, high = (entry.get(k, math.nan) for k in ("diff", "low", "high"))
    if diff is None or math.isnan(diff):
        return "-"
    if bounded(entry["column"]):
        return f"{100 * diff:+.0f} pts [{100 * low:+.0f}, {100 * high:+.0f}]"
    return f"{diff:+.2f} [{low:+.2f}, {high:+.2f}]"


def _decided(entry: dict[str, Any]) -> str:
    if not entry["decided"]:
        return "no"
    ahead = entry["label"] if entry["diff"] > 0 else entry["reference"]
    return f"yes: {ahead} higher"


def rows(block: dict[str, Any]) -> list[list[str]]:
    """One row of cells per question (:data:`HEAD`, or :data:`SEQUENTIAL_HEAD` for a sequential block)."""
    out = []
    for e in block["questions"]:
        name = f"{e['label']} - {e['reference']}, {column_header(e['task'], e['column'])}"
        seeds = " / ".join(str(n) for n in e["seeds"])
        if block["mode"] == "sequential":
            looks = ", ".join(f"{k}: {_p(p)}" for k, p in zip(block["looks_done"], e["p_looks"]))
            at = f"{e['decided_at']} seeds" if e.get("decided_at") else "-"
            out.append([name, _difference(e), seeds, looks or "-", at, _decided(e)])
        else:
            out.append([name, _difference(e), seeds, _p(e["p"]), _p(e["p_holm"]), _decided(e)])
    return out


def _detectable(key: str, col: dict[str, Any]) -> str:
    task, column = key.split(":", 1)
    header = column_header(task, column)
    found, seeds = col["detectable"], col["seeds"]
    if col.get("seeds_to_reach"):
        return (
            f"{header}: none at {seeds} seeds per encoding (the exact test's smallest p, {_p(col['exact_floor'])}, "
            f"is above {_level(col['level'])}; {col['seeds_to_reach']} seeds reach it)"
        )
    if found is None or math.isnan(found) or math.isinf(found):
        return f"{header}: -"
    shown = f"{100 * found:.0f} pts" if bounded(column) else f"{found:.2f}"
    return f"{header}: {shown} at {seeds} seeds"


def notes(block: dict[str, Any]) -> list[str]:
    """The lines under the table: detectable differences, split seeds, and what it all means."""
    cols = [column_header(*key.split(":", 1)) for key in block["columns"]]
    tests = {TEST_NAMES[c["test"]] for c in block["columns"].values() if c["test"] in TESTS}
    lines = [
        f"*detectable* (80% power at {_level(block['level'])}): "
        + "; ".join(_detectable(k, c) for k, c in block["columns"].items())
        + "."
    ]
    learned = block.get("learned") or {}
    if learned:
        parts = [
            f"{column_header(*key.split(':', 1))}: "
            + ", ".join(f"{lab} {k}/{n}" for lab, (k, n) in rows_.items())
            for key, rows_ in learned.items()
        ]
        lines.append(
            "Seeds that learned the bucket (a mean of at least 50% on that seed), where a row's seeds split: "
            + "; ".join(parts)
            + ". There the mean mixes seeds that learned and seeds that did not; only a test with an exact "
            "floor holds for such seeds."
        )
    recycled = ", recycled over the looks" if block["mode"] == "sequential" else ""
    lines.append(
        f"Primary questions, declared by the profile: each encoding against {block['reference']} in "
        f"{', '.join(cols)} ({block['family']} questions), their family-wise error held at "
        f"{_level(block['alpha'])} by Holm's method{recycled} (each question tested at {_level(block['level'])} "
        f"or more); tests: {'; '.join(sorted(tests))}. "
        + _mode_text(block)
        + " *detectable*: the difference the question's test finds with 80% power at Holm's first level "
        "with these seeds, from the column's pooled seed spread (its upper 70% confidence bound: one seed "
        "SD from 3 seeds averages 0.85 of the truth). Every other cell and pair below is exploratory: its "
        "tests are corrected over the table, not for these questions."
    )
    return lines


def _mode_text(block: dict[str, Any]) -> str:
    if block["mode"] != "sequential":
        return "decided: Holm-adjusted p below the level (the sign of the difference says which way)."
    plan = block["plan"]
    done = ", ".join(map(str, block["looks_done"])) or "none"
    left = f"; undecided: {len(block['undecided'])}" if block["undecided"] else "; every question decided"
    return (
        f"Seeds added in looks (posenc compare --until decided): looks after {', '.join(map(str, plan['looks']))} "
        f"seeds per encoding, the error spent {plan['spending']} (Lan-DeMets) over them, so a question may stop "
        f"early with its error rate held; looks done: {done}{left}. decided at: seeds per encoding at the look at which "
        "its p-value reached that look's level."
    )


def markdown(block: dict[str, Any]) -> str:
    """The block as Markdown: the table, then :func:`notes`."""
    head = SEQUENTIAL_HEAD if block["mode"] == "sequential" else HEAD
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(block)]
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes(block)) + "\n"


def render(block: dict[str, Any], *, title: str = "primary questions") -> Table:
    """The block as a rich Table (the terminal), :func:`notes` as its caption."""
    head = SEQUENTIAL_HEAD if block["mode"] == "sequential" else HEAD
    table = Table(title=title, caption=" ".join(notes(block)))
    for i, name in enumerate(head):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows(block):
        table.add_row(*(escape(cell) for cell in row))
    return table
