"""Train-short / test-long curves from ``posenc compare`` result records.

Every function takes a list of records (``ResultStore.records()``) and returns a
matplotlib ``Figure``; :func:`save_all` writes PNGs. Only runs that converged
in-distribution are drawn (the others are named in the title: "not converged");
the line is the mean over seeds and the shaded band its 95% interval
(:mod:`posenc.results.stats`: over seeds with the evaluation examples' spread for the task
curves, over seeds for the LM curves; none with a single converged seed). A dotted vertical line
marks the longest training length. Task curves are drawn against the length in the unit of the
benchmark's buckets: each evaluation length's longest row over the longest training row, in tokens
(:mod:`posenc.results.lengths`).
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from posenc.records.files import safe_name
from posenc.results import stats
from posenc.results.lengths import ratios as length_ratios
from posenc.viz.figures import new_figure

P = ParamSpec("P")


def plain_text(draw: Callable[P, Figure]) -> Callable[P, Figure]:
    """Draw with every text taken as written: labels and task names come from records (data), and
    matplotlib would otherwise parse a ``$...$`` in them as mathtext (an unknown command in one
    record failed the whole set of figures)."""

    @functools.wraps(draw)
    def drawn(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn


class _PlainLogLabels(LogFormatter):
    """matplotlib's choice of which log ticks to label, each written as plain ``%g`` text."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def log_scale(ax, which: str, base: float = 10.0) -> None:
    """A log scale on ``ax``'s ``which`` ("x" or "y") axis, labelled in plain text ("0.1", "2"):
    matplotlib's own log labels are mathtext ("$\\mathdefault{10^{-1}}$"), which
    :func:`plain_text` figures would show verbatim."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis.set_major_formatter(_PlainLogLabels(base=base))
    axis.set_minor_formatter(_PlainLogLabels(base=base, labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


Curves = dict[
    str, tuple[list[float], list[np.ndarray]]
]  # label -> (x, one unit array (or value) per point per seed)


def _curves(records, task: str, getter) -> tuple[Curves, int | None, list[str]]:
    """label -> (x, per seed: values per point) of the converged runs of ``task``, the training
    length, and the labels with a run that did not converge."""
    by_label: Curves = {}
    train_len = None
    failed: set[str] = set()
    for rec in records:
        spec = rec["spec"]
        if spec["task"] != task:
            continue
        train_len = spec["train"]["max_len"]
        for variant, ev in rec["result"]["eval"].items():
            label = stats.run_label(rec, variant)
            if not stats.converged(rec):
                failed.add(label)
                continue
            got = getter(ev, spec)
            if got is None:
                continue
            x, y = got
            by_label.setdefault(label, (list(x), []))[1].append(y)
    return by_label, train_len, sorted(failed)


def _band(per_seed: list) -> tuple[list[float], list[float], list[float]]:
    """Mean, low, high per point: ``per_seed[s][k]`` is a number or an array of unit values."""
    mean, low, high = [], [], []
    for k in range(len(per_seed[0])):
        point = [seed[k] for seed in per_seed]
        if np.ndim(point[0]) == 0:
            c = stats.per_seed([_num(v) for v in point])
        else:
            values = np.stack([np.asarray(v, dtype=float) for v in point])
            m, lo, hi = stats.interval(values, rate=True)  # task curves: rates per example
            c = stats.Cell(m, lo, hi, len(values), len(values), values.shape[1])
        mean.append(c.mean)
        low.append(c.low)
        high.append(c.high)
    return mean, low, high


def _plot(ax, curves: Curves, *, log_y: bool = False) -> None:
    cmap = colormaps["tab20"]
    for index, (label, (x, ys)) in enumerate(sorted(curves.items())):
        mean, low, high = _band(ys)
        style = "--" if "[" in label or "+rand" in label else "-"
        ax.plot(x, mean, style, marker="o", markersize=3, label=label, color=cmap(index % 20))
        if len(ys) > 1 or np.ndim(ys[0][0]) > 0:
            ax.fill_between(x, low, high, alpha=0.15, color=cmap(index % 20), linewidth=0)
    if log_y:
        log_scale(ax, "y")


def _title(ax, text: str, failed: list[str]) -> None:
    if failed:
        text += "\nnot converged (not drawn): " + ", ".join(failed)
    ax.set_title(text, fontsize=9 if failed else None)


def _finish(fig: Figure, ax, train_len: float | None, *, train_label: str) -> Figure:
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
        ax.annotate(train_label, (train_len, 1.0), xycoords=("data", "axes fraction"), fontsize=8, color="grey",
                    ha="left", va="top")  # fmt: skip
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    return fig


#: What each task figure draws: per-example values of one evaluation (None: the record has none).
TASK_METRICS: dict[str, tuple[str, Any]] = {
    "exact_match": ("sequence exact match (teacher-forced pass)", lambda per: per.get("exact_match")),
    "free_prefix": (
        "free-running correct prefix (share of the answer)",
        lambda per: None if "free_prefix" not in per else [
            np.asarray(p, dtype=float) / np.asarray(m, dtype=float)
            for p, m in zip(per["free_prefix"], per["answer_tokens"])
        ],
    ),
    "token_accuracy": ("teacher-forced token accuracy (answer and EOS)", lambda per: per.get("token_accuracy")),
}  # fmt: skip


@plain_text
def task_accuracy_figure(records: list[dict[str, Any]], task: str, *, metric: str = "exact_match") -> Figure:
    """One score of a synthetic task (:data:`TASK_METRICS`) against the evaluation length as a
    multiple of the trained sequence length in tokens (one line per encoding variant)."""
    name, pick = TASK_METRICS[metric]

    def get(ev, spec):
        ratios, values = length_ratios(ev, spec), pick(ev["per_example"])
        return None if ratios is None or values is None else (ratios, values)

    curves, train_len, failed = _curves(records, task, get)
    fig = new_figure(7, 4.2, margins=None)  # Agg canvas, no pyplot state
    ax = fig.add_subplot()
    _plot(ax, curves)
    _title(ax, f"{task}: {name} vs length (trained on n <= {train_len})", failed)
    ax.set_xlabel("longest row / longest training row (tokens)")
    ax.set_ylabel(f"{name} (fraction)")
    ax.set_ylim(-0.03, 1.03)
    return _finish(fig, ax, 1.0, train_label=" trained length")


@plain_text
def lm_ratio_figure(records: list[dict[str, Any]]) -> Figure:
    """Perplexity(L_valid) / perplexity(L_train) vs L_valid / L_train (non-overlapping windows)."""

    def get(ev, spec):
        if ev.get("ratio_to_train") is None:
            return None
        return [n / spec["train"]["max_len"] for n in ev["lengths"]], ev["ratio_to_train"]

    curves, _, failed = _curves(records, "lm", get)
    fig = new_figure(7, 4.2, margins=None)  # Agg canvas, no pyplot state
    ax = fig.add_subplot()
    _plot(ax, curves, log_y=True)
    log_scale(ax, "x", base=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    protocols = sorted({r["result"]["eval"]["default"].get("protocol", "nonoverlapping") for r in records
                        if r["spec"]["task"] == "lm"})  # fmt: skip
    _title(ax, f"byte LM: perplexity ratio vs evaluation length ({', '.join(protocols)} windows)", failed)
    ax.set_xlabel("L_valid / L_train")
    ax.set_ylabel("perplexity(L_valid) / perplexity(L_train)")
    return _finish(fig, ax, 1.0, train_label=" L_train")


@plain_text
def lastk_figure(records: list[dict[str, Any]]) -> Figure:
    """Loss on the same last k bytes as the context grows (the NoPE paper's protocol)."""

    def get(ev, spec):
        lk = ev["lastk"]
        return [c / spec["train"]["max_len"] for c in lk["contexts"]], [
            _num(v) / math.log(2) for v in lk["nats_per_byte"]
        ]

    curves, _, failed = _curves(records, "lm", get)
    fig = new_figure(7, 4.2, margins=None)  # Agg canvas, no pyplot state
    ax = fig.add_subplot()
    _plot(ax, curves)
    log_scale(ax, "x", base=2)
    _title(ax, "byte LM: loss on the last k bytes vs context length", failed)
    ax.set_xlabel("context / L_train")
    ax.set_ylabel("loss on last k bytes (bits/byte)")
    return _finish(fig, ax, 1.0, train_label=" L_train")


@plain_text
def loss_by_position_figure(records: list[dict[str, Any]], *, smooth: int = 16) -> Figure:
    """Mean loss at each position of long windows (learned absolute should break at L_train)."""

    def get(ev, spec):
        values = [_num(v) / math.log(2) for v in ev["loss_by_position"]["nats_per_byte"]]
        width = max(1, smooth)
        means = [
            sum(values[i : i + width]) / len(values[i : i + width]) for i in range(0, len(values), width)
        ]
        return [i + width / 2 for i in range(0, len(values), width)], means

    curves, train_len, failed = _curves(records, "lm", get)
    fig = new_figure(7, 4.2, margins=None)  # Agg canvas, no pyplot state
    ax = fig.add_subplot()
    _plot(ax, curves)
    _title(ax, f"byte LM: loss by position (mean over windows, {smooth}-byte bins)", failed)
    ax.set_xlabel("position in window (bytes)")
    ax.set_ylabel("loss (bits/byte)")
    return _finish(fig, ax, train_len, train_label=" L_train")


def figures(records: list[dict[str, Any]]) -> dict[str, Figure]:
    """Every curve the records support: ``{file stem: Figure}``."""
    out: dict[str, Figure] = {}
    tasks = sorted({r["spec"]["task"] for r in records})
    for task in tasks:
        if task != "lm":  # the stem is a file name: a task is data (posenc.records.files.safe_name)
            stem = safe_name(task)
            out[f"{stem}_exact_match"] = task_accuracy_figure(records, task)
            if any("free_prefix" in r["result"]["eval"]["default"]["per_example"]
                   for r in records if r["spec"]["task"] == task):  # fmt: skip
                out[f"{stem}_free_prefix"] = task_accuracy_figure(records, task, metric="free_prefix")
            out[f"{stem}_token_accuracy"] = task_accuracy_figure(records, task, metric="token_accuracy")
    if "lm" in tasks:
        out["lm_ratio"] = lm_ratio_figure(records)
        out["lm_lastk"] = lastk_figure(records)
        out["lm_loss_by_position"] = loss_by_position_figure(records)
    return out


def figure_png(fig: Figure, *, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def figure_base64(fig: Figure, *, dpi: int = 110) -> str:
    return base64.b64encode(figure_png(fig, dpi=dpi)).decode("ascii")


def save_all(records: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Write every figure as PNG under ``out_dir``; returns the paths (every file name made from a
    record's task is a plain file name inside ``out_dir``: :func:`~posenc.records.files.safe_name`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, fig in figures(records).items():
        path = out / f"{stem}.png"
        path.write_bytes(figure_png(fig))
        paths.append(path)
    return paths
