"""Coordinates of positions with axes, as the multi-axis references read them (no torch here).

``(..., n, a)`` integers, ``a`` = 2 ``(h, w)`` or 3 ``(t, h, w)``; ``-1`` on every axis of a token
means "no grid position" (a class or register token).
"""

from __future__ import annotations

import numpy as np


def coordinates(coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(coordinates as float64, mask of tokens with a position)``."""
    coords = np.asarray(coords)
    present = ~np.all(coords == -1, axis=-1)
    return np.where(present[..., None], coords, 0).astype(np.float64), present
