"""NumPy float64 references for encodings of positions with several axes (images, video, VLMs).

Axis legend: n tokens, a position axes (``(h, w)`` or ``(t, h, w)``), d feature dim (d_model for
additive encodings, head_dim for rotary ones), r/2 rotary pairs.

Coordinates are ``(..., n, a)`` integers; ``-1`` on every axis of a token means "no grid
position" (a class token): additive encodings give it a zero vector, rotary ones the identity.
Written loop by loop next to the papers, independent of the PyTorch paths they check.
"""

from __future__ import annotations

import numpy as np

from posenc.core.errors import PosencError
from posenc.reference.bias import alibi_slopes
from posenc.reference.rotary import rope_inv_freq, rope_matrix

__all__ = [
    "alibi_2d",
    "axial_rope_frequencies",
    "interpolate_table",
    "learned_axial",
    "mrope_frequencies",
    "pair_rope",
    "rope_mixed",
    "rope_mixed_frequencies",
    "sincos_1d",
    "sincos_axial",
]


def _coords(coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(coordinates as float64, mask of tokens with a position)``."""
    coords = np.asarray(coords)
    present = ~np.all(coords == -1, axis=-1)
    return np.where(present[..., None], coords, 0).astype(np.float64), present


def sincos_1d(positions: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """MAE's 1-D block: ``[sin(p w_0) .. sin(p w_{k-1}), cos(p w_0) .. cos(p w_{k-1})]`` with
    ``k = dim / 2`` and ``w_i = base^(-i / k)``; ``(...,) -> (..., dim)``."""
    k = dim // 2
    omega = base ** (-np.arange(k, dtype=np.float64) / k)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * omega
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def sincos_axial(coords: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """MAE's 2-D sin-cos table (He et al. 2022), and its 3-D extension: one :func:`sincos_1d`
    block of ``dim / a`` features per axis, the LAST axis first (MAE: ``[w | h]`` for a token at
    row h, column w; ``[w | h | t]`` in 3-D); a token without a position gets zeros.

    ``(..., n, a) -> (..., n, dim)``.
    """
    values, present = _coords(coords)
    a = values.shape[-1]
    if dim % (2 * a):
        raise PosencError(f"dim must be divisible by 2 * axes = {2 * a}, got {dim}")
    blocks = [sincos_1d(values[..., axis], dim // a, base) for axis in reversed(range(a))]
    return np.concatenate(blocks, axis=-1) * present[..., None]


def learned_axial(coords: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
    """Factorized learned embeddings (ViT, Dosovitskiy et al. 2021, appendix D.4): one table per
    axis, ``tables[k] (rows, dim / a)``, the rows of each axis concatenated in axis order; a token
    without a position gets zeros. ``(..., n, a) -> (..., n, dim)``."""
    values, present = _coords(coords)
    index = values.astype(np.int64)
    for axis, table in enumerate(tables):
        top = index[..., axis][present].max(initial=-1)
        if top >= table.shape[0]:
            raise PosencError(f"axis {axis} coordinate {top} has no row in a table of {table.shape[0]} rows")
    parts = [np.asarray(table, dtype=np.float64)[index[..., axis]] for axis, table in enumerate(tables)]
    return np.concatenate(parts, axis=-1) * present[..., None]


def interpolate_table(table: np.ndarray, rows: int) -> np.ndarray:
    """Resample a per-axis table ``(old, k)`` to ``(rows, k)`` by linear interpolation over the
    cell centres (what ViT fine-tuning at a higher resolution does to its position table, here per
    axis): new row ``i`` reads old coordinate ``(i + 0.5) * old / rows - 0.5``, clamped to the table.
    """
    table = np.asarray(table, dtype=np.float64)
    old = table.shape[0]
    out = np.empty((rows, table.shape[1]))
    for i in range(rows):
        x = min(max((i + 0.5) * old / rows - 0.5, 0.0), old - 1.0)
        lo = int(np.floor(x))
        hi = min(lo + 1, old - 1)
        frac = x - lo
        out[i] = (1 - frac) * table[lo] + frac * table[hi]
    return out


def axial_rope_frequencies(sections: list[int], base: float) -> tuple[np.ndarray, np.ndarray]:
    """Axial RoPE (EVA-02; Heo et al. 2024, RoPE-Axial): axis ``k`` owns ``sections[k]`` consecutive
    pairs with its own ladder ``base^(-j / sections[k])``, ``j = 0 .. sections[k] - 1`` (a 1-D RoPE of
    ``2 sections[k]`` features per axis). Returns ``(inv_freq (r/2,), axis of each pair (r/2,))``."""
    inv_freq = np.concatenate([rope_inv_freq(2 * s, base) for s in sections])
    axis = np.concatenate([np.full(s, k) for k, s in enumerate(sections)]).astype(np.int64)
    return inv_freq, axis


def mrope_frequencies(
    head_dim: int, base: float, mrope_section: list[int], *, interleaved: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE (Qwen2-VL, Wang et al. 2024): the 1-D RoPE frequencies ``base^(-2i/d)`` of every pair,
    each pair reading one axis of ``(t, h, w)``: the first ``mrope_section[0]`` pairs t, the next
    h, the rest w; ``interleaved`` (Qwen3-VL): pair ``i`` reads h when ``i % 3 == 1`` and
    ``i < 3 mrope_section[1]``, w when ``i % 3 == 2`` and ``i < 3 mrope_section[2]``, else t.
    Returns ``(inv_freq (d/2,), axis of each pair (d/2,))``."""
    inv_freq = rope_inv_freq(head_dim, base)
    pairs = head_dim // 2
    if sum(mrope_section) != pairs:
        raise PosencError(f"mrope_section {mrope_section} must sum to head_dim / 2 = {pairs}")
    if interleaved:
        axis = np.zeros(pairs, dtype=np.int64)
        for i in range(pairs):
            if i % 3 == 1 and i < 3 * mrope_section[1]:
                axis[i] = 1
            elif i % 3 == 2 and i < 3 * mrope_section[2]:
                axis[i] = 2
    else:
        axis = np.concatenate([np.full(s, k) for k, s in enumerate(mrope_section)]).astype(np.int64)
    return inv_freq, axis


def pair_rope(
    x: np.ndarray, coords: np.ndarray, inv_freq: np.ndarray, axis: np.ndarray, *, layout: str = "half"
) -> np.ndarray:
    """Rotate pair ``i`` of each token by ``coords[axis[i]] * inv_freq[i]`` (axial RoPE and M-RoPE),
    with the block-diagonal matrix of RoFormer eq. 15; ``x (..., n, d)``, ``coords (..., n, a)``
    broadcastable against x's leading axes; features past ``2 len(inv_freq)`` pass through."""
    x = np.asarray(x, dtype=np.float64)
    values, _ = _coords(coords)  # no position: angle 0, the identity
    values = np.broadcast_to(values, x.shape[:-1] + values.shape[-1:])
    out = np.empty_like(x)
    r = 2 * len(inv_freq)
    for idx in np.ndindex(*x.shape[:-1]):
        angles = values[idx][axis] * inv_freq  # (r/2,)
        out[idx] = rope_matrix(1.0, x.shape[-1], layout=layout, rotary_dim=r, inv_freq=angles) @ x[idx]
    return out


def rope_mixed_frequencies(head_dim: int, directions: np.ndarray, base: float = 10.0) -> np.ndarray:
    """RoPE-Mixed's initial frequencies (Heo et al. 2024, sec. 3.3): per head ``h`` with direction
    ``phi_h``, magnitudes ``m_k = base^(-4k / d)`` (``k < d/4``); the first ``d/4`` pairs point along
    ``phi_h``, the next ``d/4`` along ``phi_h + pi/2``:
    ``f_x = [m cos(phi), m cos(phi + pi/2)]``, ``f_y = [m sin(phi), m sin(phi + pi/2)]``.

    Returns ``(heads, 2, d/2)`` in posenc's axis order ``(h, w)``: ``[:, 0]`` the frequencies of the
    row coordinate y (``f_y``), ``[:, 1]`` of the column coordinate x (``f_x``).
    """
    magnitude = base ** (-np.arange(0, head_dim, 4, dtype=np.float64)[: head_dim // 4] / head_dim)
    out = []
    for phi in np.asarray(directions, dtype=np.float64):
        fx = np.concatenate([magnitude * np.cos(phi), magnitude * np.cos(np.pi / 2 + phi)])
        fy = np.concatenate([magnitude * np.sin(phi), magnitude * np.sin(np.pi / 2 + phi)])
        out.append(np.stack([fy, fx]))
    return np.stack(out)


def rope_mixed(
    x: np.ndarray, coords: np.ndarray, freqs: np.ndarray, *, layout: str = "interleaved"
) -> np.ndarray:
    """RoPE-Mixed (Heo et al. 2024, eq. 8): pair ``i`` of a token at row y, column x turns by
    ``x f_x[i] + y f_y[i]``, the frequencies learned per head.

    Args:
        x: ``(h, n, d)``, one head per leading index.
        coords: ``(n, 2)`` as ``(row y, column x)``, posenc's ``(h, w)`` order.
        freqs: ``(h, 2, d/2)`` (row, column) as :func:`rope_mixed_frequencies` returns them.
    """
    x = np.asarray(x, dtype=np.float64)
    values, _ = _coords(coords)
    out = np.empty_like(x)
    for head in range(x.shape[0]):
        for t in range(x.shape[1]):
            y, col = values[t]
            angles = y * freqs[head, 0] + col * freqs[head, 1]
            out[head, t] = rope_matrix(1.0, x.shape[-1], layout=layout, inv_freq=angles) @ x[head, t]
    return out


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
