"""The RoPE scaling formulas, one pure function per variant, with their range checks and bands.

Axis legend: ``d`` the rotated dimension (``rotary_dim``), ``p = d/2`` rotation pairs, ``L`` the
current sequence length, ``L0`` the original (pre-training) context length, ``s`` the scaling
factor, ``b`` the RoPE base (``rope_theta``). Every variant has one signature::

    fn(*, dim: int, base: float, seq_len: int | None, params: dict)
        -> (inv_freq: float64 tensor (dim/2,), attention_scaling: float)

:mod:`posenc.encoding.rotary.scaling` gathers them into its registry ``ROPE_SCALINGS`` (one spec per
variant) and parses a scaling once, at the boundary, into a typed ``Scaling``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posenc.core.checks import check_bool, check_float, check_int
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.sincos import inverse_frequencies

Params = dict[str, Any]

# ---------------------------------------------------------------------------
# The variants. Each: fn(*, dim, base, seq_len, params) -> (inv_freq (d/2,), scaling).
# ---------------------------------------------------------------------------


def default_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Plain RoPE (Su et al. 2021, https://arxiv.org/abs/2104.09864).

    theta_i = b^(-2i/d); attention scaling 1.
    """
    return inverse_frequencies(dim, base), 1.0


def linear_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Position interpolation (Chen et al. 2023, https://arxiv.org/abs/2306.15595).

    Positions m -> m / s, equivalently theta_i' = theta_i / s for every pair.
    """
    return inverse_frequencies(dim, base) / params["factor"], 1.0


def ntk_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Static NTK-aware scaling (bloc97 2023; Peng et al. 2023 sec. 3.1, https://arxiv.org/abs/2309.00071).

    The base is rescaled once: b' = b * s^(d/(d-2)), theta_i' = b'^(-2i/d). The
    lowest pair (i = d/2-1) is then interpolated by exactly s, the highest (i = 0)
    is left unchanged. No Hugging Face counterpart (HF only has the dynamic form).
    """
    new_base = base * params["factor"] ** (dim / (dim - 2))
    return inverse_frequencies(dim, new_base), 1.0


def dynamic_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Dynamic NTK scaling (emozilla 2023, https://www.reddit.com/r/LocalLLaMA/comments/14mrgpr/), as HF.

    With L = max(seq_len, L0) (seq_len None -> L0):
        b' = b * (s * L / L0 - (s - 1))^(d/(d-2)),   theta_i' = b'^(-2i/d).
    At L <= L0 this is plain RoPE; the effective factor grows linearly with L.
    """
    factor, original = params["factor"], params["original_max_position_embeddings"]
    length = original if seq_len is None else max(int(seq_len), original)
    new_base = base * (factor * length / original - (factor - 1)) ** (dim / (dim - 2))
    return inverse_frequencies(dim, new_base), 1.0


def yarn_correction_range(*, dim: int, base: float, params: Params) -> tuple[float, float]:
    """YaRN's ramp bounds (Peng et al. 2023, eq. 17-18, https://arxiv.org/abs/2309.00071).

    Pair i turns r_i = L0 / (2 pi b^(2i/d)) times over the original context; the
    pair with r = beta is i(beta) = d * ln(L0 / (2 pi beta)) / (2 ln b). Returns
    ``(low, high) = (i(beta_fast), i(beta_slow))``, floored/ceiled when ``truncate``
    (HF default), clamped to [0, d-1].
    """
    original = params["original_max_position_embeddings"]
    beta_fast, beta_slow = params.get("beta_fast", 32.0), params.get("beta_slow", 1.0)

    def pair_of(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(beta_fast), pair_of(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(*, dim: int, base: float, params: Params) -> torch.Tensor:
    """YaRN ramp_i = clamp((i - low) / (high - low), 0, 1) = 1 - gamma_i (eq. 18), float64 ``(d/2,)``.

    Peng et al. 2023, https://arxiv.org/abs/2309.00071.

    0 -> extrapolate (pair unchanged), 1 -> interpolate (pair divided by s).
    """
    low, high = yarn_correction_range(dim=dim, base=base, params=params)
    if low == high:
        high += 0.001  # as HF: avoid a zero-width ramp
    index = torch.arange(dim // 2, dtype=torch.float64)
    return ((index - low) / (high - low)).clamp(0.0, 1.0)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention term sqrt(1/t) = 0.1 * mscale * ln(s) + 1 (1 when s <= 1).

    Peng et al. 2023, eq. 22, https://arxiv.org/abs/2309.00071; ``mscale`` as in DeepSeek-V2.
    """
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """YaRN, NTK-by-parts + attention temperature (Peng et al. 2023, https://arxiv.org/abs/2309.00071).

    theta_i' = (1 - ramp_i) * theta_i + ramp_i * theta_i / s   (see :func:`yarn_ramp`).
    Attention scaling: ``attention_factor`` if given; else, when both ``mscale`` and
    ``mscale_all_dim`` are set (DeepSeek), (0.1 m ln s + 1) / (0.1 m_all ln s + 1);
    else 0.1 ln s + 1.
    """
    factor = params["factor"]
    theta = inverse_frequencies(dim, base)
    ramp = yarn_ramp(dim=dim, base=base, params=params)
    inv_freq = theta * (1 - ramp) + (theta / factor) * ramp
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention = yarn_mscale(factor)
    return inv_freq, float(attention)


def llama3_smooth(*, dim: int, base: float, params: Params) -> torch.Tensor:
    """Llama 3.1's per-pair interpolation weight in [0, 1], float64 ``(d/2,)`` (https://arxiv.org/abs/2407.21783).

    With wavelength lambda_i = 2 pi / theta_i: 0 when lambda_i < L0/high_freq_factor
    (high frequency, unchanged), 1 when lambda_i > L0/low_freq_factor (low frequency,
    divided by s), and (L0/lambda_i - low) / (high - low) subtracted from 1 between.
    ``high == low`` (Llama 4 Scout: both 1) leaves no band between; a pair exactly at
    lambda = L0/low then stays unchanged (Hugging Face divides 0 by 0 there).
    """
    original = params["original_max_position_embeddings"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    wavelen = 2 * math.pi / inverse_frequencies(dim, base)
    if high == low:
        smooth = torch.ones_like(wavelen)  # only reached at lambda == L0/low exactly: unchanged
    else:
        smooth = (original / wavelen - low) / (high - low)  # 1 at the high edge, 0 at the low edge
    weight = 1 - smooth
    weight = torch.where(wavelen < original / high, torch.zeros_like(weight), weight)
    return torch.where(wavelen > original / low, torch.ones_like(weight), weight)


def llama3_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Llama 3.1 frequency-band scaling (Meta 2024, https://arxiv.org/abs/2407.21783).

    theta_i' = (1 - w_i) * theta_i + w_i * theta_i / s with w_i from :func:`llama3_smooth`:
    high-frequency pairs unchanged, low-frequency ones divided by s, a linear blend in
    1/lambda between. Attention scaling 1.
    """
    theta = inverse_frequencies(dim, base)
    weight = llama3_smooth(dim=dim, base=base, params=params)
    return theta * (1 - weight) + theta / params["factor"] * weight, 1.0


def longrope_attention_factor(params: Params) -> float:
    """LongRoPE's attention scaling: ``attention_factor`` or sqrt(1 + ln s / ln L0) (1 when s <= 1).

    Ding et al. 2024, https://arxiv.org/abs/2402.13753 (as in Phi-3 and HF).
    """
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    factor = params.get("factor", 1.0)
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(params["original_max_position_embeddings"]))


def longrope_freqs(*, dim: int, base: float, seq_len: int | None, params: Params):
    """LongRoPE / Phi-3 (Ding et al. 2024, https://arxiv.org/abs/2402.13753).

    theta_i' = theta_i / lambda_i with per-pair factors lambda = ``long_factor`` when
    seq_len > L0, else ``short_factor`` (seq_len None -> short). Attention scaling:
    :func:`longrope_attention_factor`, the same for both sets (as HF).
    """
    original = params["original_max_position_embeddings"]
    long = seq_len is not None and int(seq_len) > original
    factors = torch.tensor(params["long_factor" if long else "short_factor"], dtype=torch.float64)
    return inverse_frequencies(dim, base) / factors, longrope_attention_factor(params)


# ---------------------------------------------------------------------------
# Length-dependent variants at one length: the length-independent scaling with their frequencies
# there. Each: fn(params, seq_len) -> {"rope_type": ..., **keys}, or None for plain RoPE.
# ---------------------------------------------------------------------------


def dynamic_at(params: Params, seq_len: int) -> Params | None:
    """Dynamic NTK at ``seq_len`` tokens: plain RoPE up to L0, past it NTK-aware with the factor
    ``s L / L0 - (s - 1)``, term for term :func:`dynamic_freqs` at that length."""
    factor, original = params["factor"], params["original_max_position_embeddings"]
    if seq_len <= original:
        return None
    return {"rope_type": "ntk", "factor": factor * seq_len / original - (factor - 1)}


def longrope_at(params: Params, seq_len: int) -> Params | None:
    """LongRoPE at ``seq_len`` tokens: the long factors past L0, else the short ones, as both sets
    (so the scaling no longer switches), with the attention scaling of the whole."""
    original = params["original_max_position_embeddings"]
    factors = params["long_factor"] if seq_len > original else params["short_factor"]
    static: Params = {
        "rope_type": "longrope",
        "short_factor": list(factors),
        "long_factor": list(factors),
        "original_max_position_embeddings": original,
        "factor": float(params["factor"]),
    }
    if params.get("attention_factor") is not None:
        static["attention_factor"] = float(params["attention_factor"])
    return static


# ---------------------------------------------------------------------------
# Validation: range checks per variant (the keys are checked by posenc.encoding.rotary.scaling).
# ---------------------------------------------------------------------------

ORIGINAL = "original_max_position_embeddings"


def check_scaling_number(name: str, key: str, value: Any, **limits: Any) -> float:
    return check_float(f"rope scaling {name!r} key {key!r}", value, **limits)


def check_common(name: str, params: Params, dim: int) -> None:
    """Ranges shared by several variants: factor >= 1, L0 >= 1, d >= 4 for NTK bases."""
    if params.get("factor") is not None:
        check_scaling_number(name, "factor", params["factor"], minimum=1.0)
    if ORIGINAL in params:
        check_int(f"rope scaling {name!r} key {ORIGINAL!r}", params[ORIGINAL], minimum=1)
    if params.get("attention_factor") is not None:
        check_scaling_number(
            name, "attention_factor", params["attention_factor"], minimum=0.0, exclusive_minimum=True
        )


def validate_nothing(params: Params, *, dim: int) -> None:
    """default / linear: keys and factor only (checked by :func:`validate`)."""


def validate_ntk(params: Params, *, dim: int) -> None:
    """ntk / dynamic: b' = b * x^(d/(d-2)) needs d >= 4."""
    if dim < 4:
        raise PosencError(f"NTK-style rope scalings need dim (rotary_dim) >= 4 (b' uses d/(d-2)), got {dim}")


def validate_yarn(params: Params, *, dim: int) -> None:
    """beta_fast >= beta_slow > 0; mscale, mscale_all_dim >= 0; truncate a bool."""
    fast = check_scaling_number(
        "yarn", "beta_fast", params.get("beta_fast", 32.0), minimum=0.0, exclusive_minimum=True
    )
    slow = check_scaling_number(
        "yarn", "beta_slow", params.get("beta_slow", 1.0), minimum=0.0, exclusive_minimum=True
    )
    if fast < slow:
        raise PosencError(
            f"rope scaling 'yarn' key 'beta_fast' must be >= beta_slow, got beta_fast={fast} < beta_slow={slow}"
        )
    for key in ("mscale", "mscale_all_dim"):
        if params.get(key) is not None:
            check_scaling_number("yarn", key, params[key], minimum=0.0)
    check_bool("rope scaling 'yarn' key 'truncate'", params.get("truncate", True))


def validate_llama3(params: Params, *, dim: int) -> None:
    """0 < low_freq_factor <= high_freq_factor (equal: no blended band, as Llama 4 Scout)."""
    low = check_scaling_number(
        "llama3", "low_freq_factor", params["low_freq_factor"], minimum=0.0, exclusive_minimum=True
    )
    high = check_scaling_number("llama3", "high_freq_factor", params["high_freq_factor"], minimum=0.0)
    if high < low:
        raise PosencError(
            "rope scaling 'llama3' key 'high_freq_factor' must be >= low_freq_factor, "
            f"got high_freq_factor={high} < low_freq_factor={low}"
        )


def validate_longrope(params: Params, *, dim: int) -> None:
    """short_factor / long_factor: lists of dim/2 positive numbers."""
    for key in ("short_factor", "long_factor"):
        value = params[key]
        if not isinstance(value, (list, tuple)):
            raise PosencTypeError(
                f"rope scaling 'longrope' key {key!r} must be a list of dim/2 = {dim // 2} numbers, "
                f"got {type(value).__name__}"
            )
        if len(value) != dim // 2:
            raise PosencError(
                f"rope scaling 'longrope' key {key!r} must have dim/2 = {dim // 2} entries "
                f"(one per pair), got {len(value)}"
            )
        for number in value:
            check_scaling_number("longrope", key + " entry", number, minimum=0.0, exclusive_minimum=True)


def yarn_bands(*, dim: int, base: float, params: Params) -> list[str]:
    """``extrapolate`` (ramp 0, unchanged) / ``ramp`` / ``interpolate`` (ramp 1, divided by s)."""
    ramp = yarn_ramp(dim=dim, base=base, params=params)
    return ["extrapolate" if r == 0 else "interpolate" if r == 1 else "ramp" for r in ramp.tolist()]


def llama3_bands(*, dim: int, base: float, params: Params) -> list[str]:
    """``high`` (wavelength < L0/high_freq_factor, unchanged) / ``mid`` / ``low`` (divided by s)."""
    weight = llama3_smooth(dim=dim, base=base, params=params)
    return ["high" if w == 0 else "low" if w == 1 else "mid" for w in weight.tolist()]
