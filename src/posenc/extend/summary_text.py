"""A summary (:mod:`posenc.extend.summary`) in words: its tables, their caption, and the verdicts it
supports, each naming the statistical test it rests on and the suite's test of that method.

Three tables: perplexity by length (with the cost inside the context), retrieval (``k/n`` and the
exact interval per task and length), and each scaling's effective context length. A summary of
the first releases' layout (one passkey prompt per length and depth, no tests) reads as it did:
its one table and caption.
"""

from __future__ import annotations

from typing import Any

from posenc.extend.summary import CORRECTION, FORMAT, LEVEL, METHOD_TESTS

Table = tuple[str, list[str], list[list[str]]]


def _ppl(cell: dict[str, Any] | None, interval: bool = True) -> str:
    if cell is None:
        return "-"
    value, low, high = cell["value"], cell["low"], cell["high"]
    text = f"{value:.3g}" if value < 1e4 else f"{value:.1e}"
    if interval and cell.get("documents", 2) > 1:
        text += f" [{low:.3g}, {high:.3g}]" if high < 1e4 else f" [{low:.1e}, {high:.1e}]"
    return text


def _new(summary: dict[str, Any]) -> bool:
    return summary.get("format", 1) >= FORMAT


def rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The perplexity table's header and rows (one per scaling; a summary of the first layout adds
    its passkey columns)."""
    lengths = summary["lengths"]
    header = ["scaling", *(f"ppl @{n}" for n in lengths)]
    first: dict[str, Any] = next(iter(summary["inside"].values()), {})
    inside_at = first.get("length")
    if inside_at:
        header.append(f"x ppl of none @{inside_at}")
    legacy = [] if _new(summary) else summary.get("passkey_lengths", [])
    header += [f"passkey @{n}" for n in legacy]
    out = []
    for entry in summary["entries"]:
        label = entry["label"]
        row = [label, *(_ppl(summary["perplexity"][label].get(str(n))) for n in lengths)]
        if inside_at:
            cell = summary["inside"].get(label)
            if cell is None:
                row.append("-")
            elif summary["documents"] > 1:
                row.append(f"{cell['value']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]")
            else:
                row.append(f"{cell['value']:.3f}")
        for n in legacy:
            cell = summary["passkey"][label].get(str(n))
            row.append("-" if cell is None else f"{cell['correct']}/{cell['prompts']}")
        out.append(row)
    return header, out


def _rate(cell: dict[str, Any] | None, task: str) -> str:
    if cell is None:
        return "-"
    text = f"{cell['correct']}/{cell['prompts']} [{cell['low']:.2f}, {cell['high']:.2f}]"
    return text if task == "passkey" else f"{text}, recall {cell['score']:.2f}"


def retrieval_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The retrieval table: one column per task and length, ``k/n [low, high]`` per scaling."""
    cells = [(c["task"], c["length"]) for c in summary.get("tasks", [])]
    header = ["scaling", *(f"{task} @{n}" for task, n in cells)]
    body = [[e["label"], *(_rate(summary["retrieval"][e["label"]].get(task, {}).get(str(n)), task) for task, n in cells)]
            for e in summary["entries"]]  # fmt: skip
    return header, body


def _length(found: dict[str, Any] | None, shortest: int) -> str:
    if found is None:
        return "-"
    if found.get("informative") is False:
        return "- (the reference not shown above the margin)"

    def said(value: int | None) -> str:
        return f"<{shortest}" if value is None else str(value)

    return f"{said(found['length'])} [{said(found['low'])}, {said(found['high'])}]"


