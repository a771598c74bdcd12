"""Every figure kind writes a non-empty file for every registered encoding it applies to."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from PIL import Image

import posenc
from posenc import viz
from posenc.cli import main

# Small sizes keep this file fast; the figures' code paths are the same at any size.
SMALL = {
    "num_positions": 8,
    "seq_len": 6,
    "max_distance": 12,
    "grid": 3,
}
CASES = [(name, kind) for name in posenc.ENCODINGS for kind in viz.applicable(name, d_model=16, num_heads=2)]


def small_options(kind: str) -> dict:
    option = viz.FIGURES[kind].size_option
    return {} if option is None else {option: SMALL[option]}


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_figure_written_for_every_applicable_encoding(tmp_path, name, kind):
    path = viz.render(
        name, kind, tmp_path / f"{name}.png", d_model=16, num_heads=2, dpi=30, **small_options(kind)
    )
    assert path.stat().st_size > 1000
    with Image.open(path) as image:
        assert image.width > 50 and image.height > 50
        low, high = image.convert("L").getextrema()
        assert high - low > 50  # something was drawn


def test_every_kind_applies_somewhere_and_every_encoding_gets_a_figure():
    kinds = {kind for _, kind in CASES}
    names = {name for name, _ in CASES}
    assert names == set(posenc.ENCODINGS)
    by_kind = {posenc.ENCODINGS[n].kind for n in posenc.ENCODINGS}
    for kind, spec in viz.FIGURES.items():
        if set(spec.kinds) & by_kind:
            assert kind in kinds or spec.applies is not None


def test_figures_have_titles_labels_and_colour_bars():
    name = next(n for n in posenc.ENCODINGS if posenc.ENCODINGS[n].kind in ("additive", "rotary"))
    fig = viz.figure(name, "heatmap", d_model=16, num_heads=2, num_positions=6)
    main_ax, colorbar = fig.axes[0], fig.axes[1]
    assert main_ax.get_title() and main_ax.get_xlabel() and main_ax.get_ylabel()
    assert colorbar.get_ylabel()  # the colour bar says what colour means


def test_svg_and_animated_gif(tmp_path):
    name = next(n for n in posenc.ENCODINGS if posenc.ENCODINGS[n].kind == "rotary")
    svg = viz.render(name, "similarity", tmp_path / "s.svg", d_model=16, num_heads=2, num_positions=6)
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()[:2000]
    gif = viz.render(name, "rotation", tmp_path / "r.gif", d_model=16, num_heads=2, num_positions=5)
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.n_frames == 5


def test_not_applicable_kind_is_a_clear_error():
    additive = next(n for n in posenc.ENCODINGS if posenc.ENCODINGS[n].kind == "additive")
    with pytest.raises(viz.NotApplicableError, match="does not apply"):
        viz.figure(additive, "rotation")
    with pytest.raises(ValueError, match="kind must be one of"):
        viz.figure(additive, "nonsense")


def test_cli_plot_writes_file_and_exits_2_when_kind_does_not_apply(tmp_path):
    additive = next(n for n in posenc.ENCODINGS if posenc.ENCODINGS[n].kind == "additive")
    runner = CliRunner()
    out = tmp_path / "h.png"
    ok = runner.invoke(
        main, ["plot", additive, "--kind", "heatmap", "-o", str(out), "--positions", "6", "--dpi", "30"]
    )
    assert ok.exit_code == 0, ok.output
    assert out.stat().st_size > 1000
    bad = runner.invoke(main, ["plot", additive, "--kind", "bias", "-o", str(tmp_path / "b.png")])
    assert bad.exit_code == 2
    assert "does not apply" in bad.output and "heatmap" in bad.output  # names the kinds that do
    unknown = runner.invoke(
        main, ["plot", "no_such_encoding", "--kind", "heatmap", "-o", str(tmp_path / "x.png")]
    )
    assert unknown.exit_code == 2 and "unknown encoding" in unknown.output
