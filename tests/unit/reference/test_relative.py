"""The NumPy references of the relative kind (``posenc.reference.relative``) against the papers'
equations worked by hand (the encodings against the references: tests/unit/encoding/test_relative.py)."""

from __future__ import annotations

import numpy as np

from posenc.reference import relative as ref


def test_shaw_reference_is_the_papers_equation_by_hand():
    """One pair worked out by hand: e_01 = q_0 . w^K[clip(1 - 0, k) + k]."""
    q = np.zeros((1, 1, 2, 2))
    q[0, 0, 0] = [1.0, 2.0]
    table = np.arange(10.0).reshape(5, 2)  # k = 2 -> rows for distances -2..2
    scores = ref.shaw_scores(q, np.array([[0, 1]]), np.array([[0, 1]]), table, 2)
    assert scores[0, 0, 0, 1] == 1 * 6 + 2 * 7  # distance +1 -> row 3 = [6, 7]
    assert scores[0, 0, 0, 0] == 1 * 4 + 2 * 5  # distance 0 -> row 2


def test_transformer_xl_sinusoid_is_sin_then_cos_of_distance_times_frequency():
    """Distance 0: sines 0, cosines 1; distance 2, dim 4: [sin 2, sin 0.02, cos 2, cos 0.02]."""
    np.testing.assert_array_equal(ref.transformer_xl_sinusoid(np.array(0), 6), [0, 0, 0, 1, 1, 1])
    want = [np.sin(2.0), np.sin(0.02), np.cos(2.0), np.cos(0.02)]
    np.testing.assert_allclose(ref.transformer_xl_sinusoid(np.array(2), 4), want, rtol=1e-15)
