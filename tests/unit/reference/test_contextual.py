"""The NumPy reference of CoPE (``posenc.reference.contextual``) against the paper's definition worked
by hand (the encoding against the reference: tests/unit/encoding/test_contextual.py)."""

from __future__ import annotations

import numpy as np

from posenc.reference import contextual as ref


def test_every_gate_open_counts_the_keys_from_j_to_the_query():
    """Gates of 1 (logits +inf would be 1; large logits nearly): p_ij = i - j + 1 under a causal mask."""
    n = 4
    logits = np.where(np.tril(np.ones((n, n))) > 0, 50.0, -np.inf)[None, None]
    got = ref.cope_positions(logits, npos_max=16)[0, 0]
    want = np.tril(np.arange(n)[:, None] - np.arange(n)[None, :] + 1.0)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert ref.cope_positions(logits, npos_max=3)[0, 0].max() == 2  # clipped at npos_max - 1


def test_a_position_between_two_integers_interpolates_their_embeddings():
    """CoPE eq. (5): with one gate of sigmoid(0) = 1/2, z = q.(e[0] + e[1]) / 2."""
    q = np.array([1.0, 2.0]).reshape(1, 1, 1, 2)
    emb = np.array([[1.0, 0.0], [0.0, 1.0]])
    got = ref.cope_scores(q, np.zeros((1, 1, 1, 1)), emb, npos_max=2)
    assert got[0, 0, 0, 0] == 0.5 * 1.0 + 0.5 * 2.0
