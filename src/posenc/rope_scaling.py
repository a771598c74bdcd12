"""RoPE context-extension scalings: a literal registry of pure functions.

Axis legend: ``d`` the rotated dimension (``rotary_dim``), ``p = d/2`` rotation
pairs, ``L`` the current sequence length, ``L0`` the original (pre-training)
context length, ``s`` the scaling factor, ``b`` the RoPE base (``rope_theta``).

Every variant is one pure function with one signature, returning the inverse
frequencies and the attention scaling, so the rotary encoding (and attention)
never branches on the variant::

    fn(*, dim: int, base: float, seq_len: int | None, params: dict)
        -> (inv_freq: float64 tensor (dim/2,), attention_scaling: float)

``params`` is the scaling dict without its ``"rope_type"`` key; the keys are the
Hugging Face ``rope_scaling`` / ``rope_parameters`` keys (``factor``,
``original_max_position_embeddings``, ``beta_fast``, ...), so a Hugging Face
config maps onto posenc one to one (see :mod:`posenc.hf`). Each variant is one
:class:`RopeScaling` entry of the literal registry ``ROPE_SCALINGS``: its function,
paper, required and optional keys, range checks, whether it depends on the current
length, its frequency bands and how Hugging Face fills its original context.
``PAPERS``, ``ROPE_SCALING_KEYS`` and ``ROPE_SCALING_VALIDATORS`` are views of it;
:func:`compute` validates, then dispatches.

``attention_scaling`` multiplies both cos and sin (as in Hugging Face), so it
multiplies the rotated q and k and hence the attention logits by its square.

KV caches and length-dependent scalings
---------------------------------------
``depends_on_seq_len(scaling)`` is true for ``dynamic`` and ``longrope`` (their
``length_dependent`` entry): their
inv_freq is a function of the *current* length ``L = max(position) + 1``. A key
rotated at step ``t`` with ``inv_freq(L_t)`` would be wrong at step ``t + 1`` once
``inv_freq(L_{t+1})`` differs. posenc's rule: when ``depends_on_seq_len(scaling)``
is true, attention caches keys BEFORE rotation and, at every step, rotates the
whole cached key set (and the queries) with the inv_freq for the current length,
so incremental decoding equals a full recompute of the same prefix. (Hugging Face
instead keeps already-rotated keys, so its cached decode differs from a full
recompute once ``L`` crosses ``L0``.) For every other variant, keys may be
cached after rotation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from posenc.checks import check_bool, check_float, check_int, did_you_mean
from posenc.encoding import RotaryEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.reference import rope_scaling as ref
from posenc.tables import inverse_frequencies

Params = dict[str, Any]
ScalingFn = Callable[..., tuple[torch.Tensor, float]]

# ---------------------------------------------------------------------------
# The variants. Each: fn(*, dim, base, seq_len, params) -> (inv_freq (d/2,), scaling).
# ---------------------------------------------------------------------------


def _default(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Plain RoPE (Su et al. 2021, https://arxiv.org/abs/2104.09864).

    theta_i = b^(-2i/d); attention scaling 1.
    """
    return inverse_frequencies(dim, base), 1.0


