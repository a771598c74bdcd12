"""What the records of a grid show: perplexity by length, the cost inside the context, passkey
retrieval, loss by position; as ``summary.json``, a Markdown table and figures.

Perplexity at length ``L`` of one document is ``exp`` of the mean loss of its first ``L`` tokens
(each given all tokens before it: the YaRN paper's sliding-window perplexity of a document
truncated to the window, whose one window scores every token). Over documents: ``exp`` of the
mean of the per-document mean losses, with the 95% Student t interval over documents of those
means (:func:`posenc.results.stats.per_seed`: ``n - 1`` degrees of freedom for ``n`` documents),
mapped through ``exp``. With few documents it is wide (the t quantile is 12.7 for two documents,
4.3 for three), and it speaks for documents like these (the same text source), not for text in
general; with one document there is none. The loss-by-position curve has the same interval per
bin of positions.

The cost inside the trained context is the ratio of a scaling's perplexity to plain RoPE's at
the longest length within the context, paired by document (``exp`` of the mean per-document
difference of mean losses, the same t interval). Passkey accuracy is the share of prompts answered
exactly, per length (all depths and trials) and per length x depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.extend.plan import Plan
from posenc.extend.scalings import Entry, tables_key
from posenc.results.stats import per_seed

BINS = 64  # loss-by-position curve: bins over the longest length


def _interval(values: Sequence[float]) -> dict[str, float]:
    cell = per_seed(values)
    return {"value": math.exp(cell.mean), "low": math.exp(cell.low), "high": math.exp(cell.high)}


def summarize(
    plan: Plan,
    results: dict[str, dict[str, Any]],
    *,
    entries: list[Entry],
    lengths: tuple[int, ...],
    documents: int,
    context: int,
    passkey_lengths: tuple[int, ...],
    depths: tuple[float, ...],
    trials: int,
    longrope: dict[str, Any] | None,
) -> dict[str, Any]:
    """Every number the table and figures show, from ``results`` (run id -> record result)."""

    def doc_means(entry: Entry, length: int) -> list[float] | None:
        key = plan.text_tables[(entry.key, length)]
        means = []
        for index in range(documents):
            result = results.get(plan.text_cells[(key, index)])
            if result is None:
                return None
            means.append(float(np.mean(result["nll"][: length - 1])))
        return means

    perplexity: dict[str, dict[str, Any]] = {}
    for entry in entries:
        row: dict[str, Any] = {}
        for length in lengths:
            means = doc_means(entry, length)
            if means is not None:
                row[str(length)] = {**_interval(means), "documents": len(means)}
        perplexity[entry.label] = row

    inside = _inside(entries, lengths, context, doc_means)

    passkey = {
        e.label: _passkey_row(plan, results, e, passkey_lengths, depths, trials, context, longrope)
        for e in entries
    }
    curves = _curves(plan, results, entries, lengths, documents)
    return {
        "context": context,
        "lengths": list(lengths),
        "documents": documents,
        "passkey_lengths": list(passkey_lengths),
        "depths": list(depths),
        "trials": trials,
        "entries": [{"label": e.label, "key": e.key} for e in entries],
        "perplexity": perplexity,
        "inside": inside,
        "passkey": passkey,
        "loss_by_position": curves,
    }


def _inside(
    entries: list[Entry],
    lengths: tuple[int, ...],
    context: int,
    doc_means: Callable[[Entry, int], list[float] | None],
) -> dict[str, Any]:
    """Each entry's perplexity relative to plain RoPE's at the longest length inside the context,
    paired by document (empty without plain RoPE or a length inside)."""
    inside: dict[str, Any] = {}
    within = [length for length in lengths if length <= context]
    base = next((e for e in entries if e.name == "none"), None)
    if within and base is not None:
        at = max(within)
        reference = doc_means(base, at)
        for entry in entries:
            mine = doc_means(entry, at)
            if reference is not None and mine is not None:
                inside[entry.label] = {"length": at, **_interval([a - b for a, b in zip(mine, reference)])}
    return inside


def _passkey_row(
    plan: Plan,
    results: dict[str, dict[str, Any]],
    entry: Entry,
    passkey_lengths: tuple[int, ...],
    depths: tuple[float, ...],
    trials: int,
    context: int,
    longrope: dict[str, Any] | None,
) -> dict[str, Any]:
    """One entry's passkey results per length: accuracy over depths and trials, and per depth."""
    row: dict[str, Any] = {}
    for length in passkey_lengths:
        key = tables_key(entry.at(length, context, longrope))
        by_depth: dict[str, list[bool]] = {}
        for depth in depths:
            for trial in range(trials):
                where = plan.passkey_forks.get((key, length, depth, trial))
                result = results.get(where[0]) if where else None
                if result is not None and where is not None:
                    by_depth.setdefault(repr(depth), []).append(bool(result["answers"][where[1]]["correct"]))
        answered = [x for xs in by_depth.values() for x in xs]
        if answered:
            row[str(length)] = {
                "accuracy": sum(answered) / len(answered),
                "correct": sum(answered),
                "prompts": len(answered),
                "by_depth": {d: sum(xs) / len(xs) for d, xs in by_depth.items()},
            }
    return row


