"""posenc.extend.summary_figures: nothing hides. Scalings with equal perplexity are drawn side by
side, each loss-by-position curve has its own panel, and the passkey's depth x length grid writes its
counts k/n in every cell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.unit.extend.test_summary import _grid, _results, _summarize

from posenc.extend import summary_figures as figures

pytest.importorskip("matplotlib")


@pytest.fixture
def saved(monkeypatch):
    from matplotlib.figure import Figure

    kept: dict[str, Figure] = {}
    real = Figure.savefig

    def keep(self, name, *args, **kwargs):
        kept[Path(name).stem] = self
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return kept


def _equal_twins():
    """yarn-dynamic is plain RoPE inside the context: the same perplexity at 32 and 64 tokens."""
    prot, entries, grid = _grid(("none", "yarn", "yarn-dynamic"))
    out = _summarize(
        prot, entries, grid, _results(grid, lambda t, d: 2.0 + 0.1 * d, lambda t, n, i: i % 3 == 0)
    )
    return out


def test_equal_perplexities_are_drawn_side_by_side_with_their_own_marker(tmp_path, saved):
    out = _equal_twins()
    assert out["perplexity"]["none"]["64"] == out["perplexity"]["yarn-dynamic"]["64"]
    figures.figures(out, tmp_path)
    ax = saved["perplexity"].axes[0]
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # each scaling's error bar and line
    assert set(lines) == {"none", "yarn x2", "yarn-dynamic"}
    x_none, x_twin = (np.asarray(lines[k].get_xdata(), dtype=float) for k in ("none", "yarn-dynamic"))
    assert np.all(x_none != x_twin) and np.allclose(
        x_none / x_twin, x_none[0] / x_twin[0]
    )  # moved, not mixed
    assert np.all(np.abs(np.log2(x_none / x_twin)) < 0.1)  # still at its length
    assert (
        len({lines[k].get_marker() for k in lines}) == 3
        and len({lines[k].get_linestyle() for k in lines}) >= 2
    )


def test_the_passkey_grid_writes_its_counts_in_every_cell(tmp_path, saved):
    out = _equal_twins()
    files = figures.figures(out, tmp_path)
    assert Path(files["passkey"]).stat().st_size > 1000
    panels = [ax for ax in saved["passkey"].axes if ax.get_title() in ("none", "yarn x2", "yarn-dynamic")]
    assert len(panels) == 3
    for ax in panels:
        label = ax.get_title()
        written = [t.get_text() for t in ax.texts]
        want = []
        for length in ("400", "600"):
            want += [
                f"{k}/{n}" if n else "-" for k, n in out["retrieval"][label]["passkey"][length]["by_depth"]
            ]
        assert sorted(written) == sorted(want), label
        total = sum(int(w.split("/")[0]) for w in written if "/" in w)
        assert total == sum(out["retrieval"][label]["passkey"][n]["correct"] for n in ("400", "600"))


def test_every_label_is_inside_the_saved_image(tmp_path, saved):
    """The saved image is the box around everything drawn (labels, titles, legend, colour bar), so no
    label is cut at its edge: its size in pixels is that box's, and every label lies in the box."""
    import matplotlib
    from matplotlib.image import imread

    out = _equal_twins()
    files = figures.figures(out, tmp_path)
    pad = matplotlib.rcParams["savefig.pad_inches"]
    for name, fig in saved.items():
        renderer = fig.canvas.get_renderer()
        box = fig.get_tightbbox(renderer)
        height, width = imread(files[name]).shape[:2]
        assert (
            abs(width - (box.width + 2 * pad) * 120) <= 6 and abs(height - (box.height + 2 * pad) * 120) <= 6
        ), name
        for ax in fig.axes:
            low, high = sorted(ax.get_xlim())
            ticks = [label for label, at in zip(ax.get_xticklabels(), ax.get_xticks()) if low <= at <= high]
            for text in (ax.xaxis.label, ax.yaxis.label, ax.title, *ticks):
                if text.get_text() and text.get_visible():
                    inner = text.get_window_extent(renderer).transformed(fig.dpi_scale_trans.inverted())
                    assert box.x0 - 1e-6 <= inner.x0 and inner.x1 <= box.x1 + 1e-6, (name, text.get_text())
