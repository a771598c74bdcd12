"""NumPy float64 references for the absolute family."""

from __future__ import annotations

import numpy as np

__all__ = ["sinusoidal"]


def sinusoidal(positions: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)); (n,) -> (n, d)."""
    positions = np.asarray(positions, dtype=np.float64)
    i = np.arange(0, dim, 2, dtype=np.float64)
    angles = positions[..., None] / base ** (i / dim)
    out = np.empty(positions.shape + (dim,), dtype=np.float64)
    out[..., 0::2] = np.sin(angles)
    out[..., 1::2] = np.cos(angles)
    return out