def _curves(
    plan: Plan,
    results: dict[str, dict[str, Any]],
    entries: list[Entry],
    lengths: tuple[int, ...],
    documents: int,
) -> dict[str, Any]:
    """Loss by position over the longest pass per entry: [first, last position, mean, low, high] per bin."""
    longest = max(lengths)
    curves: dict[str, Any] = {}
    edges = np.linspace(1, longest, BINS + 1).round().astype(int)
    for entry in entries:
        key = plan.text_tables[(entry.key, longest)]
        rows = [results.get(plan.text_cells[(key, i)]) for i in range(documents)]
        if any(r is None for r in rows):
            continue
        nll = np.asarray([r["nll"][: longest - 1] for r in rows if r is not None], dtype=float)
        curve = []
        for a, b in zip(edges[:-1], edges[1:]):
            if b > a:  # [first, last position, mean loss, low, high] over documents
                cell = per_seed(nll[:, a - 1 : b - 1].mean(axis=1))
                curve.append([int(a), int(b), cell.mean, cell.low, cell.high])
        curves[entry.label] = curve
    return curves


def _ppl(cell: dict[str, Any] | None, interval: bool = True) -> str:
    if cell is None:
        return "-"
    value, low, high = cell["value"], cell["low"], cell["high"]
    text = f"{value:.3g}" if value < 1e4 else f"{value:.1e}"
    if interval and cell.get("documents", 2) > 1:
        text += f" [{low:.3g}, {high:.3g}]" if high < 1e4 else f" [{low:.1e}, {high:.1e}]"
    return text


def rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows (one per scaling)."""
    lengths = summary["lengths"]
    header = ["scaling", *(f"ppl @{n}" for n in lengths)]
    first: dict[str, Any] = next(iter(summary["inside"].values()), {})
    inside_at = first.get("length")
    if inside_at:
        header.append(f"x ppl of none @{inside_at}")
    header += [f"passkey @{n}" for n in summary["passkey_lengths"]]
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
        for n in summary["passkey_lengths"]:
            cell = summary["passkey"][label].get(str(n))
            row.append("-" if cell is None else f"{cell['correct']}/{cell['prompts']}")
        out.append(row)
    return header, out


def markdown(summary: dict[str, Any]) -> str:
    header, body = rows(summary)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def interval_method(documents: int) -> str:
    """How the intervals over documents are made, in words (captions and figure titles)."""
    if documents < 2:
        return "one document: no interval"
    df = documents - 1
    return f"95% Student t interval over the {documents} documents ({df} degree{'' if df == 1 else 's'} of freedom)"


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
    if summary["passkey_lengths"]:
        depths = ", ".join(f"{d:g}" for d in summary["depths"])
        parts.append(
            f"passkey: prompts answered exactly (depths {depths}; {summary['trials']} trial(s) each)"
        )
    return "; ".join(parts) + "."


def figures(summary: dict[str, Any], out: Path) -> dict[str, str]:
    """``perplexity.png``, ``loss_by_position.png`` and ``passkey.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    labels = [e["label"] for e in summary["entries"]]
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    files = {"perplexity": _perplexity_figure(summary, labels, colors, out / "perplexity.png")}
    if summary["loss_by_position"]:
        files["loss_by_position"] = _loss_figure(summary, colors, out / "loss_by_position.png")
    if summary["passkey_lengths"]:
        files["passkey"] = _passkey_figure(summary, labels, out / "passkey.png")
    return files


