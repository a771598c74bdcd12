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
    "4. What the notes get wrong",
    "5. One picture per family",
    "6. Where to go next",
)


def test_family_pictures_cover_every_registered_kind():
    picks = tour.family_pictures()
    kinds = {cls.kind for cls in posenc.ENCODINGS.values()}
    assert {kind for kind, _, _ in picks} == kinds
    for kind, name, figure in picks:
        assert posenc.ENCODINGS[name].kind == kind
        assert figure in posenc.viz.applicable(name)
    assert {k: f for k, _, f in picks}["rotary"] == "rotation"


def test_the_tour_shows_five_errors_of_the_notes_in_order():
    shown = tour.tour_errata()
    assert [c.check for c in shown] == [
        "frequency_order",
        "rope_sign",
        "dimension_126",
        "t5_snippet",
        "equivariance",
    ]
    assert all(c.verdict == "corrected" for c in shown)
    assert [c.note for c in shown] == ["lecture", "video", "tutorial", "interview", "lecture"]


def test_python_m_posenc_runs_the_tour(tmp_path):
    out = tmp_path / "tour"
    result = subprocess.run(
        [sys.executable, "-m", "posenc", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    for title in SECTION_TITLES:
        assert title in text, title
    assert "Steps 3-4: PE = sin at even dims, cos at odd dims" in text  # the `posenc show` worked example
    assert "0.841" in text  # sin(1): PE(1, 0)
    # step 5: the tutorial's made-up "bites" embedding plus PE(1), as the tutorial prints it
    assert "│ + PE(1) │ 1.041 │  1.240 │ 0.500 │ 1.895 │" in text
    assert "│ 3 │  6,7 │   1,000 │                0.001 │                6,283.2 │" in text  # wavelengths
    assert "python -m posenc.reference.tutorial" in text and "posenc.reference.tutorial import" in text
    props = {
        cells[0]: cells[1:]
        for line in text.split("3. What makes a good encoding")[1]
        .split("Position saturation")[0]
        .splitlines()
        if line.startswith("│") and len(cells := [c.strip() for c in line.strip("│").split("│")]) == 7
    }
    linear, affine = float(props["integer_index"][3]), float(props["integer_index"][4])
    assert 1e-3 < linear < 1e-2 and affine < 1e-12  # positions 0..255: affine, not linear
    assert float(props["sinusoidal"][3]) < 1e-9
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
    errata = text.split("4. What the notes get wrong")[1].split("5. One picture")[0]
    flat = " ".join(errata.split())  # undo rich's line wrapping
    for claim in tour.tour_errata():
        assert " ".join(claim.says.split()) in flat, claim.id
    for shown in ("47,117", "q^T R_{n-m} k = -1.9417", "q^T R_{m-n} k = 1.4921", "0.046 at 400", "54,410"):
        assert shown in flat, shown
    assert "relative_position_to_bucket, nn and num_heads are never defined" in flat
    assert "permutation equivariant, not invariant" in flat
    for command, _ in tour.NEXT_STEPS:
        assert command in text
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == len(tour.family_pictures())
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
