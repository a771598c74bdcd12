"""Learning curves of ``posenc compare``'s runs: what training did, per encoding.

Every record keeps its held-out checks (``result.train.checks``: the step of each check, the mean
training loss since the previous one, and the held-out metric: exact match on the task's
training distribution, or the language model's held-out loss in nats per byte). The figure has
one row per task: training loss against step on the left, the held-out metric on the right,
one colour per encoding and one line per seed (a line ends where its run stopped: converged,
or at the step cap). ``posenc plot --curves OUT -o curves.png`` draws it.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure

from posenc.core.errors import PosencError
from posenc.records.schema import checks_metric
from posenc.results.result_figures import log_scale, plain_text
from posenc.viz.figures import new_figure

#: How a held-out metric is named on an axis.
METRIC_LABELS = {"valid_exact_match": "held-out exact match", "valid_loss": "held-out loss (nats/byte)"}


def curve(record: dict[str, Any]) -> dict[str, Any]:
    """``{"step", "train_loss", "metric", "name"}`` of one record's checks (the training loss of a
    record written before checks kept it is the mean of its per-step losses since the last check)."""
    train = record["result"]["train"]
    checks = train["checks"]
    metric = checks_metric(checks)
    steps = [int(s) for s in checks["step"]]
    if "train_loss" in checks:
        losses = [float(x) for x in checks["train_loss"]]
    else:
        per_step = [float(x) for x in train["loss"]]
        losses, last = [], 0
        for step in steps:
            window = per_step[last:step] or [math.nan]
            losses.append(sum(window) / len(window))
            last = step
    return {"step": steps, "train_loss": losses, "metric": [float(v) for v in checks[metric]], "name": metric}


@plain_text
def curves_figure(records: list[dict[str, Any]], *, title: str = "") -> Figure:
    """The learning curves of ``records`` (one row per task; see the module docstring)."""
    if not records:
        raise PosencError("no finished runs to draw learning curves of")
    tasks = sorted({r["spec"]["task"] for r in records}, key=lambda t: (t == "lm", t))
    labels = sorted({r["label"] for r in records})
    colours = {
        label: colormaps["tab10" if len(labels) <= 10 else "tab20"](i) for i, label in enumerate(labels)
    }
    fig = new_figure(11, 3.2 * len(tasks) + 0.6, margins=None)
    axes = fig.subplots(len(tasks), 2, squeeze=False)
    for row, task in enumerate(tasks):
        loss_ax, metric_ax = axes[row]
        metric_name = ""
        shown: set[str] = set()
        for record in sorted((r for r in records if r["spec"]["task"] == task), key=lambda r: r["label"]):
            c = curve(record)
            metric_name = c["name"]
            label = record["label"]
            legend = label if label not in shown else None
            shown.add(label)
            style = {
                "color": colours[label],
                "linewidth": 1.2,
                "alpha": 0.85,
                "marker": "." if len(c["step"]) < 3 else None,
            }
            loss_ax.plot(c["step"], c["train_loss"], label=legend, **style)
            metric_ax.plot(c["step"], c["metric"], label=legend, **style)
        log_scale(loss_ax, "y")
        loss_ax.set_ylabel("training loss (mean since the last check)")
        metric_ax.set_ylabel(METRIC_LABELS.get(metric_name, metric_name))
        loss_ax.set_title(f"{task}: training loss")
        metric_ax.set_title(f"{task}: {METRIC_LABELS.get(metric_name, metric_name)}")
        for ax in (loss_ax, metric_ax):
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        metric_ax.legend(fontsize=7, loc="best")
    seeds = len({r["spec"]["seed"] for r in records})
    fig.suptitle(title or f"Learning curves: {len(labels)} encodings, {seeds} seed(s), one line per seed")
    fig.tight_layout()
    return fig
