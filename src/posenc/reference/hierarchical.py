"""NumPy float64 reference for hierarchical (segment, offset) positions (no torch here).

Axis legend: n sequence (any leading shape works), d d_model.

    segment = pos // L,  offset = pos % L
    PE(pos) = [E_s(segment) | E_o(offset)]   (concat)   or   E_s(segment) + E_o(offset)   (sum)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from posenc.core.errors import PosencError
from posenc.reference.absolute import sinusoidal

__all__ = ["hierarchical", "hierarchical_sinusoidal"]

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