def effective_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The effective context length of each scaling, from perplexity and from each task."""
    measures = ["perplexity"] if summary["documents"] > 1 else []
    measures += list(dict.fromkeys(c["task"] for c in summary.get("tasks", [])))
    firsts = {"perplexity": min(summary["lengths"])}
    for cell in summary.get("tasks", []):
        firsts[cell["task"]] = min(firsts.get(cell["task"], cell["length"]), cell["length"])
    header = ["scaling", *(f"from {m}" for m in measures)]
    body = [[e["label"], *(_length(summary["effective"][e["label"]].get(m), firsts[m]) for m in measures)]
            for e in summary["entries"]]  # fmt: skip
    return header, body


def tables(summary: dict[str, Any]) -> list[Table]:
    """``(title, header, rows)`` of every table the summary has (the first has no title)."""
    out: list[Table] = [("", *rows(summary))]
    if not _new(summary):
        return out
    if summary.get("tasks"):
        out.append(("Retrieval: prompts answered right, k/n [95% exact interval]", *retrieval_rows(summary)))
    header, body = effective_rows(summary)
    if len(header) > 1:
        out.append(("Effective context length (tokens) [95% interval]", header, body))
    return out


def _markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in body]


def markdown(summary: dict[str, Any]) -> str:
    lines: list[str] = []
    for title, header, body in tables(summary):
        if title:
            lines += ["", f"**{title}**", ""]
        lines += _markdown_table(header, body)
    return "\n".join(lines) + "\n"


def interval_method(documents: int) -> str:
    """How the intervals over documents are made, in words (captions and figure titles)."""
    if documents < 2:
        return "one document: no interval"
    df = documents - 1
    return f"95% Student t interval over the {documents} documents ({df} degree{'' if df == 1 else 's'} of freedom)"


def _reference(summary: dict[str, Any]) -> str:
    has_none = any(e["key"] == "none" for e in summary["entries"])
    return "plain RoPE's" if has_none else "each scaling's own"


def _new_parts(summary: dict[str, Any]) -> list[str]:
    parts = []
    if summary.get("tasks"):
        parts.append(
            "retrieval: k/n prompts answered right (the passkey exactly; a RULER-style prompt with every expected "
            "string, recall: the mean share found), the same prompts for every scaling, [low, high] the exact "
            "Clopper-Pearson 95% interval"
        )
    margin = summary["margin"]
    parts.append(
        f"effective context length: the longest length up to which every length holds (perplexity within "
        f"{margin['perplexity']:g}x {_reference(summary)} at {min(summary['lengths'])} tokens; a rate within "
        f"{margin['rate']:g} of {_reference(summary)} at the task's shortest length), [low, high]: 95% (low: every "
        "length up to it shown to hold; high: none up to it shown to fail)"
    )
    parts.append(
        f"{len(summary['tests'])} tests between scalings whose tables differ (paired t over documents; McNemar's "
        f"exact test on the same prompts), corrected by {CORRECTION}"
    )
    if summary.get("decides"):
        # the protocol's description as it ran: what it was designed to decide; the records' own
        # verdicts are the "What these records decide" list, which may say less
        parts.append(f"the protocol, as described when it ran: {summary['decides']}")
    return parts


def caption(summary: dict[str, Any]) -> str:
    n = summary["documents"]
    source = (summary.get("model") or {}).get("context_from")  # where the trained context comes from
    parts = [
        f"Perplexity over {n} document(s) truncated to each length, [low, high]: "
        + interval_method(n)
        + (
            ""
            if n == 1
            else " of the per-document mean loss, through exp; with few documents it is wide, and it "
            "speaks for documents of this text, not for text in general"
        ),
        f"trained context {summary['context']} tokens" + (f" ({source})" if source else ""),
    ]
    if summary["inside"]:
        parts.append(
            "'x ppl of none': perplexity relative to plain RoPE inside the context, paired by document"
            + (" (the same t interval over documents)" if n > 1 else "")
        )
    if _new(summary):
        parts += _new_parts(summary)
    elif summary.get("passkey_lengths"):
        depths = ", ".join(f"{d:g}" for d in summary["depths"])
        parts.append(
            f"passkey: prompts answered exactly (depths {depths}; {summary['trials']} trial(s) each)"
        )
    return "; ".join(parts) + "."


def _cite(*methods: str) -> str:
    return " (" + "; ".join(f"`{METHOD_TESTS[m]}`" for m in methods) + ")"


def _found(summary: dict[str, Any], measure: str) -> list[dict[str, Any]]:
    return [f for e in summary["entries"] if (f := summary["effective"][e["label"]].get(measure)) is not None]


def _at_floor(summary: dict[str, Any], measure: str) -> bool:
    """Whether a task's reference is not shown above the margin (then its lengths decide nothing)."""
    found = _found(summary, measure)
    return bool(found) and not all(f.get("informative", True) for f in found)


