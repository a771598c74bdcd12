"""The figures of a summary (:mod:`posenc.extend.summary`), drawn so that nothing hides:

- ``perplexity.png``: perplexity by length, one marker and line style per scaling, each scaling's
  points moved a little along the length axis so that equal values stay side by side, and the
  interval over documents as an error bar (not a band over the others);
- ``loss_by_position.png``: one panel per scaling (small multiples, the same axes), its mean loss
  by position with a light band, plain RoPE's curve in grey in every other panel to compare with;
- ``passkey.png``: the passkey's depth x length grid, one panel per scaling, each cell coloured by
  its rate and labelled with its count ``k/n`` (depths in fifths of the haystack).

Every figure is saved with its labels inside the image (``bbox_inches="tight"``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from posenc.extend.summary import BINS, DEPTH_BINS
from posenc.extend.summary_text import interval_method

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLES = ("-", "--", "-.", ":")
DODGE = 0.035  # how far apart (in log2 of the length) the scalings' points at one length are drawn


def figures(summary: dict[str, Any], out: Path) -> dict[str, str]:
    """``perplexity.png``, ``loss_by_position.png`` and ``passkey.png`` under ``out`` (what the
    summary has data for)."""
    out.mkdir(parents=True, exist_ok=True)
    labels = [e["label"] for e in summary["entries"]]
    files = {"perplexity": _perplexity_figure(summary, labels, out / "perplexity.png")}
    if summary["loss_by_position"]:
        files["loss_by_position"] = _loss_figure(summary, out / "loss_by_position.png")
    if any("by_depth" in row.get("passkey", {}).get(str(c["length"]), {})
           for row in summary["retrieval"].values() for c in summary["tasks"]):  # fmt: skip
        files["passkey"] = _passkey_figure(summary, labels, out / "passkey.png")
    return files


def _figure(size: tuple[float, float]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> str:
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return str(path)


def _perplexity_figure(summary: dict[str, Any], labels: list[str], path: Path) -> str:
    """Perplexity by evaluation length per scaling, the interval over documents as error bars."""
    from matplotlib.ticker import NullLocator

    fig = _figure((8.5, 4.8))
    ax = fig.add_subplot()
    shown = [label for label in labels if summary["perplexity"][label]]
    for i, label in enumerate(shown):
        row = summary["perplexity"][label]
        xs = [int(n) for n in row]
        shift = 2 ** ((i - (len(shown) - 1) / 2) * DODGE)
        ys = np.asarray([row[str(n)]["value"] for n in xs])
        low = np.asarray([row[str(n)]["low"] for n in xs])
        high = np.asarray([row[str(n)]["high"] for n in xs])
        errors = None if np.isnan(low).all() else np.vstack([ys - low, high - ys])
        ax.errorbar([x * shift for x in xs], ys, yerr=errors, label=label, color=f"C{i % 10}", capsize=3,
                    marker=MARKERS[i % len(MARKERS)], linestyle=STYLES[i % len(STYLES)], linewidth=1.4,
                    markersize=5, elinewidth=1, alpha=0.9)  # fmt: skip
    ax.axvline(summary["context"], color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    measured = sorted({int(n) for label in labels for n in summary["perplexity"][label]})
    if measured:  # ticks at the lengths measured, in tokens ("16384", not "2^14")
        ax.set_xticks(measured, [str(n) for n in measured])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity")
    method = interval_method(summary["documents"])
    ax.set_title(
        f"Perplexity by length (dashed: trained context {summary['context']})\nerror bars: {method}",
        fontsize=10,
    )
    if shown:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def _loss_figure(summary: dict[str, Any], path: Path) -> str:
    """Mean loss by position, one panel per scaling, plain RoPE in grey behind the others."""
    curves = summary["loss_by_position"]
    labels = list(curves)
    base = next((e["label"] for e in summary["entries"] if e["key"] == "none"), None)
    cols = min(3, len(labels))
    nrows = math.ceil(len(labels) / cols)
    fig = _figure((3.6 * cols + 0.4, 2.7 * nrows + 0.8))
    axes = fig.subplots(nrows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    top = max(max((r[2] for r in bins if math.isfinite(r[2])), default=0.0) for bins in curves.values())
    colors = {e["label"]: f"C{i % 10}" for i, e in enumerate(summary["entries"])}
    for ax, label in zip(axes, labels):
        if base in curves and label != base:
            xs = [(r[0] + r[1]) / 2 for r in curves[base]]
            ax.plot(xs, [r[2] for r in curves[base]], color="0.6", linewidth=1, label=base, zorder=1)
        bins = curves[label]
        xs = [(r[0] + r[1]) / 2 for r in bins]
        ax.plot(xs, [r[2] for r in bins], color=colors[label], linewidth=1.5, label=label, zorder=3)
        low, high = (np.asarray([r[i] for r in bins], dtype=float) for i in (3, 4))
        if not np.isnan(low).all():
            ax.fill_between(xs, low, high, alpha=0.2, linewidth=0, color=colors[label], zorder=2)
        ax.axvline(summary["context"], color="grey", linestyle="--", linewidth=1)
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    if top > 0:
        axes[0].set_ylim(0, 1.4 * top)  # the frame fits the mean curves; a wider band is cut at it
    fig.supxlabel(f"position (tokens; mean loss over bins of {max(summary['lengths']) // BINS})", fontsize=9)
    fig.supylabel("mean loss (nats)", fontsize=9)
    fig.suptitle(
        f"Loss by position (dashed: trained context {summary['context']}; grey: plain RoPE)\n"
        f"bands: {interval_method(summary['documents'])}, cut at the frame",
        fontsize=10,
    )
    return _save(fig, path)


def _passkey_figure(summary: dict[str, Any], labels: list[str], path: Path) -> str:
    """The passkey's rate per depth x length, one panel per scaling, ``k/n`` written in each cell."""
    import matplotlib

    lengths = sorted(c["length"] for c in summary["tasks"] if c["task"] == "passkey")
    cols = min(4, len(labels))
    nrows = math.ceil(len(labels) / cols)
    fig = _figure((max(2.0, 1.0 * len(lengths) + 1.2) * cols + 1.2, 2.9 * nrows + 0.8))
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    image = None
    edges = [f"{i / DEPTH_BINS:g}-{(i + 1) / DEPTH_BINS:g}" for i in range(DEPTH_BINS)]
    for ax, label in zip(axes, labels):
        grid = np.full((DEPTH_BINS, len(lengths)), np.nan)
        row = summary["retrieval"][label].get("passkey", {})
        for j, n in enumerate(lengths):
            for k, (right, asked) in enumerate(row.get(str(n), {}).get("by_depth", [[0, 0]] * DEPTH_BINS)):
                if asked:
                    grid[k, j] = right / asked
                ax.text(j, k, f"{right}/{asked}" if asked else "-", ha="center", va="center", fontsize=8,
                        color="0.35" if not asked else "black" if right / asked > 0.5 else "white")  # fmt: skip
        colours = matplotlib.colormaps["viridis"].with_extremes(
            bad="0.9"
        )  # no prompt at that depth: light grey
        image = ax.imshow(grid, vmin=0, vmax=1, cmap=colours, origin="lower", aspect="auto")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=8)
        ax.set_yticks(range(DEPTH_BINS), edges, fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("length (tokens)", fontsize=8)
        ax.set_ylabel("depth of the key", fontsize=8)
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=list(axes[: len(labels)]), shrink=0.8, label="passkey: share answered exactly")
    fig.suptitle(f"Passkey retrieval, prompts answered right per depth (trained context {summary['context']})",
                 fontsize=10)  # fmt: skip
    return _save(fig, path)


__all__ = ["figures"]
