"""NumPy float64 references for the contextual family (CoPE, Golovneva et al. 2024).

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim,
P npos_max (number of learned position embeddings).
"""

from __future__ import annotations

import numpy as np

__all__ = ["cope_positions", "cope_scores"]


def cope_positions(logits: np.ndarray, npos_max: int) -> np.ndarray:
    """CoPE eq. (3)-(4): ``g_ij = sigmoid(logits_ij)``, ``p_ij = min(sum_{t >= j} g_it, npos_max - 1)``.

    ``logits (b,h,i,j)`` are scaled and masked with ``-inf`` (gate 0). With a causal
    mask the sum runs over ``t = j .. i``, so ``p_ij`` counts, in ``[0, i-j+1]``,
    how many keys between ``j`` and the query "count".
    """
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore"):
        gates = 1.0 / (1.0 + np.exp(-logits))  # exp(+inf) -> inf -> gate 0
    n = logits.shape[-1]
    positions = np.zeros_like(gates)
    for j in range(n):  # the plain sum, one key at a time
        positions[..., j] = gates[..., j:].sum(axis=-1)
    return np.minimum(positions, npos_max - 1)


def cope_scores(
    q: np.ndarray,
    logits: np.ndarray,
    pos_emb: np.ndarray,
    npos_max: int,
    scale_position_logits: bool = False,
) -> np.ndarray:
    """CoPE eq. (5)-(6): ``logits_ij + z_ij`` with ``z_ij`` interpolated between integer positions.

    ``z_ij = (p - floor p) q_i.e[ceil p] + (1 - (p - floor p)) q_i.e[floor p]``.

    Args:
        q: ``(b, h, i, d)`` queries (unscaled).
        logits: ``(b, h, i, j)`` scaled, masked with ``-inf``.
        pos_emb: ``(P, d)`` learned position embeddings ``e[0..P-1]``.
        npos_max: ``P``.
        scale_position_logits: divide ``z`` by ``sqrt(d)`` (the released code's default).

    Returns:
        ``(b, h, i, j)``; ``-inf`` stays where ``logits`` is ``-inf``.
    """
    q = np.asarray(q, dtype=np.float64)
    logits = np.asarray(logits, dtype=np.float64)
    p = cope_positions(logits, npos_max)  # (b, h, i, j)
    lo = np.floor(p).astype(np.int64)
    hi = np.ceil(p).astype(np.int64)
    w = p - lo
    e = np.asarray(pos_emb, dtype=np.float64)  # (P, d)
    z = w * np.einsum("bhid,bhijd->bhij", q, e[hi]) + (1.0 - w) * np.einsum("bhid,bhijd->bhij", q, e[lo])
    if scale_position_logits:
        z = z / np.sqrt(q.shape[-1])
    return logits + z
