"""NumPy float64 references for the relative family (Shaw et al. 2018, Transformer-XL).

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim,
r size of Transformer-XL's sinusoid R, m relative-distance table rows.

Everything here is the *direct* form: each (query, key) pair looks up its own
relative vector, an O(b*h*i*j*d) computation with no tricks, to be read next to
the papers. The PyTorch classes in :mod:`posenc.encoding.relative` must equal these.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "shaw_buckets",
    "shaw_scores",
    "shaw_values",
    "transformer_xl_sinusoid",
    "transformer_xl_scores",
]


def _per_head(table: np.ndarray, num_heads: int) -> np.ndarray:
    """A table shared by all heads ``(m, d)`` or per head ``(h, m, d)`` -> ``(h, m, d)``."""
    table = np.asarray(table, dtype=np.float64)
    return np.broadcast_to(table, (num_heads,) + table.shape) if table.ndim == 2 else table


def shaw_buckets(q_positions: np.ndarray, k_positions: np.ndarray, max_relative_distance: int) -> np.ndarray:
    """Row of the Shaw table for each pair: ``clip(j - i, -k, k) + k``; ``(b,i), (b,j) -> (b,i,j)``."""
    qp = np.asarray(q_positions, dtype=np.int64)
    kp = np.asarray(k_positions, dtype=np.int64)
    distance = kp[:, None, :] - qp[:, :, None]  # j - i
    return np.clip(distance, -max_relative_distance, max_relative_distance) + max_relative_distance


def shaw_scores(
    q: np.ndarray,
    q_positions: np.ndarray,
    k_positions: np.ndarray,
    key_table: np.ndarray,
    max_relative_distance: int,
) -> np.ndarray:
    """Shaw eq. (4)'s extra term ``q_i . a^K_ij`` with ``a^K_ij = w^K[clip(j - i, k)]``.

    Args:
        q: ``(b, h, i, d)`` queries.
        q_positions, k_positions: ``(b, i)`` and ``(b, j)`` integer positions.
        key_table: ``(2k+1, d)`` shared by the heads, or ``(h, 2k+1, d)``.
        max_relative_distance: ``k``.

    Returns:
        ``(b, h, i, j)`` unscaled: attention adds it to ``q_i . k_j`` before ``1/sqrt(d)``.
    """
    q = np.asarray(q, dtype=np.float64)
    table = _per_head(key_table, q.shape[1])  # (h, 2k+1, d)
    bucket = shaw_buckets(q_positions, k_positions, max_relative_distance)  # (b, i, j)
    a_k = table[:, bucket]  # (h, b, i, j, d): one vector per pair
    return np.einsum("bhid,hbijd->bhij", q, a_k)


def shaw_values(
    probs: np.ndarray,
    q_positions: np.ndarray,
    k_positions: np.ndarray,
    value_table: np.ndarray,
    max_relative_distance: int,
) -> np.ndarray:
    """Shaw eq. (3)'s extra term ``sum_j alpha_ij a^V_ij``; ``probs (b,h,i,j) -> (b,h,i,d)``."""
    probs = np.asarray(probs, dtype=np.float64)
    table = _per_head(value_table, probs.shape[1])  # (h, 2k+1, d)
    bucket = shaw_buckets(q_positions, k_positions, max_relative_distance)  # (b, i, j)
    a_v = table[:, bucket]  # (h, b, i, j, d)
    return np.einsum("bhij,hbijd->bhid", probs, a_v)


def transformer_xl_sinusoid(distance: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """``R_delta = [sin(delta * f), cos(delta * f)]`` with ``f_t = base^(-2t/dim)``; ``(...) -> (..., dim)``.

    Concatenated halves (not interleaved), the layout of the Transformer-XL code.
    """
    delta = np.asarray(distance, dtype=np.float64)
    inv_freq = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)  # (dim/2,)
    angles = delta[..., None] * inv_freq
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def transformer_xl_scores(
    q: np.ndarray,
    k: np.ndarray,
    q_positions: np.ndarray,
    k_positions: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    w_r: np.ndarray,
    base: float = 10000.0,
) -> np.ndarray:
    """Terms (b) + (c) + (d) of Transformer-XL eq. (sec. 3.3); term (a) ``q_i . k_j`` is attention's own.

    ``A_ij = q_i.k_j (a) + q_i.W_R R_{i-j} (b) + u.k_j (c) + v.W_R R_{i-j} (d)``.

    Args:
        q, k: ``(b, h, i, d)``, ``(b, h, j, d)``.
        q_positions, k_positions: ``(b, i)``, ``(b, j)``.
        u, v: ``(h, d)`` learned global content / position biases.
        w_r: ``(h, d, r)`` per-head projection of the sinusoid ``R`` (size ``r``).

    Returns:
        ``(b, h, i, j)`` unscaled.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    qp = np.asarray(q_positions, dtype=np.int64)
    kp = np.asarray(k_positions, dtype=np.int64)
    distance = qp[:, :, None] - kp[:, None, :]  # (b, i, j): i - j
    r = transformer_xl_sinusoid(distance, w_r.shape[-1], base)  # (b, i, j, r)
    w_r_r = np.einsum("hdr,bijr->bhijd", w_r, r)  # W_R R_{i-j}: (b, h, i, j, d)
    term_b = np.einsum("bhid,bhijd->bhij", q, w_r_r)
    term_c = np.einsum("hd,bhjd->bhj", u, k)[:, :, None, :]
    term_d = np.einsum("hd,bhijd->bhij", v, w_r_r)
    return term_b + term_c + term_d
