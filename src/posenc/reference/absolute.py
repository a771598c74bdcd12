"""NumPy float64 references for the absolute family (no torch here).

Axis legend: n sequence (any leading shape works), d d_model.

Each function takes integer ``positions`` of any shape ``(...)`` and returns
``(..., d)``; ``complex_order`` and ``embed`` also take the token embeddings.
"""

from __future__ import annotations

import numpy as np

from posenc.core.errors import PosencError

__all__ = [
    "complex_order",
    "hybrid",
    "integer_index",
    "learned",
    "scaled_sinusoidal",
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
