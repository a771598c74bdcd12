"""The NumPy references of the bias kind (``posenc.reference.bias``) against the papers' definitions
worked by hand (the encodings against the references: tests/unit/encoding/bias/)."""

from __future__ import annotations

import numpy as np

from posenc.reference import bias as ref


def test_alibi_slopes_for_8_heads_are_the_papers():
    """Press et al. sec. 3: 1/2, 1/4, ..., 1/256."""
    np.testing.assert_array_equal(ref.alibi_slopes(8), 0.5 ** np.arange(1, 9))


def test_alibi_is_minus_slope_times_distance_and_masks_nothing_itself():
    got = ref.alibi(np.arange(3), np.arange(3), 2, bidirectional=True)
    distance = np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
    np.testing.assert_allclose(got, -ref.alibi_slopes(2)[:, None, None] * distance)


def test_alibi_2d_on_the_diagonal_is_alibi_times_sqrt_2():
    """Coordinates (p, p): the Euclidean distance is sqrt(2) |p - q|; no position: no bias."""
    coords = np.repeat(np.arange(4)[:, None], 2, axis=1)
    got = ref.alibi_2d(coords, coords, 4)
    np.testing.assert_allclose(got, ref.alibi(np.arange(4), np.arange(4), 4, bidirectional=True) * np.sqrt(2))
    cls = ref.alibi_2d(np.array([[-1, -1], [1, 1]]), np.array([[0, 0], [-1, -1]]), 2)
    assert not cls[:, 0].any() and not cls[:, :, 1].any() and cls[:, 1, 0].all()
