"""Absolute positional encodings: a vector per position, combined with token embeddings.

Axis legend: b batch, n sequence, d d_model.

Each class docstring gives the paper and the equation; the float64 NumPy
reference for each lives in :mod:`posenc.reference.absolute`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc.base import (
    AdditiveEncoding,
    EncodingConfig,
    NoEncoding,
    SinCosCache,
    check_float,
    check_int,
)


def sinusoidal_inv_freq(dim: int, base: float) -> torch.Tensor:
    """``1 / base^(2i/dim)`` for ``i = 0 .. dim/2 - 1``, float64."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


@dataclass(frozen=True)
class SinusoidalConfig(EncodingConfig):
    dim: int  # d_model; even
    base: float = 10000.0  # wavelengths run from 2*pi to base*2*pi

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)


class Sinusoidal(AdditiveEncoding):
    r"""Fixed sinusoids (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, sec. 3.5).

    .. math:: PE_{(pos, 2i)} = \sin(pos / base^{2i/d}),\quad PE_{(pos, 2i+1)} = \cos(pos / base^{2i/d})

    Angles come from integer positions in float64 (cached), so position 10^6
    is as exact in float32 as position 1.
    """

    Config = SinusoidalConfig
    paper = "Vaswani et al. 2017, Attention Is All You Need, https://arxiv.org/abs/1706.03762"
    equation = "PE(pos, 2i) = sin(pos / base^(2i/d)); PE(pos, 2i+1) = cos(pos / base^(2i/d))"

    def __init__(self, config: SinusoidalConfig) -> None:
        super().__init__(config)
        self._sincos = SinCosCache(sinusoidal_inv_freq(config.dim, config.base))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self._sincos(positions, torch.float64)  # (b, n, d/2)
        return torch.stack((sin, cos), dim=-1).flatten(-2).to(torch.float32)  # (b, n, d) interleaved

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        from posenc.base import check_tensor, resolve_positions

        x = check_tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.config.dim:
            raise ValueError(f"x has feature size {x.shape[-1]} but the encoding has dim={self.config.dim}")
        positions = resolve_positions(positions, x.shape[1], batch=x.shape[0], device=x.device)
        cos, sin = self._sincos(positions, x.dtype if x.dtype == torch.float64 else torch.float32)
        pe = torch.stack((sin, cos), dim=-1).flatten(-2)
        return x + pe.to(x.dtype)


@dataclass(frozen=True)
class NoPEConfig(EncodingConfig):
    def validate(self) -> None:
        pass


class NoPE(NoEncoding):
    """No positional encoding (Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466).

    A causal decoder can still infer positions from the mask; a bidirectional
    encoder is permutation-equivariant without one.
    """

    Config = NoPEConfig
    paper = "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization, https://arxiv.org/abs/2305.19466"
    equation = "attention(X) with no positional term"


_ = math  # keep math imported for family members added below
