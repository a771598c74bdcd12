"""NumPy float64 references for the rotary family, ``posenc.encoding.rotary`` (no torch here).

RoPE and xPos are written as the papers write them: an explicit block-diagonal rotation matrix
``R^d_{Theta,m}`` per position (RoFormer eq. 15), multiplied into the vector. This is slow (a
d x d matrix per position) and deliberately independent of the cos/sin-slicing trick the PyTorch
path uses. The multi-axis members (``rotary.rope_axial``: axial RoPE, M-RoPE, RoPE-Mixed) turn each
pair by one coordinate of ``(..., n, a)`` with the same matrices; ``-1`` on every axis of a token
means "no grid position", which turns by 0.

The RoPE scalings (``rotary.scaling``) are the ``rope_scaling_*`` functions, with their own legend:
d rotated dimension, i = 0 .. d/2-1 pair index, b base, s factor, L current length, L0 original
context length, theta_i = b^(-2i/d), lambda_i = 2 pi / theta_i the wavelength of pair i in tokens.
Each returns ``(inv_freq (d/2,), attention_scaling)``, written to be read next to the paper;
``posenc.encoding.rotary.scaling`` is tested against these.

Axis legend: n sequence, d head_dim, r rotary_dim, a position axes.
"""

from __future__ import annotations

import math

import numpy as np

from posenc.core.errors import PosencError
from posenc.reference._coordinates import coordinates as _coords

__all__ = [
    "axial_rope_frequencies",
    "mrope_frequencies",
    "pair_rope",
    "rope",
    "rope_inv_freq",
    "rope_matrix",
    "rope_mixed",
    "rope_mixed_frequencies",
    "rope_scaling_default",
    "rope_scaling_dynamic",
    "rope_scaling_linear",
    "rope_scaling_llama3",
    "rope_scaling_longrope",
    "rope_scaling_ntk",
    "rope_scaling_yarn",
    "rotary_pairs",
    "xpos",
    "xpos_zeta",
]


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


# --- RoPE scalings: inv_freq and attention scaling --------------------------------------------


def rope_scaling_default(dim: int, base: float = 10000.0) -> tuple[np.ndarray, float]:
    """RoFormer (https://arxiv.org/abs/2104.09864): theta_i = b^(-2i/d)."""
    i = np.arange(dim // 2, dtype=np.float64)
    return base ** (-2.0 * i / dim), 1.0


def rope_scaling_linear(dim: int, base: float, factor: float) -> tuple[np.ndarray, float]:
    """Position interpolation (https://arxiv.org/abs/2306.15595): m -> m/s, i.e. theta_i / s."""
    theta, _ = rope_scaling_default(dim, base)
    return theta / factor, 1.0


def rope_scaling_ntk(dim: int, base: float, factor: float) -> tuple[np.ndarray, float]:
    """Static NTK-aware (https://arxiv.org/abs/2309.00071 sec. 3.1): b' = b * s^(d/(d-2)); theta_i' = b'^(-2i/d)."""
    return rope_scaling_default(dim, base * factor ** (dim / (dim - 2)))


def rope_scaling_dynamic(
    dim: int, base: float, factor: float, original_max_position_embeddings: int, seq_len: int | None
) -> tuple[np.ndarray, float]:
    """Dynamic NTK (https://www.reddit.com/r/LocalLLaMA/comments/14mrgpr/, HF's formula).

    L = max(seq_len, L0); b' = b * (s L / L0 - (s - 1))^(d/(d-2)).
    """
    l0 = original_max_position_embeddings
    length = l0 if seq_len is None else max(seq_len, l0)
    scale = factor * length / l0 - (factor - 1)
    return rope_scaling_default(dim, base * scale ** (dim / (dim - 2)))


def rope_scaling_yarn(
    dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    truncate: bool = True,
) -> tuple[np.ndarray, float]:
    """YaRN (https://arxiv.org/abs/2309.00071), NTK-by-parts + temperature.

    r_i = L0 / lambda_i rotations over the original context; pair index of r:
    i(r) = d ln(L0 / (2 pi r)) / (2 ln b). The ramp runs from i(beta_fast) to
    i(beta_slow): ramp_i = clamp((i - low) / (high - low), 0, 1), which is 1 - gamma(r_i)
    of the paper's eq. 18; theta_i' = (1 - ramp_i) theta_i + ramp_i theta_i / s.
    Attention: sqrt(1/t) = 0.1 ln s + 1 (eq. 22).
    """
    theta, _ = rope_scaling_default(dim, base)
    l0 = original_max_position_embeddings

    def pair_of(rotations: float) -> float:
        return dim * math.log(l0 / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(beta_fast), pair_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    inv_freq = (1 - ramp) * theta + ramp * theta / factor

    def temperature(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = temperature(mscale) / temperature(mscale_all_dim)
        else:
            attention_factor = temperature(1.0)
    return inv_freq, float(attention_factor)


def rope_scaling_llama3(
    dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    low_freq_factor: float,
    high_freq_factor: float,
) -> tuple[np.ndarray, float]:
    """Llama 3.1 (https://arxiv.org/abs/2407.21783).

    lambda_i < L0/high: theta_i unchanged; lambda_i > L0/low: theta_i / s; between:
    (1 - u) theta_i / s + u theta_i with u = (L0/lambda_i - low) / (high - low).
    With high == low there is no "between" but the single wavelength L0/low: unchanged.
    """
    theta, _ = rope_scaling_default(dim, base)
    l0 = original_max_position_embeddings
    out = np.empty_like(theta)
    for i, t in enumerate(theta):
        wavelength = 2 * math.pi / t
        if wavelength < l0 / high_freq_factor:
            out[i] = t
        elif wavelength > l0 / low_freq_factor:
            out[i] = t / factor
        elif high_freq_factor == low_freq_factor:
            out[i] = t
        else:
            u = (l0 / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out[i] = (1 - u) * t / factor + u * t
    return out, 1.0


def rope_scaling_longrope(
    dim: int,
    base: float,
    short_factor: list[float],
    long_factor: list[float],
    original_max_position_embeddings: int,
    seq_len: int | None,
    factor: float = 1.0,
    attention_factor: float | None = None,
) -> tuple[np.ndarray, float]:
    """LongRoPE (https://arxiv.org/abs/2402.13753): theta_i / lambda_i.

    lambda = long_factor when L > L0 else short_factor; attention scaling
    sqrt(1 + ln s / ln L0) (1 when s <= 1) unless given.
    """
    theta, _ = rope_scaling_default(dim, base)
    l0 = original_max_position_embeddings
    use_long = seq_len is not None and seq_len > l0
    lam = np.asarray(long_factor if use_long else short_factor, dtype=np.float64)
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(l0))
    return theta / lam, float(attention_factor)


# --- the multi-axis members: positions with axes ----------------------------------------------


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
