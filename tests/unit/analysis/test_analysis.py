"""posenc.analysis against closed forms and the seeds' claims."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc
from posenc import analysis
from posenc.analysis import properties

NAMES = list(posenc.ENCODINGS)


def needs(name: str):
    return pytest.mark.skipif(name not in posenc.ENCODINGS, reason=f"{name!r} is not registered")


# ---------------------------------------------------------------------------
# Sinusoidal: the linear relative map is the closed-form block rotation.
# ---------------------------------------------------------------------------


@needs("sinusoidal")
@pytest.mark.parametrize("dim", [16, 128])
@pytest.mark.parametrize("shift", [1, 37])
def test_sinusoidal_fitted_map_is_the_closed_form_rotation(dim, shift):
    enc = posenc.build("sinusoidal", dim=dim)
    fit = analysis.linear_relative_map(enc, shift)
    closed = analysis.sinusoidal_shift_matrix(dim, shift)
    assert fit.residual < 1e-9
    np.testing.assert_allclose(fit.matrix, closed, rtol=0, atol=1e-9)
    assert fit.offblock_fraction < 1e-18  # block-diagonal
    assert fit.rotation_error < 1e-9  # each 2x2 block orthogonal


@given(shift=st.integers(0, 5000), dim=st.sampled_from([2, 8, 32]), start=st.integers(0, 10**6))
def test_closed_form_rotation_maps_pe_exactly(shift, dim, start):
    positions = start + np.arange(16)
    table = properties.sinusoidal_table(positions, dim)
    moved = properties.sinusoidal_table(positions + shift, dim)
    rotation = properties.sinusoidal_shift_matrix(dim, shift)
    np.testing.assert_allclose(table @ rotation.T, moved, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(dim), rtol=0, atol=1e-12)  # a rotation


@needs("sinusoidal")
def test_signal_of_sinusoidal_is_the_seed_formula_in_float64():
    enc = posenc.build("sinusoidal", dim=64)
    positions = np.array([0, 1, 7, 1000, 123456])
    got = analysis.position_signal(enc, positions)
    # Angles p * w differ by rounding of w between implementations: ~1e-16 * p absolute.
    atol = 1e-15 * positions.max() + 1e-13
    np.testing.assert_allclose(got, properties.sinusoidal_table(positions, 64), rtol=0, atol=atol)


@needs("learned")
def test_learned_positions_have_no_linear_relative_map():
    fit = analysis.linear_relative_map(analysis.make("learned", d_model=32), 1)
    assert fit.residual > 0.3  # random rows: no fixed M maps row p to row p+1
    assert fit.offblock_fraction > 0.3


def test_linear_map_rejects_non_additive():
    rotary = [n for n in NAMES if posenc.ENCODINGS[n].kind != "additive"]
    with pytest.raises(ValueError, match="additive"):
        analysis.linear_relative_map(analysis.make(rotary[0]), 1)


# ---------------------------------------------------------------------------
# Uniqueness, boundedness, integer indices.
# ---------------------------------------------------------------------------


@needs("sinusoidal")
def test_sinusoidal_unique_and_bounded():
    enc = posenc.build("sinusoidal", dim=64)
    u = analysis.uniqueness(enc, 256)
    assert u.unique and u.min_distance > 0.1
    r = analysis.value_range(enc, 64)
    assert -1.0 <= r.minimum < -0.9 and 0.9 < r.maximum <= 1.0
    assert r.growth == pytest.approx(1.0, abs=1e-9) and r.bounded


@needs("nope")
def test_no_encoding_gives_identical_positions():
    u = analysis.uniqueness(analysis.make("nope"), 8)
    assert u.min_distance == 0.0 and not u.unique


def test_integer_indices_grow_without_bound():
    g = analysis.integer_index_growth(512, positions=(1, 10, 100, 1000, 10_000))
    assert np.all(np.diff(g.index_norm) > 0)
    np.testing.assert_allclose(g.index_norm, g.positions * np.sqrt(512))  # ||[p, ..., p]|| = p sqrt(d)
    np.testing.assert_allclose(g.sinusoidal_norm, np.sqrt(256), rtol=1e-12)  # bounded: sqrt(d/2)
    # The position swamps the token: p sqrt(d) / (0.02 sqrt(d)) = 50 p.
    np.testing.assert_allclose(g.index_norm / g.token_norm, 50 * g.positions)
    np.testing.assert_allclose(g.normalized_step, 1 / g.positions)


@needs("integer_index")
def test_registered_integer_index_is_unbounded():
    r = analysis.value_range(analysis.make("integer_index"), 32)
    assert r.growth > 4 and not r.bounded


# ---------------------------------------------------------------------------
# Translation invariance (RoPE offset invariance) and decay.
# ---------------------------------------------------------------------------


@needs("rope")
@settings(max_examples=10)
@given(shift=st.integers(1, 100_000), seed=st.integers(0, 1000))
def test_rope_scores_depend_only_on_offset(shift, seed):
    enc = analysis.make("rope", d_model=64, num_heads=4)
    res = analysis.translation_residual(enc, 12, shifts=(shift,), seed=seed)
    assert res.relative[0] < 1e-9


@pytest.mark.parametrize("name", [n for n in NAMES if posenc.ENCODINGS[n].kind == "rotary"])
def test_rotary_kernels_are_finite_and_position_dependent(name):
    enc = analysis.make(name)
    k = analysis.position_kernel(enc, np.arange(8))
    assert np.isfinite(k).all()
    assert np.ptp(k) > 0  # positions change the score


@needs("learned")
def test_learned_kernel_is_not_translation_invariant():
    res = analysis.translation_residual(analysis.make("learned"), 8, shifts=(3,))
    assert res.relative[0] > 0.05


def test_rope_decay_bound_closed_form():
    d = 64
    bound = analysis.rope_decay_bound(d, [0, 1, 50, 250])
    assert bound[0] == pytest.approx((d / 2 + 1) / 2)  # |S_j| = j at r = 0: mean of 1..d/2
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    for r, value in zip([1, 50, 250], bound[1:]):
        brute = np.mean([abs(sum(np.exp(1j * r * theta[:j]))) for j in range(1, d // 2 + 1)])
        assert value == pytest.approx(brute, rel=1e-12)
    assert bound[-1] < bound[0] / 3  # decays with distance


@needs("rope")
def test_distance_decay_starts_at_the_norm():
    enc = analysis.make("rope", d_model=64, num_heads=4)
    curve = analysis.distance_decay(enc, range(0, 20))
    assert curve.shape == (1, 20)
    assert curve[0, 0] == pytest.approx(16.0)  # all-ones q.k at distance 0 = head_dim
    assert np.all(curve[0, 1:] < curve[0, 0])


# ---------------------------------------------------------------------------
# Seed 004's similarity table.
# ---------------------------------------------------------------------------


@needs("sinusoidal")
def test_seed_similarity_table_recomputed():
    check = analysis.tutorial_similarity_check(dims=(128, 512))
    true = check.computed[128]
    w = 10000.0 ** (-np.arange(0, 128, 2) / 128)
    k = np.arange(8)
    closed = np.cos((k[:, None, None] - k[None, :, None]) * w).mean(-1)  # mean_i cos((m-n) w_i)
    np.testing.assert_allclose(true, closed, rtol=0, atol=1e-12)
    assert true.min() > 0.7  # all positive for d_model 128...
    assert check.printed.min() == pytest.approx(-0.73)  # ...while the seed prints -0.73
    assert check.max_abs_difference[128] > 1.4
    assert check.closest_difference > 0.5  # no d_model reproduces the seed's numbers


# ---------------------------------------------------------------------------
# Probes through a small model, and the per-encoding property table.
# ---------------------------------------------------------------------------


@needs("nope")
def test_order_sensitivity_zero_without_encoding_and_positive_with_one():
    none = analysis.position_sensitivity("nope")
    assert none.token_change < 1e-12 and none.pooled_change < 1e-12
    assert analysis.position_sensitivity("nope", causal=True).token_change > 1e-3  # the mask orders tokens
    additive = [n for n in NAMES if posenc.ENCODINGS[n].kind == "additive"][0]
    assert analysis.position_sensitivity(additive).token_change > 1e-3
    assert analysis.equivariance_gap("nope") < 1e-12
    assert analysis.equivariance_gap(additive) > 1e-3


def test_attention_maps_are_probabilities():
    name = NAMES[0]
    maps = analysis.attention_maps(name, seq_len=6, num_layers=2, num_heads=2)
    assert maps.shape == (2, 2, 6, 6)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-9)
    assert np.all(np.triu(maps, 1) == 0)  # causal


@pytest.mark.parametrize("name", NAMES)
def test_property_table_for_every_encoding(name):
    props = analysis.encoding_properties(name, d_model=16, num_heads=2, probes_enabled=False)
    keys = [key for key, _, _ in analysis.PROPERTY_COLUMNS]
    assert set(props.values) >= set(keys) - {"sensitivity", "equivariance"}
    assert props.values["kind"] == posenc.ENCODINGS[name].kind
    for key, value in props.values.items():
        assert value is not None or key in props.notes, f"{name}: {key} n/a without a reason"