def _linear(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Position interpolation (Chen et al. 2023, https://arxiv.org/abs/2306.15595).

    Positions m -> m / s, equivalently theta_i' = theta_i / s for every pair.
    """
    return inverse_frequencies(dim, base) / params["factor"], 1.0


def _ntk(*, dim: int, base: float, seq_len: int | None, params: Params):
    """Static NTK-aware scaling (bloc97 2023; Peng et al. 2023 sec. 3.1, https://arxiv.org/abs/2309.00071).

    The base is rescaled once: b' = b * s^(d/(d-2)), theta_i' = b'^(-2i/d). The
    lowest pair (i = d/2-1) is then interpolated by exactly s, the highest (i = 0)
    is left unchanged. No Hugging Face counterpart (HF only has the dynamic form).
    """
    new_base = base * params["factor"] ** (dim / (dim - 2))
    return inverse_frequencies(dim, new_base), 1.0


def _dynamic(*, dim: int, base: float, seq_len: int | None, params: Params):
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


def _yarn(*, dim: int, base: float, seq_len: int | None, params: Params):
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


def _llama3(*, dim: int, base: float, seq_len: int | None, params: Params):
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


def _longrope(*, dim: int, base: float, seq_len: int | None, params: Params):
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
# Validation: the keys of each variant, then a parallel literal table of range checks.
# ---------------------------------------------------------------------------

ORIGINAL = "original_max_position_embeddings"


def _check_keys(name: str, params: Params) -> None:
    required, optional = ROPE_SCALINGS[name].required, ROPE_SCALINGS[name].optional
    valid = list(required) + list(optional)
    for key in params:
        if key not in valid:
            extra = did_you_mean(key, valid)
            raise PosencError(
                f"unknown key {key!r} in rope scaling {name!r}; valid keys: {valid or 'none'}{extra}"
            )
    for key in required:
        if params.get(key) is None:
            hint = " (or pass max_position_embeddings)" if key == ORIGINAL else ""
            raise PosencError(
                f"rope scaling {name!r} requires key {key!r}{hint}; required keys: {list(required)}"
            )


def _number(name: str, key: str, value: Any, **limits: Any) -> float:
    return check_float(f"rope scaling {name!r} key {key!r}", value, **limits)


def _check_common(name: str, params: Params, dim: int) -> None:
    """Ranges shared by several variants: factor >= 1, L0 >= 1, d >= 4 for NTK bases."""
    if params.get("factor") is not None:
        _number(name, "factor", params["factor"], minimum=1.0)
    if ORIGINAL in params:
        check_int(f"rope scaling {name!r} key {ORIGINAL!r}", params[ORIGINAL], minimum=1)
    if params.get("attention_factor") is not None:
        _number(name, "attention_factor", params["attention_factor"], minimum=0.0, exclusive_minimum=True)


def _validate_nothing(params: Params, *, dim: int) -> None:
    """default / linear: keys and factor only (checked by :func:`validate`)."""


def _validate_ntk(params: Params, *, dim: int) -> None:
    """ntk / dynamic: b' = b * x^(d/(d-2)) needs d >= 4."""
    if dim < 4:
        raise PosencError(f"NTK-style rope scalings need dim (rotary_dim) >= 4 (b' uses d/(d-2)), got {dim}")


def _validate_yarn(params: Params, *, dim: int) -> None:
    """beta_fast >= beta_slow > 0; mscale, mscale_all_dim >= 0; truncate a bool."""
    fast = _number("yarn", "beta_fast", params.get("beta_fast", 32.0), minimum=0.0, exclusive_minimum=True)
    slow = _number("yarn", "beta_slow", params.get("beta_slow", 1.0), minimum=0.0, exclusive_minimum=True)
    if fast < slow:
        raise PosencError(
            f"rope scaling 'yarn' key 'beta_fast' must be >= beta_slow, got beta_fast={fast} < beta_slow={slow}"
        )
    for key in ("mscale", "mscale_all_dim"):
        if params.get(key) is not None:
            _number("yarn", key, params[key], minimum=0.0)
    check_bool("rope scaling 'yarn' key 'truncate'", params.get("truncate", True))


def _validate_llama3(params: Params, *, dim: int) -> None:
    """0 < low_freq_factor <= high_freq_factor (equal: no blended band, as Llama 4 Scout)."""
    low = _number("llama3", "low_freq_factor", params["low_freq_factor"], minimum=0.0, exclusive_minimum=True)
    high = _number("llama3", "high_freq_factor", params["high_freq_factor"], minimum=0.0)
    if high < low:
        raise PosencError(
            "rope scaling 'llama3' key 'high_freq_factor' must be >= low_freq_factor, "
            f"got high_freq_factor={high} < low_freq_factor={low}"
        )


def _validate_longrope(params: Params, *, dim: int) -> None:
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
            _number("longrope", key + " entry", number, minimum=0.0, exclusive_minimum=True)


def _yarn_bands(*, dim: int, base: float, params: Params) -> list[str]:
    """``extrapolate`` (ramp 0, unchanged) / ``ramp`` / ``interpolate`` (ramp 1, divided by s)."""
    ramp = yarn_ramp(dim=dim, base=base, params=params)
    return ["extrapolate" if r == 0 else "interpolate" if r == 1 else "ramp" for r in ramp.tolist()]


def _llama3_bands(*, dim: int, base: float, params: Params) -> list[str]:
    """``high`` (wavelength < L0/high_freq_factor, unchanged) / ``mid`` / ``low`` (divided by s)."""
    weight = llama3_smooth(dim=dim, base=base, params=params)
    return ["high" if w == 0 else "low" if w == 1 else "mid" for w in weight.tolist()]


# ---------------------------------------------------------------------------
# The registry: one spec per scaling. Adding a scaling = one entry here (+ its tests).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RopeScaling:
    """Everything posenc knows about one RoPE scaling, in one place."""

    compute: ScalingFn  # fn(*, dim, base, seq_len, params) -> (inv_freq (d/2,) float64, attention_scaling)
    paper: str  # where the formula comes from
    required: tuple[str, ...] = ()  # keys of the scaling dict (Hugging Face's names) that must be given
    optional: tuple[str, ...] = ()  # keys it may have
    validate: Callable[..., None] = (
        _validate_nothing  # fn(params, *, dim): range checks beyond the common ones
    )
    length_dependent: bool = (
        False  # inv_freq changes with the current length: attention caches keys unrotated
    )
    bands: Callable[..., list[str]] | None = None  # fn(*, dim, base, params) -> a band name per pair
    # Where Hugging Face reads the original context L0: "rope" (the rope dict, a top-level
    # original_max_position_embeddings winning, else max_position_embeddings) or
    # "max_position_embeddings" (that key only); None when the scaling has no L0.
    hf_original: str | None = None
    factor_from_context: bool = False  # a missing factor is max_position_embeddings / L0 (as HF)
    # The NumPy float64 reference (posenc.reference.rope_scaling), fn(dim, base, **params[, seq_len]).
    reference: Callable[..., tuple[np.ndarray, float]] | None = None
    # A representative setting for rotated dim d with original context 2048 (conformance vectors).
    example: Callable[[int], Params] | None = None

    def __call__(
        self, *, dim: int, base: float, seq_len: int | None, params: Params
    ) -> tuple[torch.Tensor, float]:
        return self.compute(dim=dim, base=base, seq_len=seq_len, params=params)


ROPE_SCALINGS: dict[str, RopeScaling] = {
    "default": RopeScaling(
        _default,
        "Su et al. 2021, RoFormer, https://arxiv.org/abs/2104.09864",
        reference=ref.rope_scaling_default,
        example=lambda dim: {},
    ),
    "linear": RopeScaling(
        _linear,
        "Chen et al. 2023, Position Interpolation, https://arxiv.org/abs/2306.15595",
        ("factor",),
        reference=ref.rope_scaling_linear,
        example=lambda dim: {"factor": 4.0},
    ),
    "ntk": RopeScaling(
        _ntk,
        "bloc97 2023, NTK-aware scaled RoPE, https://www.reddit.com/r/LocalLLaMA/comments/14lz7j5/",
        ("factor",),
        validate=_validate_ntk,
        reference=ref.rope_scaling_ntk,
        example=lambda dim: {"factor": 4.0},
    ),
    "dynamic": RopeScaling(
        _dynamic,
        "emozilla 2023, Dynamically scaled RoPE, https://www.reddit.com/r/LocalLLaMA/comments/14mrgpr/",
        ("factor", ORIGINAL),
        validate=_validate_ntk,
        length_dependent=True,
        hf_original="max_position_embeddings",
        reference=ref.rope_scaling_dynamic,
        example=lambda dim: {"factor": 4.0, ORIGINAL: 2048},
    ),
    "yarn": RopeScaling(
        _yarn,
        "Peng et al. 2023, YaRN, https://arxiv.org/abs/2309.00071",
        ("factor", ORIGINAL),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
        validate=_validate_yarn,
        bands=_yarn_bands,
        hf_original="rope",
        reference=ref.rope_scaling_yarn,
        example=lambda dim: {"factor": 4.0, ORIGINAL: 2048},
    ),
    "llama3": RopeScaling(
        _llama3,
        "Meta 2024, The Llama 3 Herd of Models, https://arxiv.org/abs/2407.21783",
        ("factor", ORIGINAL, "low_freq_factor", "high_freq_factor"),
        validate=_validate_llama3,
        bands=_llama3_bands,
        hf_original="rope",
        reference=ref.rope_scaling_llama3,
        example=lambda dim: {"factor": 8.0, ORIGINAL: 2048, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    ),
    "longrope": RopeScaling(
        _longrope,
        "Ding et al. 2024, LongRoPE, https://arxiv.org/abs/2402.13753",
        ("short_factor", "long_factor", ORIGINAL),
        ("factor", "attention_factor"),
        validate=_validate_longrope,
        length_dependent=True,
        hf_original="rope",
        factor_from_context=True,
        reference=ref.rope_scaling_longrope,
        example=lambda dim: {
            "short_factor": [1.0 + 0.05 * i for i in range(dim // 2)],
            "long_factor": [1.0 + 0.5 * i for i in range(dim // 2)],
            ORIGINAL: 2048,
        },
    ),
}

# Views of the registry, by field.
PAPERS: dict[str, str] = {name: spec.paper for name, spec in ROPE_SCALINGS.items()}
ROPE_SCALING_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (spec.required, spec.optional) for name, spec in ROPE_SCALINGS.items()
}
ROPE_SCALING_VALIDATORS: dict[str, Callable[..., None]] = {
    name: spec.validate for name, spec in ROPE_SCALINGS.items()
}


# ---------------------------------------------------------------------------
# Public entry points.
# ---------------------------------------------------------------------------


def split(scaling: Params | None) -> tuple[str, Params]:
    """``{"rope_type": name, **params}`` (or None) -> ``(name, params)``; checks the name."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise PosencTypeError(
            f"scaling must be a dict with key 'rope_type' or None, got {type(scaling).__name__}"
        )
    params = dict(scaling)
    name = params.pop("rope_type", "default")
    if name not in ROPE_SCALINGS:
        raise PosencError(
            f"rope_type must be one of {list(ROPE_SCALINGS)}, got {name!r}{did_you_mean(name, ROPE_SCALINGS)}"
        )
    return name, params


def resolve(scaling: Params | None, *, max_position_embeddings: int | None = None) -> Params | None:
    """Fill what Hugging Face infers from ``max_position_embeddings`` (the model's context).

    As HF: a variant that takes ``original_max_position_embeddings`` defaults it to
    ``max_position_embeddings`` (for ``dynamic`` that is HF's only source), and
    ``longrope`` without ``factor`` uses ``max_position_embeddings / L0``.
    Returns a new dict (or None); keys already present win.
    """
    name, params = split(scaling)
    if max_position_embeddings is None or name == "default":
        return None if scaling is None else dict(scaling)
    max_position_embeddings = check_int("max_position_embeddings", max_position_embeddings, minimum=1)
    spec = ROPE_SCALINGS[name]
    if ORIGINAL in spec.required + spec.optional and params.get(ORIGINAL) is None:
        params[ORIGINAL] = max_position_embeddings
    if spec.factor_from_context and params.get("factor") is None:
        params["factor"] = max_position_embeddings / params[ORIGINAL]
    return {"rope_type": name, **params}


def validate(scaling: Params | None, *, dim: int) -> Params | None:
    """Check a scaling dict for rotated dimension ``dim``; returns it unchanged.

    Raises ValueError/TypeError naming the offending key: unknown rope_type or key,
    missing required key (e.g. the original context length), factor < 1, factor
    lists of the wrong length, beta_fast < beta_slow, high_freq_factor <=
    low_freq_factor, odd dim.
    """
    check_int("dim (rotary_dim)", dim, minimum=2, even=True)
    name, params = split(scaling)
    _check_keys(name, params)
    _check_common(name, params, dim)
    ROPE_SCALINGS[name].validate(params, dim=dim)
    return scaling


def compute(
    scaling: Params | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
):
    """Validate ``scaling`` and return ``(inv_freq float64 (dim/2,), attention_scaling float)``.

    Args:
        scaling: HF-style dict with key ``"rope_type"`` (None -> plain RoPE).
        dim: rotated dimension (``rotary_dim``), even.
        base: RoPE base (``rope_theta``) > 1.
        seq_len: current length ``max(position) + 1``; read by ``dynamic`` and
            ``longrope`` only (None = within the original context).
        max_position_embeddings: the model's context; fills missing keys as HF
            does (see :func:`resolve`).
    """
    scaling = resolve(scaling, max_position_embeddings=max_position_embeddings)
    if not torch.compiler.is_compiling():  # in a graph: checked when the encoding was built
        validate(scaling, dim=dim)
        base = check_float("base (rope_theta)", base, minimum=1.0, exclusive_minimum=True)
        if seq_len is not None:
            seq_len = check_int("seq_len", seq_len, minimum=1)
    name, params = split(scaling)
    try:
        inv_freq, attention_scaling = ROPE_SCALINGS[name](dim=dim, base=base, seq_len=seq_len, params=params)
    except OverflowError:
        inv_freq, attention_scaling = torch.full((dim // 2,), math.nan), math.nan
    # A factor/base so large that float64 overflows would give zero/inf frequencies or an
    # inf attention scaling (silently inf or unrotated outputs): reject it, naming the keys.
    inv = torch.as_tensor(inv_freq)
    if torch.compiler.is_compiling():  # a length-dependent scaling traced in a graph: checked on the device
        torch._assert_async(
            torch.isfinite(inv).all() & (inv > 0).all(),
            f"rope scaling {name!r} overflows float64 at this length (frequencies out of range)",
        )
        return inv_freq, attention_scaling
    if not (
        bool(torch.isfinite(inv).all() and (inv > 0).all())
        and abs(attention_scaling) <= torch.finfo(torch.float32).max
    ):
        raise PosencError(
            f"rope scaling {name!r} with base={base} and {params} overflows float64/float32 "
            "(frequencies or attention_factor out of range); use a smaller factor, base or attention_factor"
        )
    return inv_freq, attention_scaling


def reference(
    scaling: Params | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
) -> tuple[np.ndarray, float]:
    """:func:`compute` by the NumPy float64 reference of the variant (``ROPE_SCALINGS[name].reference``):
    ``(inv_freq (dim/2,) float64 ndarray, attention_scaling)``."""
    scaling = validate(resolve(scaling, max_position_embeddings=max_position_embeddings), dim=dim)
    name, params = split(scaling)
    fn = ROPE_SCALINGS[name].reference
    if fn is None:
        raise PosencError(f"rope scaling {name!r} has no NumPy reference")
    if "seq_len" in inspect.signature(fn).parameters:
        params["seq_len"] = None if seq_len is None else int(seq_len)
    inv_freq, attention_scaling = fn(dim, float(base), **params)
    return np.asarray(inv_freq, dtype=np.float64), float(attention_scaling)


def depends_on_seq_len(scaling: Params | None) -> bool:
    """True when inv_freq changes with the current sequence length (dynamic NTK, LongRoPE).

    Then attention must cache keys before rotation (see the module docstring).
    """
    name = (scaling or {}).get("rope_type", "default")
    return name in ROPE_SCALINGS and ROPE_SCALINGS[name].length_dependent


def frequency_bands(
    scaling: Params | None, *, dim: int, base: float, max_position_embeddings: int | None = None
) -> list[str] | None:
    """Which band each pair falls in, for the variants that have bands, else None.

    YaRN: ``extrapolate`` (ramp 0, unchanged) / ``ramp`` / ``interpolate`` (ramp 1,
    divided by s). Llama 3: ``high`` (wavelength < L0/high_freq_factor, unchanged) /
    ``mid`` / ``low`` (wavelength > L0/low_freq_factor, divided by s).
    """
    scaling = validate(resolve(scaling, max_position_embeddings=max_position_embeddings), dim=dim)
    name, params = split(scaling)
    bands = ROPE_SCALINGS[name].bands
    return None if bands is None else bands(dim=dim, base=base, params=params)


def apply_to_model(model: nn.Module, scaling: Params | None) -> int:
    """Set ``scaling`` on every rotary encoding in ``model``; returns how many were changed.

    Lets a model trained with plain RoPE be evaluated with any context-extension
    scaling without retraining: ``apply_to_model(model, {"rope_type": "yarn", ...})``.
    An encoding shared by several layers counts once. ``None`` restores plain RoPE.
    """
    if not isinstance(model, nn.Module):
        raise PosencTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    split(scaling)  # fail fast on a bad rope_type, before touching any module
    count = 0
    for module in model.modules():
        if isinstance(module, RotaryEncoding) and module.supports_scaling:
            module.set_scaling(scaling)
            count += 1
    return count


def describe(
    scaling: Params | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
) -> dict[str, Any]:
    """Per-pair summary of a scaling (what ``posenc rope inspect`` prints).

    Returns ``{"rope_type", "dim", "base", "seq_len", "attention_scaling", "pairs"}``;
    each pair: ``inv_freq`` theta_i', ``wavelength`` 2 pi / theta_i' in tokens,
    ``default_wavelength`` 2 pi / theta_i, ``scale`` theta_i / theta_i' (1 = unchanged,
    s = fully interpolated) and ``band`` (see :func:`frequency_bands`, else None).
    """
    scaling = resolve(scaling, max_position_embeddings=max_position_embeddings)
    inv_freq, attention = compute(scaling, dim=dim, base=base, seq_len=seq_len)
    plain = inverse_frequencies(dim, float(base))
    bands: list[str | None] = [None] * (dim // 2)
    bands = list(frequency_bands(scaling, dim=dim, base=base) or bands)
    pairs = [
        {
            "pair": i,
            "inv_freq": f,
            "wavelength": 2 * math.pi / f,
            "default_wavelength": 2 * math.pi / p,
            "scale": p / f,
            "band": band,
        }
        for i, (f, p, band) in enumerate(zip(inv_freq.tolist(), plain.tolist(), bands))
    ]
    name, _ = split(scaling)
    return {
        "rope_type": name,
        "scaling": scaling,
        "dim": dim,
        "base": float(base),
        "seq_len": seq_len,
        "attention_scaling": attention,
        "pairs": pairs,
    }
