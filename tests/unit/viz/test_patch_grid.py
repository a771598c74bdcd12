"""The patch-grid similarity figure: its numbers (anchor 1, translation invariance for rotary
encodings, the flattened view of 1-D encodings), the CLI and the report entry."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from posenc import viz
from posenc.analysis.signals import make
from posenc.cli import main
from posenc.viz.patch_grid import grid_similarity, similarity_map


@pytest.mark.parametrize("name", ["rope_axial", "rope_mixed", "mrope", "sincos_axial"])
def test_similarity_depends_on_the_offset_only_for_relative_and_sincos(name):
    enc = make(name, d_model=32, num_heads=2)
    small = similarity_map(enc, (5, 5), (2, 2))
    large = similarity_map(enc, (10, 10), (2, 2))
    assert small[2, 2] == pytest.approx(1.0)
    np.testing.assert_allclose(large[:5, :5], small, atol=1e-6)  # same anchor, same offsets
    shifted = similarity_map(enc, (10, 10), (6, 7))
    np.testing.assert_allclose(shifted[4:9, 5:10], small, atol=1e-6)  # translation invariance
    assert small.min() < 0.999  # and position does change the vector


def test_one_dimensional_rope_sees_the_grid_flattened():
    enc = make("rope", d_model=32, num_heads=2)
    sim = similarity_map(enc, (4, 4), (1, 1))
    # row-major: (1, 2) is one step away, (2, 1) is four steps away; (1, 0) and (1, 2) are alike
    assert sim[1, 0] == pytest.approx(sim[1, 2])
    assert abs(sim[2, 1] - sim[1, 2]) > 1e-3


def test_learned_axial_without_extra_rows_cannot_draw_past_its_table():
    enc = make("learned_axial", d_model=32, num_heads=2, max_len=6)
    with pytest.raises(ValueError, match="max_len=6"):
        grid_similarity(enc, grid=4)  # the 8 x 8 panel needs coordinate 7


def test_grid_figure_in_plot_and_applicable():
    assert "grid" in viz.applicable("rope_mixed") and "grid" in viz.applicable("sinusoidal")
    assert "grid" not in viz.applicable("alibi")
    fig = viz.figure("rope_axial", "grid", d_model=32, num_heads=2, grid=4)
    assert len(fig.axes) == 3  # two panels and the colour bar


def test_cli_plot_grid(tmp_path):
    out = tmp_path / "grid.png"
    result = CliRunner().invoke(main, ["plot", "mrope", "--kind", "grid", "--positions", "4", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000
    bad = CliRunner().invoke(main, ["plot", "mrope", "--kind", "grid", "--positions", "1", "-o", str(out)])
    assert bad.exit_code == 2 and "--positions must be an integer in [2, 64], got 1" in bad.output
