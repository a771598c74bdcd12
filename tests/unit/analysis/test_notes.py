"""The notes posenc was built from, claim by claim: every verdict matches its demonstration.

The five errors the guided tour shows are recomputed here independently of the
demonstrations (rotation matrices, the closed-form sinusoid, T5's bucket function, one
attention layer), so a demonstration that drifted from its claim fails twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from tests.repo.test_tutorial import TRY_IT_YOURSELF, USAGE_EXAMPLE

import posenc
from posenc import reference, viz
from posenc.analysis import demonstrations, notes, properties
from posenc.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def demos():
    return demonstrations.run()


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# ---------------------------------------------------------------------------
# The table.
# ---------------------------------------------------------------------------


def test_every_settled_claim_rests_on_a_demonstration_finding(demos):
    for c in notes.CLAIMS:
        if c.verdict in (notes.HOLDS, notes.CORRECTED) and c.check is not None:
            facts = demos[c.check].facts
            assert c.fact in facts, (c.id, c.fact, sorted(facts))
            assert facts[c.fact] is (c.verdict == notes.HOLDS), (c.id, c.verdict, c.check, c.fact)
        else:
            assert c.fact is None, c.id


def test_claims_without_a_demonstration_are_few_and_checked_here():
    unchecked_holds = {c.id for c in notes.CLAIMS if c.verdict == notes.HOLDS and c.check is None}
    assert unchecked_holds == {"V5", "V14", "I19", "I25", "I26"}
    assert "surface" in viz.FIGURE_KINDS  # V5: the video script's 3-D view
    assert "complex_order" in posenc.ENCODINGS  # I19
    assert "compare" in main.commands  # I25
    assert {"heatmap", "surface", "similarity", "attention"} <= set(viz.FIGURE_KINDS)  # I26
    assert all(c.check is not None for c in notes.CLAIMS if c.verdict == notes.CORRECTED)


def test_table_shape_ids_notes_verdicts_and_commands():
    ids = [c.id for c in notes.CLAIMS]
    assert len(ids) == len(set(ids))
    for c in notes.CLAIMS:
        assert c.note in notes.NOTES and c.verdict in notes.VERDICTS, c.id
        assert c.id[0] == c.note[0].upper() and c.id[1:].isdigit(), c.id
        assert c.says and c.truth and c.where, c.id
        assert c.encoding is None or c.encoding in posenc.ENCODINGS, c.id
        assert c.check is None or c.check in demonstrations.DEMONSTRATIONS, c.id
        if c.verdict == notes.PENDING:
            assert c.measure in notes.MEASURES and c.check is None and c.command == "posenc compare", c.id
        else:
            assert c.measure is None, c.id
        words = c.command.split()
        if words[0] == "posenc":
            assert words[1] in main.commands, c.id
        elif words[1].startswith("benchmarks/"):  # the repository's speed races (a developer tool)
            assert words[0] == "python" and (ROOT / words[1]).is_file(), c.id
        else:
            assert words[:2] == ["python", "-m"] and words[2].startswith("posenc"), c.id
    for note in notes.NOTES:  # gone through item by item: every note has many rows
        assert len(notes.claims(note=note)) >= 19, note
    assert set(notes.MEASURES) == {c.measure for c in notes.CLAIMS if c.measure}


def test_the_extrapolation_claims_and_open_questions_are_pending_for_the_benchmark():
    pending = {c.measure for c in notes.claims(verdict=notes.PENDING)}
    for measure in (
        "extrapolation:sinusoidal",
        "extrapolation:rope",
        "extrapolation:t5",
        "extrapolation:learned",
        "open:add_vs_concat",
        "open:every_layer",
        "open:warmup",
        "open:scaling",
    ):
        assert measure in pending, measure
    for c in notes.claims(verdict=notes.PENDING):
        assert notes.verdict_text(c) == "pending: measured by posenc compare"


def test_every_truth_renders_with_its_numbers(demos):
    for c in notes.CLAIMS:
        fields = [f for _, f, _, _ in string.Formatter().parse(c.truth) if f]
        assert set(notes.checks_of([c])) >= {f.split(".")[0] for f in fields}, c.id
        text = notes.render_truth(c, demos)
        assert "{" not in text.replace("R_{", "") and "nan" not in text.split(), (c.id, text)


def test_with_measurements_fills_pending_rows_only():
    measured = {"extrapolation:rope": ("contradicted", "RoPE fails at 2x here {not a field}.")}
    out = notes.with_measurements(measured, command="posenc compare --profile notes")
    changed = [c for c, old in zip(out, notes.CLAIMS) if c != old]
    assert changed and all(c.measure == "extrapolation:rope" for c in changed)
    assert all(c.verdict == "contradicted" and c.command == "posenc compare --profile notes" for c in changed)
    assert all(notes.render_truth(c, {}) == "RoPE fails at 2x here {not a field}." for c in changed)
    assert notes.counts(out)["pending"] == notes.counts()["pending"] - len(changed)
    assert notes.counts(out)["contradicted"] == len(changed)
    still = notes.with_measurements({"extrapolation:t5": ("pending", "Not measured: no seed converged.")})
    assert {c.truth for c in still if c.measure == "extrapolation:t5"} == {"Not measured: no seed converged."}
    for wrong in ("corrected", "maybe"):  # corrected is for demonstrations, not measurements
        with pytest.raises(ValueError, match="holds, contradicted, inconclusive"):
            notes.with_measurements({"extrapolation:rope": (wrong, "x")})


def test_page_tour_and_cli_show_the_shipped_measurements():
    command, measured = notes.shipped_measurements()
    shown = notes.measured_claims()
    for c, static in zip(shown, notes.CLAIMS):
        if static.measure in measured:
            assert (c.verdict, c.command) == (measured[static.measure][0], command), c.id
        else:
            assert c == static
    assert notes.summary_line(shown) in notes.markdown()
    assert {c.id: c.verdict for c in notes.claims(measured=True)} == {c.id: c.verdict for c in shown}


def test_filters_and_bad_arguments():
    assert all(c.note == "tutorial" for c in notes.claims(note="tutorial"))
    assert {c.id for c in notes.claims(encoding="rope", verdict="corrected")} == {"V16", "I12"}
    with pytest.raises(ValueError, match="note must be one of"):
        notes.claims(note="podcast")
    with pytest.raises(ValueError, match="verdict must be one of"):
        notes.claims(verdict="maybe")
    with pytest.raises(ValueError, match="unknown demonstration"):
        demonstrations.run(["no_such_check"])


def test_docs_notes_page_is_generated_from_the_table(demos):
    page = (ROOT / "docs/notes.md").read_text(encoding="utf-8")
    assert page == notes.markdown(demos), (
        "docs/notes.md is out of date: run python scripts/update_notes_page.py"
    )
    for c in notes.CLAIMS:
        assert f"| {c.id} |" in page
    for title in notes.NOTES.values():
        assert f"## {title}" in page


# ---------------------------------------------------------------------------
# The five errors, recomputed independently.
# ---------------------------------------------------------------------------


def test_lecture_notes_frequency_order_is_reversed(demos):
    n = demos["frequency_order"].numbers
    assert n["wavelength_first"] == pytest.approx(2 * math.pi, rel=1e-15)
    assert n["wavelength_last"] == pytest.approx(2 * math.pi * 10000 ** (62 / 64), rel=1e-12)
    pe = reference.sinusoidal(np.arange(100), 64)
    assert n["crossings_first"] == int((np.diff(np.sign(pe[1:, 0])) != 0).sum()) + 0 >= 30
    assert n["crossings_last"] == 0 and np.all(pe[1:, 62] > 0)  # the slowest sine has not turned yet


def test_video_script_rope_sign(demos):
    n = demos["rope_sign"].numbers
    d, m, k = 8, 2, 7
    rot = [reference.rope_matrix(p, d, layout="half") for p in (m, k, k - m, m - k)]  # (d, d) each
    r_m, r_n, r_nm, r_mn = rot
    np.testing.assert_allclose(r_m.T @ r_n, r_nm, atol=1e-14)  # R_m^T R_n = R_{n-m}
    assert np.abs(r_m.T @ r_n - r_mn).max() > 0.5  # not R_{m-n}
    assert abs(n["score"] - n["correct"]) < 1e-12 and abs(n["score"] - n["claimed"]) > 0.1
    assert n["correct_error"] < 1e-12 and n["claimed_error"] > 0.1


def test_tutorial_dimension_126_is_near_zero_not_plus_one(demos):
    n = demos["dimension_126"].numbers
    want = np.sin(400 / 10000 ** (126 / 128))
    assert n["max_abs_126"] == pytest.approx(want, rel=1e-12) and want < 0.05
    assert n["min_127"] > 0.99  # the flat line at +1 is the cosine
    assert n["period_126"] == pytest.approx(2 * math.pi * 10000 ** (126 / 128), rel=1e-12)
    assert n["period_126"] < 0.9 * 10000 * 2 * math.pi


def test_interview_t5_snippet_undefined_names_and_sign(demos):
    demo = demos["t5_snippet"]
    rows = dict(demo.rows)
    assert rows["names used but never defined or imported"] == "nn, num_heads, relative_position_to_bucket"
    assert rows["running it"].startswith("NameError")
    # T5 buckets memory_position - query_position (j - i); the snippet's i - j, causally: all bucket 0.
    i = 10
    t5 = reference.t5_relative_position_bucket(np.arange(11) - i, bidirectional=False)
    snippet = reference.t5_relative_position_bucket(i - np.arange(11), bidirectional=False)
    assert list(t5) == list(range(10, -1, -1)) and set(snippet.tolist()) == {0}
    assert demo.numbers["t5_distinct"] == 11 and demo.numbers["snippet_distinct"] == 1
    assert demo.numbers["transpose_error"] == 0.0


def test_permutation_equivariant_not_invariant(demos):
    n = demos["equivariance"].numbers
    assert n["equivariance_gap"] < 1e-12 and n["weights_permuted_gap"] < 1e-12
    assert n["invariance_gap"] > 0.1 and n["weights_change"] > 0.1
    assert n["sinusoidal_gap"] > 1e-2
    assert n["causal_change"] > 1e-2 and n["bidirectional_change"] < 1e-12


def test_other_corrections_hold_their_numbers(demos):
    assert demos["wavelengths"].numbers["longest_128"] == pytest.approx(54410.14, rel=1e-6)
    assert demos["integer_index"].numbers["linear_residual"] == pytest.approx(3.383e-3, rel=1e-3)
    assert demos["integer_index"].numbers["affine_residual"] < 1e-12
    tc = dict(demos["tutorial_code"].rows)
    assert tc["dim_indices = np.arange(0, d, 2) (comment: [0, 1, ..., d/2 - 1])"] == "[0, 2, 4, 6]"
    assert demos["video_learned_code"].numbers["error"] > 0.1
    assert demos["shaw_not_bias"].numbers["change"] > 1.0
    assert demos["model_presets"].numbers["gpt3_parameters"] == 2048 * 12288


def test_worked_example_step5_reproduces_the_tutorial(demos):
    n = demos["worked_example"].numbers
    assert n["pe_rounding_error"] == 0.0 and n["sum_rounding_error"] == 0.0
    tokens = np.array(posenc.analysis.worked.TUTORIAL_TOKENS)
    sums = tokens + reference.sinusoidal(np.arange(3), 8)
    np.testing.assert_array_equal(np.round(sums[:, :4], 3), np.array(demonstrations.TUTORIAL_SUMS))


def test_fit_is_deterministic_on_rank_deficient_tables():
    """gelsy (QR with pivoting) varied from call to call here; the property tables must not."""
    enc = posenc.build("scaled_sinusoidal", dim=64)
    found = {properties.linear_relative_map(enc, 1, positions=range(256)).residual for _ in range(6)}
    assert len(found) == 1 and found.pop() < 1e-12


# ---------------------------------------------------------------------------
# Where a student looks: posenc show, posenc notes, the tutorial module.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("sinusoidal", ("L11", "T14", "T3", "0.046 at 400", "47,117")),
        ("rope", ("V16", "q^T R_{n-m} k = -1.9417", "q^T R_{m-n} k (the video script's form)")),
        ("t5", ("I11", "nn, num_heads, relative_position_to_bucket", "0 0 0 0 0 0 0 0 0 0 0")),
        ("nope", ("L1", "N3", "permutation equivariant, not invariant")),
    ],
)
def test_posenc_show_prints_the_notes_errors_about_the_encoding(name, shown):
    result = run_cli("show", name, "--positions", "3")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"What the notes get wrong about {name}" in result.output
    for text in shown:
        assert " ".join(text.split()) in flat, text
    data = json.loads(run_cli("show", name, "--positions", "3", "--format", "json").output)
    assert {row["id"] for row in data["notes_corrected"]} == {
        c.id for c in notes.claims(encoding=name, verdict="corrected")
    }


def test_posenc_show_sinusoidal_step5_and_wavelengths():
    data = json.loads(run_cli("show", "sinusoidal", "--format", "json").output)
    step = data["step5"]
    assert step["words"] == ["dog", "bites", "man"]
    want = np.array(step["tokens"]) + reference.sinusoidal(np.arange(3), 8)
    np.testing.assert_allclose(step["sums"], want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(data["wavelengths"], 2 * np.pi * np.array(data["divisors"]), rtol=1e-15)
    out = run_cli("show", "sinusoidal").output
    for row in (
        "│ + PE(0) │ 0.500 │  1.300 │ 0.800 │ 1.100 │",
        "│ + PE(2) │ 1.809 │ -0.316 │ 0.799 │ 1.280 │",
    ):
        assert row in out
    wide = run_cli("show", "sinusoidal", "--dim", "256", "--positions", "1").output
    assert "Step 5" not in wide  # the made-up embeddings are 8-dimensional
    slowest = f"{2 * math.pi * 10000 ** (254 / 256):,.1f}"  # below 10000 * 2 pi = 62,831.9
    assert "│ 127 │ 254,255 │" in wide and "│ ... │" in wide and slowest in wide


def test_posenc_notes_command():
    rows = json.loads(run_cli("notes", "--format", "json").output)
    assert [r["id"] for r in rows] == [c.id for c in notes.CLAIMS]
    table = run_cli("notes", "--verdict", "corrected")
    assert table.exit_code == 0 and all(c.id in table.output for c in notes.claims(verdict="corrected"))
    demo = json.loads(run_cli("notes", "--demo", "rope_sign", "--format", "json").output)
    assert demo["facts"]["video_sign"] is False and demo["facts"]["relative_only"] is True
    bad = run_cli("notes", "--encoding", "ropee")
    assert bad.exit_code == 2 and "did you mean 'rope'" in bad.output


def test_python_m_posenc_reference_tutorial_prints_what_the_tutorial_blocks_print():
    result = subprocess.run(
        [sys.executable, "-m", "posenc.reference.tutorial"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    for block in (USAGE_EXAMPLE, TRY_IT_YOURSELF):  # the tutorial's code, verbatim but for the import
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, "tutorial", "exec"), {})
        for line in printed.getvalue().splitlines():
            assert line in result.stdout.splitlines(), line
    assert "Shapes: token_embeds (1, 3, 128), pos_encodes (3, 128), final_embeds (1, 3, 128)" in result.stdout


def test_surface_figure_draws_the_even_dimensions():
    fig = viz.figure("sinusoidal", "surface", d_model=16, num_heads=2, num_positions=12)
    ax = fig.axes[0]
    assert ax.name == "3d" and ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and ax.get_zlabel()
    values = reference.sinusoidal(np.arange(12), 16)[:, 0::2]
    lo, hi = ax.get_zlim()
    assert lo == pytest.approx(-np.abs(values).max()) and hi == pytest.approx(np.abs(values).max())
    assert fig.axes[1].get_ylabel()  # the colour bar says what colour means


def test_sinusoid_encodes_far_positions_the_tutorial_class_refuses():
    enc = posenc.build("sinusoidal", dim=128)
    far = enc.embed(torch.zeros(1, 1, 128, dtype=torch.float64), positions=torch.tensor([[1000]]))[0, 0]
    np.testing.assert_allclose(far.numpy(), reference.sinusoidal(np.array([1000]), 128)[0], atol=1e-12)
