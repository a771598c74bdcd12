"""The NumPy references of the rotary kind (``posenc.reference.rotary``) against the papers'
definitions and properties (the encodings against the references: tests/unit/encoding/rotary/)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.reference import rotary as ref


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_matrix_is_a_rotation_and_relative(layout):
    """RoFormer eq. 15: R_m is orthogonal, and R_m^T R_n = R_{n-m}."""
    m, n, d = 3.0, 11.0, 8
    r_m, r_n = ref.rope_matrix(m, d, layout=layout), ref.rope_matrix(n, d, layout=layout)
    np.testing.assert_allclose(r_m.T @ r_m, np.eye(d), atol=1e-14)
    np.testing.assert_allclose(r_m.T @ r_n, ref.rope_matrix(n - m, d, layout=layout), atol=1e-14)


def test_rope_turns_each_pair_by_its_angle_by_hand():
    """d = 2, one pair, theta_0 = 1: position 2 turns (1, 0) to (cos 2, sin 2)."""
    got = ref.rope(np.array([[1.0, 0.0]]), np.array([2]))
    np.testing.assert_allclose(got[0], [np.cos(2.0), np.sin(2.0)], atol=1e-15)


def test_linear_scaling_divides_every_frequency_and_ntk_raises_the_base():
    theta, _ = ref.rope_scaling_default(8, 10000.0)
    linear, scale = ref.rope_scaling_linear(8, 10000.0, 4.0)
    np.testing.assert_allclose(linear, theta / 4.0, rtol=1e-15)
    assert scale == 1.0
    ntk, _ = ref.rope_scaling_ntk(8, 10000.0, 4.0)
    np.testing.assert_allclose(ntk, (10000.0 * 4.0 ** (8 / 6)) ** (-np.arange(0, 8, 2) / 8), rtol=1e-14)
    assert ntk[0] == theta[0] and np.all(ntk[1:] < theta[1:])  # the fastest pair keeps its frequency


def test_mrope_on_text_turns_every_pair_as_rope():
    """Text tokens sit on the diagonal (t = h = w): M-RoPE's rotation is 1-D RoPE's."""
    x = np.random.default_rng(0).normal(size=(3, 8))
    positions = np.array([0, 4, 9])
    inv_freq, axis = ref.mrope_frequencies(8, 10000.0, [2, 1, 1])
    got = ref.pair_rope(x, np.repeat(positions[:, None], 3, axis=1), inv_freq, axis)
    np.testing.assert_allclose(got, ref.rope(x, positions), atol=1e-14)