def _reference_rate(summary: dict[str, Any], measure: str) -> float:
    return float(_found(summary, measure)[0]["reference"])


def _effective_verdict(summary: dict[str, Any], measure: str) -> str | None:
    """Which scalings are shown to hold ``measure`` to its longest length, which to fail before it."""
    found = {e["label"]: summary["effective"][e["label"]].get(measure) for e in summary["entries"]}
    found = {label: f for label, f in found.items() if f is not None}
    if not found:
        return None
    lengths = (
        summary["lengths"]
        if measure == "perplexity"
        else [c["length"] for c in summary["tasks"] if c["task"] == measure]
    )
    longest = max(lengths)
    hold = [label for label, f in found.items() if f["low"] == longest]
    fail = [f"{label} (holds to {f['high'] or 'no length'} at most)" for label, f in found.items()
            if f["high"] is None or f["high"] < longest]  # fmt: skip
    open_ = [
        label for label in found if label not in hold and not any(x.startswith(f"{label} (") for x in fail)
    ]
    said = [f"shown to hold to {longest} tokens: {', '.join(hold) or 'no scaling'}",
            f"shown to fail before {longest}: {', '.join(fail) or 'no scaling'}"]  # fmt: skip
    if open_:
        said.append(f"not decided: {', '.join(open_)}")
    method = "effective perplexity" if measure == "perplexity" else "effective retrieval"
    return f"- **{measure}**: " + "; ".join(said) + "." + _cite(method)


def _test_phrase(test: dict[str, Any], summary: dict[str, Any]) -> str:
    a, b = test["first"], test["second"]
    if test["measure"] == "perplexity":
        return f"{a} {test['ratio']:.3g}x {b}'s perplexity [{test['low']:.3g}, {test['high']:.3g}], p {test['p_adjusted']:.2g}"
    one = summary["retrieval"][a][test["measure"]][str(test["length"])]
    two = summary["retrieval"][b][test["measure"]][str(test["length"])]
    return (
        f"{a} {one['correct']}/{one['prompts']} against {b} {two['correct']}/{two['prompts']} "
        f"({test['first_only']} prompts right only under {a}, {test['second_only']} only under {b}), "
        f"p {test['p_adjusted']:.2g}"
    )


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the summary decides, in Markdown bullets, each naming its test (a summary of the first
    layout decides nothing: none)."""
    if not _new(summary):
        return []
    lines = ["**What these records decide** (at 95%; every test named checks the method):", ""]
    measures = (["perplexity"] if summary["documents"] > 1 else []) + list(
        dict.fromkeys(c["task"] for c in summary["tasks"])
    )
    floor = [m for m in measures if m != "perplexity" and _at_floor(summary, m)]
    lines += [v for v in (_effective_verdict(summary, m) for m in measures if m not in floor) if v]
    if floor:
        references = ", ".join(f"{m} {_reference_rate(summary, m):.2f}" for m in floor)
        lines.append(
            f"- **{', '.join(floor)}**: the reference's rate at the task's shortest length ({references}) is not "
            f"shown to be above the margin of {summary['margin']['rate']:g} (the task at its floor for this model, "
            "or too few prompts to tell), so no length can be shown to hold or to fail: these tasks say nothing "
            "about the scalings here." + _cite("rate")
        )
    tests = summary["tests"]
    decided = [t for t in tests if t["decided"]]
    lines.append(
        f"- **Between scalings**: {len(decided)} of {len(tests)} tests decide (adjusted p < {LEVEL:g}, "
        f"{CORRECTION}){':' if decided else '.'}" + _cite("paired t", "mcnemar", "correction")
    )
    groups: dict[tuple[str, int], list[str]] = {}
    for test in decided:
        groups.setdefault((test["measure"], test["length"]), []).append(_test_phrase(test, summary))
    lines += [
        f"  - {measure} @{length}: " + "; ".join(said) + "." for (measure, length), said in groups.items()
    ]
    return lines


__all__ = [
    "caption",
    "effective_rows",
    "interval_method",
    "markdown",
    "retrieval_rows",
    "rows",
    "tables",
    "verdicts",
]
