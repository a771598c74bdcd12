"""``python -m posenc``: the guided tour runs end to end, prints every section, writes the pictures."""

from __future__ import annotations

import subprocess
import sys

import posenc
import posenc.viz
from posenc import tour

SECTION_TITLES = (
    "1. The order problem",
    "2. Sinusoidal positions, worked by hand",
    "3. What makes a good encoding",
    "4. One picture per family",
    "5. Where to go next",
)


def test_family_pictures_cover_every_registered_kind():
    picks = tour.family_pictures()
    kinds = {cls.kind for cls in posenc.ENCODINGS.values()}
    assert {kind for kind, _, _ in picks} == kinds
    for kind, name, figure in picks:
        assert posenc.ENCODINGS[name].kind == kind
        assert figure in posenc.viz.applicable(name)
    assert {k: f for k, _, f in picks}["rotary"] == "rotation"


def test_python_m_posenc_runs_the_tour(tmp_path):
    out = tmp_path / "tour"
    result = subprocess.run(
        [sys.executable, "-m", "posenc", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    for title in SECTION_TITLES:
        assert title in text, title
    assert "Step 3: PE = sin at even dims, cos at odd dims" in text  # the `posenc show` worked example
    assert "0.841" in text  # sin(1): PE(1, 0)
    assert "Position saturation: nearest pair of positions" in text and "no row past 1023" in text
    assert "max |f(x[perm]) - f(x)[perm]|" in text  # the equivariance table's title, markup escaped
    gaps = {
        cells[0]: [float(c) for c in cells[1:]]
        for line in text.split("1. The order problem")[1].split("2. Sinusoidal")[0].splitlines()
        if line.startswith("│")
        and len(cells := [c.strip() for c in line.strip("│").split("│")]) == 3
        and cells[0] in ("none", "sinusoidal", "alibi")
    }
    assert max(gaps["none"]) < 1e-12  # attention alone is permutation-equivariant
    assert min(gaps["sinusoidal"]) > 1e-3  # a position encoding breaks it
    assert gaps["alibi"][0] < 1e-12 < 1e-3 < gaps["alibi"][1]  # symmetric bias: blind to reversal only
    for command, _ in tour.NEXT_STEPS:
        assert command in text
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == len(tour.family_pictures())
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
