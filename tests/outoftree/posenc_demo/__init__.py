"""A positional encoding defined outside posenc, as a user's package would: the registry's and
``posenc.testing``'s out-of-tree tests use it (this directory is put on ``sys.path`` by them,
and installed nowhere).

``LogDecayBias``: a bias kind, ``B[h, i, j] = -s_h log(1 + |i - j|)`` with one learned slope per
head (KERPLE's logarithmic kernel with its inner scale fixed to 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from posenc.core.checks import check_float, check_int
from posenc.encoding import BiasEncoding, EncodingConfig, model_field


@dataclass(frozen=True)
class LogDecayConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # one slope per head
    init_slope: float = 0.5  # s_h at initialisation

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_float("init_slope", self.init_slope, minimum=0.0)


class LogDecayBias(BiasEncoding):
    """Logarithmic distance decay, one learned slope per head (after Chi et al. 2022, KERPLE)."""

    Config = LogDecayConfig
    config: LogDecayConfig
    paper = (
        "Chi et al. 2022, KERPLE: Kernelized Relative Positional Embedding, https://arxiv.org/abs/2205.09921"
    )
    equation = "B[h,i,j] = -s_h * log(1 + |i - j|)"
    share_across_layers = True
    translation_invariant = True

    def __init__(self, config: LogDecayConfig) -> None:
        super().__init__(config)
        self.slopes = nn.Parameter(torch.full((config.num_heads,), float(config.init_slope)))

    @property
    def bias_dtype(self) -> torch.dtype:
        return self.slopes.dtype

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        distance = (q_pos - k_pos).abs().to(torch.float64)
        return (-self.slopes[head].to(torch.float64) * torch.log1p(distance)).to(self.bias_dtype)

    def numpy_reference(self, q_positions, k_positions):
        distance = np.abs(q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(np.float64)
        slopes = self.slopes.detach().double().numpy()[None, :, None, None]
        return -slopes * np.log1p(distance)
