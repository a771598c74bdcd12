"""KERPLE: kernelized relative positional embeddings, logarithmic and power variants (Chi et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.checks import check_bool, check_float, check_int
from posenc.core.fields import EncodingConfig, model_field
from posenc.encoding.base import PaperSetting
from posenc.encoding.bias.family import Params, _BiasFamily


@dataclass(frozen=True)
class KerpleConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one (r1, r2) pair each
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: distance |i-j|; False: max(i-j, 0) as the official tril
    clamp_min: float = 0.01  # r1, r2 are clamped to >= this (the official code's eps)

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_float("clamp_min", self.clamp_min, minimum=0.0, maximum=1.0, exclusive_minimum=True)


class _Kerple(_BiasFamily):
    """Learnable per-head ``r1, r2 > 0``; initialised and clamped as the official code."""

    Config = KerpleConfig
    config: KerpleConfig
    paper = (
        "Chi et al. 2022, KERPLE: Kernelized Relative Positional Embedding for Length "
        "Extrapolation, https://arxiv.org/abs/2205.09921"
    )
    translation_invariant = True
    paper_setting = PaperSetting(
        source="Chi et al. 2022 train in GPT-NeoX, which does not scale token embeddings"
    )
    r1_init_scale: float  # r1 ~ U(0, r1_init_scale)
    r2_init_scale: float  # r2 ~ U(0, r2_init_scale)
    r2_max: float | None = None

    def __init__(self, config: KerpleConfig) -> None:
        super().__init__(config)
        self.r1 = nn.Parameter(torch.rand(config.num_heads) * self.r1_init_scale)
        self.r2 = nn.Parameter(torch.rand(config.num_heads) * self.r2_init_scale)

    def _prepare(self, device: torch.device) -> Params:
        # The official code clamps .data in place each step; we clamp functionally (same values,
        # no gradient while a raw parameter sits outside the range).
        lo = self.config.clamp_min
        r1 = self.r1.to(device=device, dtype=torch.float64).clamp(min=lo)
        r2 = self.r2.to(device=device, dtype=torch.float64).clamp(min=lo, max=self.r2_max)
        return {"r1": r1, "r2": r2}

    def _distance(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        d = (q - k).to(torch.float64)
        return d.abs() if self.config.bidirectional else d.clamp(min=0)


class KerpleLog(_Kerple):
    r"""KERPLE, logarithmic kernel (Chi et al. 2022, https://arxiv.org/abs/2205.09921).

    .. math:: B_{h,i,j} = -r_{1,h} \log(1 + r_{2,h} |i - j|), \quad r_1, r_2 > 0

    Official init: ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; both clamped to ``>= 0.01``.
    """

    equation = "B[h,i,j] = -r1_h * log(1 + r2_h * |i - j|), r1, r2 >= 0.01"
    r1_init_scale = 2.0
    r2_init_scale = 1.0

    def _compute(self, q, k, h, p):
        return -p["r1"][h] * torch.log1p(p["r2"][h] * self._distance(q, k))


class KerplePower(_Kerple):
    r"""KERPLE, power kernel (Chi et al. 2022, https://arxiv.org/abs/2205.09921).

    .. math:: B_{h,i,j} = -r_{1,h} |i - j|^{r_{2,h}}, \quad r_1 > 0,\ 0 < r_2 \le 2

    Official init: ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)``; ``r1 >= 0.01``, ``0.01 <= r2 <= 2``.
    """

    equation = "B[h,i,j] = -r1_h * |i - j|^r2_h, r1 >= 0.01, 0.01 <= r2 <= 2"
    r1_init_scale = 1.0
    r2_init_scale = 2.0
    r2_max = 2.0

    def _compute(self, q, k, h, p):
        return -p["r1"][h] * torch.pow(self._distance(q, k), p["r2"][h])
