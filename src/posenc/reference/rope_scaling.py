"""RoPE context-extension scalings in plain NumPy float64 (no torch).

Legend: d rotated dimension, i = 0 .. d/2-1 pair index, b base, s factor,
L current length, L0 original context length, theta_i = b^(-2i/d),
lambda_i = 2 pi / theta_i the wavelength of pair i in tokens.

Each function returns ``(inv_freq (d/2,), attention_scaling)``, written to be
read next to the paper; ``posenc.encoding.rotary.scaling`` is tested against these.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "rope_scaling_default",
    "rope_scaling_dynamic",
    "rope_scaling_linear",
    "rope_scaling_llama3",
    "rope_scaling_longrope",
    "rope_scaling_ntk",
    "rope_scaling_yarn",
]


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
