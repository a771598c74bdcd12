"""xPos (Sun et al. 2022): RoPE's rotation times a per-pair exponential decay, reciprocal on q and k.

Axis legend: b batch, h heads, n tokens, d head_dim.

The rotation is RoPE's (the same frequencies and pair layouts, the rotary hook of
:mod:`posenc.encoding.rotary.hook`); the decay factors are float64 from integer positions, cast
last. The float64 NumPy reference is in :mod:`posenc.reference.rotary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc.core.checks import (
    check_choice,
    check_float,
    check_int,
    check_tensor,
    check_tensor_layout,
    to_layout,
)
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.core.positions import Positions, as_positions
from posenc.core.sincos import SinCosCache, grown_table, inverse_frequencies
from posenc.encoding.base import RotaryEncoding
from posenc.encoding.rotary.hook import rotary_hook
from posenc.kernels.fused_rope import rotate_trusted, table_dtype
from posenc.kernels.rotation import LAYOUTS


@dataclass(frozen=True)
class XPosConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    base: float = 10000.0  # rotation frequencies theta_i = base^(-2i/d), as RoPE
    scale_base: float = length_field(
        "paper_length", default=512.0
    )  # decay length: exponent is position / scale_base
    gamma: float = 0.4  # zeta_i = (2i/d + gamma) / (1 + gamma)
    layout: str = "half"  # "half" (HF / GPT-NeoX) or "interleaved" (torchscale / GPT-J)
    scale_center: int = 0  # exponents use (position - scale_center); cancels in q.k (see docstring)

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_float("scale_base", self.scale_base, minimum=0.0, exclusive_minimum=True)
        check_float("gamma", self.gamma, minimum=0.0, exclusive_minimum=True)
        check_choice("layout", self.layout, LAYOUTS)
        check_int("scale_center", self.scale_center, minimum=0)


class XPos(RotaryEncoding):
    r"""xPos (Sun et al. 2022, A Length-Extrapolatable Transformer, https://arxiv.org/abs/2212.10554).

    RoPE's rotation times a per-pair exponential decay, reciprocal on q and k:

    .. math:: \tilde q_m = \zeta^{(m-c)/B} \odot R_m q,\quad \tilde k_n = \zeta^{-(n-c)/B} \odot R_n k,
              \quad \zeta_i = \frac{2i/d + \gamma}{1 + \gamma}

    so ``<q~_m, k~_n> = sum_i zeta_i^{(m-n)/B} (...)`` depends on ``m - n`` only and
    decays with distance (``zeta_i < 1``). ``B`` is ``scale_base`` (512), ``gamma`` 0.4.

    Offset convention: torchscale (``xpos_relative_position.py``) rotates by the
    absolute position but centres the exponent on the middle of the whole window,
    ``c = ceil(L/2)`` for ``L`` = cached + new tokens, recomputed every step, which keeps
    the factors near 1 but forces it to cache keys unrotated and re-scale all of them
    each step. Here ``c = scale_center`` is a fixed config value (default 0, the
    paper's formula), so rotated keys can be cached (``cache_unrotated_keys`` is False). The centre cancels in every score; raise it toward the middle of your
    positions if ``zeta^{-n/B}`` would overflow (float16 past ~4500 positions,
    float32 past ~36000 with the defaults).
    """

    Config = XPosConfig
    config: XPosConfig
    paper = "Sun et al. 2022, A Length-Extrapolatable Transformer, https://arxiv.org/abs/2212.10554"
    equation = (
        "q~_m = zeta^((m-c)/B) R_m q; k~_n = zeta^(-(n-c)/B) R_n k; zeta_i = (2i/d + gamma)/(1 + gamma)"
    )
    share_across_layers = (
        True  # cache_unrotated_keys stays False: the centre is fixed, rotated keys stay valid
    )
    translation_invariant = True  # the scales are reciprocal on q and k: scores see m - n only

    def __init__(self, config: XPosConfig) -> None:
        super().__init__(config)
        d = config.head_dim
        i = torch.arange(d // 2, dtype=torch.float64)
        self._sincos = SinCosCache(inverse_frequencies(d, config.base))  # (d/2,) as RoPE
        self.log_zeta = torch.log((2.0 * i / d + config.gamma) / (1.0 + config.gamma))  # (d/2,) float64
        self._steepest = float(self.log_zeta.min())  # pair 0's log zeta, the most negative
        self._scale_cast: dict[tuple[torch.device, float], torch.Tensor] = {}
        self._scale_table: dict[torch.device, torch.Tensor] = {}

    def scale(
        self, positions: torch.Tensor | Positions, dtype: torch.dtype, *, key: bool, layout: str | None = None
    ) -> torch.Tensor:
        """``zeta^(+-(n - c)/B)`` of shape ``positions.shape + (d/2,)`` in ``dtype`` (float64 maths).

        Rows for positions below 2^16 are cached in float64 per device; larger ones
        are computed on the fly. A tensor ``layout`` shapes the result as :meth:`RoPE.cos_sin`
        does (``(b|1, 1, n, d/2)`` for ``"bhsd"``, ``(b|1, n, 1, d/2)`` for ``"bshd"``).
        """
        if layout is not None:
            check_tensor_layout(layout)
        if isinstance(positions, Positions):
            return to_layout(self._scale(positions, key=key).to(dtype), layout)
        check_tensor("positions", positions, ndim=(1, 2))
        out = self._scale(as_positions(positions, positions.shape[-1]), key=key).to(dtype)
        if layout is not None:
            return to_layout(out, layout)
        return out[0] if positions.ndim == 1 else out

    def _scale(self, positions: Positions, *, key: bool) -> torch.Tensor:
        """Float64 ``zeta^(+-(n - c)/B)``, ``(b|1, n, d/2)``, for trusted positions."""
        sign = -1.0 if key else 1.0
        c, b = self.config.scale_center, self.config.scale_base
        device, bound = positions.tensor.device, positions.bound
        if bound is None or bound > self._sincos.max_cached:
            exponent = (positions.tensor.to(torch.float64)[..., None] - c) / b
            return torch.exp(sign * exponent * self.log_zeta.to(device))
        before = self._scale_table.get(device)
        table = grown_table(  # (size, d/2) float64 log-scale
            self._scale_table, device, bound, lambda n: ((n[:, None] - c) / b) * self.log_zeta.to(device),
            limit=self._sincos.max_cached,
        )  # fmt: skip
        if table is not before:
            self._scale_cast = {}
        cache_key = (device, sign)
        if cache_key not in self._scale_cast:
            self._scale_cast[cache_key] = torch.exp(sign * table)
        rows = self._scale_cast[cache_key]
        if positions.start is not None:
            return rows[None, positions.start : positions.start + positions.length]
        return F.embedding(positions.tensor, rows)

    def _check_overflow(self, positions: Positions, dtype: torch.dtype, *, key: bool) -> None:
        """Raise if the scale at the extreme positions (known without reading them) overflows ``dtype``.

        The largest factor is on pair 0 (the most negative ``log zeta``), at the largest
        position for keys and at the smallest for queries.
        """
        if positions.bound is None or not positions.length:
            return
        c, b = self.config.scale_center, self.config.scale_base
        extreme = positions.bound - 1 if key else positions.low
        log_scale = (extreme - c) / b * self._steepest * (-1.0 if key else 1.0)
        if log_scale > math.log(torch.finfo(dtype).max):  # would be inf, silently
            raise PosencError(
                f"{'k' if key else 'q'}_positions {'up to' if key else 'from'} {extreme} overflow xPos's "
                f"scale zeta^((n - scale_center) / scale_base) in {dtype}; set scale_center near the "
                f"middle of your positions (now {self.config.scale_center}) or raise scale_base"
            )

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        layout: str = "bhsd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate and scale ``q (b, h, i, d)`` up / ``k (b, h, j, d)`` down; positions ``(b|1, n)``.

        ``layout="bshd"``: ``q (b, i, h, d)``, ``k (b, j, h, d)``, rotated strided (no copy).
        """
        return rotary_hook(
            self._rotate_bhsd, q, k, q_positions, k_positions, head_dim=self.config.head_dim, layout=layout
        )

    def _rotate_bhsd(
        self, q: torch.Tensor, k: torch.Tensor, qp: Positions, kp: Positions
    ) -> tuple[torch.Tensor, torch.Tensor]:
        items = []
        for x, pos, is_key in ((q, qp, False), (k, kp, True)):
            self._check_overflow(pos, x.dtype, key=is_key)
            dtype = table_dtype(x.dtype)
            cos, sin = self._sincos.lookup(pos, torch.float64)  # (b|1, n, d/2)
            s = self._scale(pos, key=is_key)  # (b|1, n, d/2), product in float64
            items.append((x, (cos * s).to(dtype)[:, None], (sin * s).to(dtype)[:, None]))  # (b|1, 1, n, d/2)
        q, k = rotate_trusted(tuple(items), layout=self.config.layout, rotary_dim=self.config.head_dim)
        return q, k


__all__ = ["XPos", "XPosConfig"]
