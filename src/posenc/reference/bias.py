"""NumPy float64 references for the bias family, ``posenc.encoding.bias`` (no torch here).

Each function takes integer query positions ``q (i,)`` or ``(b, i)`` and key positions
``k (j,)`` or ``(b, j)`` and returns the bias ``(h, i, j)`` (or ``(b, h, i, j)``) added to
the scaled attention scores. Written to be read next to the papers; loops are kept
where they make the definition plainer than a vectorised form would.

Axis legend: b batch, h heads, i query positions, j key positions. 2-D ALiBi takes coordinates
``(i, a)`` and ``(j, a)`` instead, ``-1`` on every axis of a token meaning "no grid position".
"""

from __future__ import annotations

import math

import numpy as np

from posenc.core.errors import PosencError
from posenc.reference._coordinates import coordinates as _coords

__all__ = [
    "alibi",
    "alibi_2d",
    "alibi_slopes",
    "fire",
    "kerple_log",
    "kerple_power",
    "sandwich",
    "t5",
    "t5_relative_position_bucket",
]


def _distance(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``i - j`` as float64, shape ``(..., i, j)``."""
    q = np.asarray(q, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    return (q[..., :, None] - k[..., None, :]).astype(np.float64)


def _with_heads(per_head: list[np.ndarray]) -> np.ndarray:
    """Stack a list of ``(..., i, j)`` arrays along a new head axis: ``(..., h, i, j)``."""
    return np.stack(per_head, axis=-3)


# --- ALiBi (Press et al. 2022) ----------------------------------------------------------


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's head slopes, float64 ``(h,)``.

    For ``n`` a power of two: the geometric sequence ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``.
    Otherwise (the paper's footnote / official code): the slopes of the closest lower power
    of two ``p``, followed by every other slope of the ``2p`` sequence, ``n - p`` of them.
    """
    if num_heads <= 0:
        raise PosencError(f"num_heads must be >= 1, got {num_heads}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (m + 1) / n) for m in range(n)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(p)
    if p < num_heads:
        slopes += power_of_two(2 * p)[0::2][: num_heads - p]
    return np.array(slopes, dtype=np.float64)


def alibi(q: np.ndarray, k: np.ndarray, num_heads: int, bidirectional: bool = False) -> np.ndarray:
    """Causal: ``-m_h (i - j)``; bidirectional: ``-m_h |i - j|``."""
    d = _distance(q, k)
    d = np.abs(d) if bidirectional else d
    return _with_heads([-m * d for m in alibi_slopes(num_heads)])


# --- T5 relative position buckets (Raffel et al. 2020) -----------------------------------


def t5_relative_position_bucket(
    relative_position: np.ndarray, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> np.ndarray:
    """Bucket of ``relative_position = j - i`` (key minus query), as Mesh-TF / HF T5.

    Half the buckets (of one direction) hold exact distances ``0 .. max_exact-1``; the
    rest grow logarithmically up to ``max_distance``; farther distances share the last
    bucket. Bidirectional: keys after the query (``j > i``) use the upper half.
    """
    rel = np.asarray(relative_position, dtype=np.int64)
    out = np.zeros(rel.shape, dtype=np.int64)
    n = num_buckets
    if bidirectional:
        n //= 2
        out += (rel > 0).astype(np.int64) * n
        dist = np.abs(rel)
    else:
        dist = -np.minimum(rel, 0)
    max_exact = n // 2
    with np.errstate(divide="ignore"):
        ratio = np.log(np.maximum(dist, 1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + np.floor(ratio * (n - max_exact)).astype(np.int64)
    large = np.minimum(large, n - 1)
    return out + np.where(dist < max_exact, dist, large)


def t5(
    q: np.ndarray,
    k: np.ndarray,
    table: np.ndarray,
    bidirectional: bool = False,
    max_distance: int = 128,
) -> np.ndarray:
    """``table[bucket(j - i), h]`` with ``table (num_buckets, h)``."""
    table = np.asarray(table, dtype=np.float64)
    rel = -_distance(q, k).astype(np.int64)  # j - i
    bucket = t5_relative_position_bucket(rel, bidirectional, table.shape[0], max_distance)
    return _with_heads([table[bucket, h] for h in range(table.shape[1])])


# --- KERPLE (Chi et al. 2022) ------------------------------------------------------------


def _kerple_distance(q: np.ndarray, k: np.ndarray, bidirectional: bool) -> np.ndarray:
    d = _distance(q, k)
    # Causal: the official code uses tril(i - j), i.e. distance 0 above the diagonal.
    return np.abs(d) if bidirectional else np.maximum(d, 0.0)


def kerple_log(
    q: np.ndarray, k: np.ndarray, r1: np.ndarray, r2: np.ndarray, bidirectional: bool = False
) -> np.ndarray:
    """``-r1_h * log(1 + r2_h * |i - j|)`` (r1, r2 already clamped)."""
    d = _kerple_distance(q, k, bidirectional)
    return _with_heads([-a * np.log1p(b * d) for a, b in zip(np.ravel(r1), np.ravel(r2))])


def kerple_power(
    q: np.ndarray, k: np.ndarray, r1: np.ndarray, r2: np.ndarray, bidirectional: bool = False
) -> np.ndarray:
    """``-r1_h * |i - j|^r2_h`` with ``0 < r2 <= 2`` (r1, r2 already clamped)."""
    d = _kerple_distance(q, k, bidirectional)
    return _with_heads([-a * d**b for a, b in zip(np.ravel(r1), np.ravel(r2))])


# --- FIRE (Li et al. 2023) ---------------------------------------------------------------


def fire(
    q: np.ndarray,
    k: np.ndarray,
    c: float,
    threshold: float,
    w1: np.ndarray,
    b1: np.ndarray,
    w2: np.ndarray,
    b2: np.ndarray,
    bidirectional: bool = False,
    eps: float = 1e-6,
) -> np.ndarray:
    """``f(psi(|i - j|) / psi(max(L, i)))`` with ``psi(x) = log(|c x| + 1)``.

    ``f(x) = w2 @ relu(w1 x + b1) + b2``: ``w1 (u,)``, ``b1 (u,)``, ``w2 (H_out, u)``,
    ``b2 (H_out,)``. Causal: ``H_out = h``. Bidirectional (posenc's extension): the
    normaliser is ``psi(max(L, i, j))`` and ``H_out = 2h``; heads ``0..h-1`` serve
    ``j <= i`` and heads ``h..2h-1`` serve ``j > i``.
    """
    q = np.asarray(q, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    d = _distance(q, k)
    qi = q[..., :, None].astype(np.float64)
    kj = k[..., None, :].astype(np.float64)
    position = np.maximum(qi, kj) if bidirectional else qi + 0.0 * kj
    normaliser = np.log(np.abs(c * np.maximum(position, threshold)) + 1.0) + eps
    x = np.log(np.abs(c * d) + 1.0) / normaliser  # (..., i, j)
    hidden = np.maximum(x[..., None] * np.asarray(w1) + np.asarray(b1), 0.0)  # (..., i, j, u)
    out = hidden @ np.asarray(w2, dtype=np.float64).T + np.asarray(b2)  # (..., i, j, H_out)
    num_heads = out.shape[-1] // 2 if bidirectional else out.shape[-1]
    heads = []
    for h in range(num_heads):
        value = out[..., h]
        if bidirectional:
            value = np.where(d < 0, out[..., num_heads + h], value)
        heads.append(value)
    return _with_heads(heads)


# --- Sandwich (Chi et al. 2023) ----------------------------------------------------------


def sandwich(
    q: np.ndarray, k: np.ndarray, num_heads: int, embed_dim: int = 128, base: float = 10000.0
) -> np.ndarray:
    """``(p_i . p_j - d'/2) / (8 h / H)`` for heads ``h = 1..H``.

    ``p_i . p_j = sum_{k=1}^{d'/2} cos((i - j) / base^(2k/d'))`` is the inner product of
    two sinusoidal embeddings of size ``d'`` (it depends on ``i - j`` only); subtracting
    its value at distance 0, ``d'/2``, makes the bias 0 on the diagonal and <= 0 elsewhere.
    """
    d = _distance(q, k)
    profile = np.zeros_like(d)
    for kk in range(1, embed_dim // 2 + 1):
        profile += np.cos(d / base ** (2.0 * kk / embed_dim))
    profile -= embed_dim / 2
    return _with_heads([profile / (8.0 * h / num_heads) for h in range(1, num_heads + 1)])


# --- 2-D ALiBi: positions with axes -----------------------------------------------------------


def alibi_2d(q_coords: np.ndarray, k_coords: np.ndarray, num_heads: int) -> np.ndarray:
    """2-D ALiBi (Fuller et al. 2023, CROMA): ``B[h, i, j] = -m_h ||p_i - p_j||_2`` with ALiBi's
    slopes; 0 to and from tokens without a position. ``(i, a)``, ``(j, a)`` -> ``(h, i, j)``."""
    q, q_present = _coords(q_coords)
    k, k_present = _coords(k_coords)
    slopes = alibi_slopes(num_heads)
    out = np.zeros((num_heads, len(q), len(k)))
    for i in range(len(q)):
        for j in range(len(k)):
            if q_present[i] and k_present[j]:
                out[:, i, j] = -slopes * np.sqrt(np.sum((q[i] - k[j]) ** 2))
    return out
