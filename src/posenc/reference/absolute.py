"""NumPy float64 references for the absolute family, ``posenc.encoding.absolute`` (no torch here).

Axis legend: n sequence (any leading shape works), d d_model, a position axes.

- the sequence members (``absolute.sequence``): each function takes integer ``positions`` of any
  shape ``(...)`` and returns ``(..., d)``; ``complex_order`` also takes the token embeddings;
- hierarchical (segment, offset) positions (``absolute.hierarchical``)::

      segment = pos // L,  offset = pos % L
      PE(pos) = [E_s(segment) | E_o(offset)]   (concat)   or   E_s(segment) + E_o(offset)   (sum)

- the axial members (``absolute.axial``): coordinates ``(..., n, a)`` of images and video, ``-1`` on
  every axis of a token meaning "no grid position" (a class token), which gets a zero vector.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from posenc.core.errors import PosencError
from posenc.reference._coordinates import coordinates as _coords

__all__ = [
    "complex_order",
    "hierarchical",
    "hierarchical_sinusoidal",
    "hybrid",
    "integer_index",
    "interpolate_table",
    "learned",
    "learned_axial",
    "scaled_sinusoidal",
    "sincos_1d",
    "sincos_axial",
    "sinusoidal",
]


def sinusoidal(positions: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)); (n,) -> (n, d)."""
    positions = np.asarray(positions, dtype=np.float64)
    i = np.arange(0, dim, 2, dtype=np.float64)
    angles = positions[..., None] / base ** (i / dim)
    out = np.empty(positions.shape + (dim,), dtype=np.float64)
    out[..., 0::2] = np.sin(angles)
    out[..., 1::2] = np.cos(angles)
    return out


def scaled_sinusoidal(positions: np.ndarray, dim: int, scale: float, base: float = 10000.0) -> np.ndarray:
    """PE(pos) = g * sinusoidal(pos) with one scalar g (Hua et al. 2022); (n,) -> (n, d)."""
    return float(scale) * sinusoidal(positions, dim, base)


def learned(positions: np.ndarray, table: np.ndarray) -> np.ndarray:
    """PE(pos) = E[pos], a row lookup in the table E of shape (rows, d); (n,) -> (n, d).

    Raises ValueError for positions past the table (a learned table has no row there).
    """
    positions = np.asarray(positions)
    table = np.asarray(table, dtype=np.float64)
    if positions.size and positions.max() >= table.shape[0]:
        raise PosencError(f"position {positions.max()} has no row in a table of {table.shape[0]} rows")
    return table[positions]


def hybrid(positions: np.ndarray, table: np.ndarray, base: float = 10000.0) -> np.ndarray:
    """PE(pos) = sinusoidal(pos) + R[pos]: fixed sinusoid plus learned residual; (n,) -> (n, d)."""
    table = np.asarray(table, dtype=np.float64)
    return sinusoidal(positions, table.shape[1], base) + learned(positions, table)


def complex_order(
    x: np.ndarray,
    positions: np.ndarray,
    amplitude: tuple[np.ndarray, np.ndarray],
    frequency: tuple[np.ndarray, np.ndarray],
    phase: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Wang et al. 2020: f(j, pos) = r_j exp(i (w_j pos + theta_j)), returned as [Re | Im].

    Args:
        x: token embeddings ``(..., n, d)``.
        positions: integer positions ``(..., n)`` (broadcast against ``x``).
        amplitude, frequency, phase: ``(W, b)`` pairs with ``W (d/2, d)`` and
            ``b (d/2,)``; ``r = x W^T + b`` and likewise ``w``, ``theta``.

    Returns:
        ``(..., n, d)``: ``[r cos(w pos + theta) | r sin(w pos + theta)]``.
    """
    x = np.asarray(x, dtype=np.float64)
    r = x @ np.asarray(amplitude[0], np.float64).T + np.asarray(amplitude[1], np.float64)
    w = x @ np.asarray(frequency[0], np.float64).T + np.asarray(frequency[1], np.float64)
    theta = x @ np.asarray(phase[0], np.float64).T + np.asarray(phase[1], np.float64)
    z = r * np.exp(1j * (w * np.asarray(positions, np.float64)[..., None] + theta))  # complex (..., n, d/2)
    return np.concatenate([z.real, z.imag], axis=-1)


def integer_index(positions: np.ndarray, dim: int) -> np.ndarray:
    """The naive PE: PE(pos)_k = pos in every dimension k; (n,) -> (n, d)."""
    positions = np.asarray(positions, dtype=np.float64)
    return np.repeat(positions[..., None], dim, axis=-1)


# --- hierarchical (segment, offset) positions -------------------------------------------------

Encoding = Callable[[np.ndarray], np.ndarray]  # integer positions (...) -> (..., d_part)


def hierarchical(
    positions: np.ndarray,
    *,
    segment_len: int,
    combine: str,
    segment_encoding: Encoding,
    offset_encoding: Encoding,
) -> np.ndarray:
    """Split positions into (segment, offset) and combine their encodings; (n,) -> (n, d).

    Args:
        positions: non-negative integers, any shape ``(...)``.
        segment_len: ``L``, positions per fixed-size segment.
        combine: ``"concat"`` (segment part first) or ``"sum"``.
        segment_encoding, offset_encoding: ``E_s``, ``E_o``: positions -> ``(..., d_part)``.
    """
    positions = np.asarray(positions, dtype=np.int64)
    segment, offset = positions // segment_len, positions % segment_len
    seg = np.asarray(segment_encoding(segment), dtype=np.float64)
    off = np.asarray(offset_encoding(offset), dtype=np.float64)
    if combine == "sum":
        return seg + off
    if combine == "concat":
        return np.concatenate([seg, off], axis=-1)
    raise PosencError(f"combine must be 'concat' or 'sum', got {combine!r}")


def hierarchical_sinusoidal(
    positions: np.ndarray, dim: int, segment_len: int = 64, combine: str = "concat", base: float = 10000.0
) -> np.ndarray:
    """:func:`hierarchical` with sinusoidal ``E_s = E_o`` of size ``dim`` (sum) or ``dim/2`` (concat)."""
    part = dim if combine == "sum" else dim // 2
    return hierarchical(
        positions,
        segment_len=segment_len,
        combine=combine,
        segment_encoding=lambda p: sinusoidal(p, part, base),
        offset_encoding=lambda p: sinusoidal(p, part, base),
    )


# --- the axial members: positions with axes ---------------------------------------------------


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
