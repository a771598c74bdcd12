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
