"""The benchmark's figures draw every label as plain text: data never parsed as mathtext, and log
axes labelled "0.1", "2", never matplotlib's mathtext source ("$\\mathdefault{10^{-1}}$")."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.records.files import read_record_file
from posenc.records.store import record_version, validate_record
from posenc.results import curves, result_figures

SHIPPED = Path(__file__).resolve().parents[3] / "benchmarks" / "records" / "quick"


@pytest.fixture(scope="module")
def records():
    """The shipped quick records, whichever benchmark version they were published under (a store reads
    only its own version's)."""
    found = []
    for path in sorted(SHIPPED.glob("runs/*/*.json.gz")):
        data, reason = read_record_file(path)
        assert reason is None and validate_record(data, version=record_version(data)) is None, path
        found.append(data)
    assert found
    return found


FIGURES = {
    "copy accuracy": lambda r: result_figures.task_accuracy_figure(r, "copy"),
    "lm ratio": result_figures.lm_ratio_figure,
    "last k": result_figures.lastk_figure,
    "loss by position": result_figures.loss_by_position_figure,
    "learning curves": lambda r: curves.curves_figure(r, title="curves"),
}


@pytest.mark.parametrize("name", FIGURES)
def test_tick_labels_are_plain_text(records, name):
    fig = FIGURES[name](records)
    fig.canvas.draw()
    labels = [
        tick.get_text()
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for tick in [*axis.get_majorticklabels(), *axis.get_minorticklabels()]
    ]
    assert any(labels), name
    raw = [label for label in labels if "$" in label or "mathdefault" in label]
    assert not raw, f"{name}: tick labels shown as mathtext source: {raw[:5]}"


def test_log_axes_are_labelled_with_numbers(records):
    fig = result_figures.lm_ratio_figure(records)
    fig.canvas.draw()
    (ax,) = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    xs = {t.get_text() for t in ax.xaxis.get_majorticklabels()}
    assert {"1", "2", "4", "8"} <= xs, xs
