"""NumPy float64 references for the rotary family (RoPE, xPos).

Written as the papers write them: an explicit block-diagonal rotation matrix
``R^d_{Theta,m}`` per position (RoFormer eq. 15), multiplied into the vector.
This is slow (a d x d matrix per position) and deliberately independent of the
cos/sin-slicing trick the PyTorch path uses.

Axis legend: n sequence, d head_dim, r rotary_dim.
"""

from __future__ import annotations

import numpy as np

from posenc.core.errors import PosencError

__all__ = ["rope", "rope_inv_freq", "rope_matrix", "rotary_pairs", "xpos", "xpos_zeta"]


def rope_inv_freq(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """theta_i = base^(-2i/r), i = 0 .. r/2 - 1; shape (r/2,)."""
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def rotary_pairs(rotary_dim: int, layout: str) -> list[tuple[int, int]]:
    """The feature indices of pair i: (2i, 2i+1) "interleaved", (i, i + r/2) "half"."""
    half = rotary_dim // 2
    if layout == "interleaved":
        return [(2 * i, 2 * i + 1) for i in range(half)]
    if layout == "half":
        return [(i, i + half) for i in range(half)]
    raise PosencError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def rope_matrix(
    position: float,
    head_dim: int,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    inv_freq: np.ndarray | None = None,
    base: float = 10000.0,
    scale: np.ndarray | float = 1.0,
) -> np.ndarray:
    """R^d_{Theta,m}: (d, d), a 2x2 block [[cos, -sin], [sin, cos]] of angle m theta_i per pair.

    Features past ``rotary_dim`` get the identity. ``scale`` (scalar or (r/2,))
    multiplies each 2x2 block (attention_scaling, xPos's zeta^(m/B)).
    """
    r = head_dim if rotary_dim is None else rotary_dim
    theta = rope_inv_freq(r, base) if inv_freq is None else np.asarray(inv_freq, dtype=np.float64)
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), theta.shape)
    R = np.eye(head_dim)
    for i, (a, b) in enumerate(rotary_pairs(r, layout)):
        c, s = np.cos(position * theta[i]), np.sin(position * theta[i])
        R[a, a], R[a, b] = scale[i] * c, -scale[i] * s
        R[b, a], R[b, b] = scale[i] * s, scale[i] * c
    return R


def rope(
    x: np.ndarray,
    positions: np.ndarray,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    base: float = 10000.0,
    inv_freq: np.ndarray | None = None,
    attention_scaling: float = 1.0,
) -> np.ndarray:
    """f(x, m) = R_{Theta,m} x for every position (Su et al. 2021, eq. 14-15).

    Args:
        x: (..., n, d).
        positions: (..., n), broadcastable against x's leading axes.
        inv_freq: override theta (a RoPE scaling's frequencies); attention_scaling
            multiplies the rotated block (as HF multiplies cos and sin).
    """
    x = np.asarray(x, dtype=np.float64)
    positions = np.broadcast_to(np.asarray(positions, dtype=np.float64), x.shape[:-1])
    d = x.shape[-1]
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        R = rope_matrix(
            positions[idx],
            d,
            layout=layout,
            rotary_dim=rotary_dim,
            inv_freq=inv_freq,
            base=base,
            scale=attention_scaling,
        )
        out[idx] = R @ x[idx]
    return out


def xpos_zeta(head_dim: int, gamma: float = 0.4) -> np.ndarray:
    """zeta_i = (2i/d + gamma) / (1 + gamma), i = 0 .. d/2 - 1 (Sun et al. 2022, sec. 3.2)."""
    i = np.arange(head_dim // 2, dtype=np.float64)
    return (2 * i / head_dim + gamma) / (1 + gamma)


def xpos(
    x: np.ndarray,
    positions: np.ndarray,
    *,
    key: bool,
    layout: str = "half",
    base: float = 10000.0,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    scale_center: float = 0.0,
) -> np.ndarray:
    """Queries: zeta^((m-c)/B) R_m q; keys (key=True): zeta^(-(n-c)/B) R_n k.

    Args:
        x: (..., n, d); positions (..., n) broadcastable.
    """
    x = np.asarray(x, dtype=np.float64)
    positions = np.broadcast_to(np.asarray(positions, dtype=np.float64), x.shape[:-1])
    d = x.shape[-1]
    zeta = xpos_zeta(d, gamma)
    sign = -1.0 if key else 1.0
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        m = positions[idx]
        scale = zeta ** (sign * (m - scale_center) / scale_base)
        out[idx] = rope_matrix(m, d, layout=layout, base=base, scale=scale) @ x[idx]
    return out