def _figure(size: tuple[float, float]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _perplexity_figure(summary: dict[str, Any], labels: list[str], colors: dict[str, str], path: Path) -> str:
    """Perplexity by evaluation length per scaling, with the interval over documents as a band."""
    from matplotlib.ticker import NullLocator

    context = summary["context"]
    fig = _figure((7.5, 4.5))
    ax = fig.add_subplot()
    for label in labels:
        row = summary["perplexity"][label]
        xs = [int(n) for n in row]
        if not xs:
            continue
        ys = [row[str(n)]["value"] for n in xs]
        ax.plot(xs, ys, marker="o", label=label, color=colors[label])
        ax.fill_between(xs, [row[str(n)]["low"] for n in xs], [row[str(n)]["high"] for n in xs],
                        alpha=0.15, color=colors[label])  # fmt: skip
    ax.axvline(context, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    measured = sorted({int(n) for label in labels for n in summary["perplexity"][label]})
    if measured:  # ticks at the lengths measured, in tokens ("16384", not "2^14")
        ax.set_xticks(measured, [str(n) for n in measured])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity")
    method = interval_method(summary["documents"])
    ax.set_title(f"Perplexity by length (dashed: trained context {context})\nbands: {method}", fontsize=10)
    if ax.get_lines()[1:]:  # a line besides the context marker
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)


def _loss_figure(summary: dict[str, Any], colors: dict[str, str], path: Path) -> str:
    """Mean loss by position over the longest pass, the trained context dashed."""
    context, curves = summary["context"], summary["loss_by_position"]
    method = interval_method(summary["documents"])
    fig = _figure((7.5, 4.5))
    ax = fig.add_subplot()
    top = 0.0
    for label, bins in curves.items():
        xs = [(row[0] + row[1]) / 2 for row in bins]
        means = [row[2] for row in bins]
        ax.plot(xs, means, label=label, color=colors[label], zorder=3)
        ax.fill_between(xs, [row[3] for row in bins], [row[4] for row in bins], alpha=0.12, linewidth=0,
                        color=colors[label], zorder=2)  # fmt: skip
        top = max(top, *(m for m in means if math.isfinite(m)))
    ax.axvline(context, color="grey", linestyle="--", linewidth=1)
    # the frame fits the mean curves; a band wider than it (few documents) is cut at the frame
    wider = any(
        math.isfinite(row[3]) and (row[3] < 0 or row[4] > 1.4 * top)
        for bins in curves.values()
        for row in bins
    )
    if top > 0:
        ax.set_ylim(0, 1.4 * top)
    ax.set_xlabel(f"position (tokens; mean loss over bins of {max(summary['lengths']) // BINS})")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(
        f"Loss by position over {max(summary['lengths'])} tokens (dashed: trained context {context})"
        f"\nbands: {method}" + (", cut at the frame" if wider else ""),
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)


def _passkey_figure(summary: dict[str, Any], labels: list[str], path: Path) -> str:
    """Passkey accuracy per depth x length, one panel per scaling."""
    context, lengths, depths = summary["context"], summary["passkey_lengths"], summary["depths"]
    cols = min(4, len(labels))
    nrows = math.ceil(len(labels) / cols)
    fig = _figure((2.6 * cols + 1, 2.3 * nrows + 0.6))
    image = None
    for i, label in enumerate(labels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        grid = np.full((len(depths), len(lengths)), np.nan)
        for j, n in enumerate(lengths):
            cell = summary["passkey"][label].get(str(n))
            for k, d in enumerate(depths):
                if cell is not None and repr(d) in cell["by_depth"]:
                    grid[k, j] = cell["by_depth"][repr(d)]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        ax.set_xticks(range(len(lengths)), [f"{n // 1024}k" if n >= 1024 else str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("length", fontsize=8)
        ax.set_ylabel("depth", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=fig.axes, shrink=0.8, label="passkey accuracy")
    fig.suptitle(f"Passkey retrieval (trained context {context})", fontsize=10)
    fig.savefig(path, dpi=120)
    return str(path)


__all__ = ["BINS", "caption", "figures", "interval_method", "markdown", "rows", "summarize"]
