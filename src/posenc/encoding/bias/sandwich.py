"""Sandwich: the sinusoid's inner product as a bias (Chi et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc.core.checks import check_bool, check_float, check_int
from posenc.core.fields import EncodingConfig, model_field
from posenc.core.sincos import grown_table
from posenc.encoding.bias.family import Params, _BiasFamily


@dataclass(frozen=True)
class SandwichConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; head h (1-based) is divided by 8h/H
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # accepted for uniformity; the bias is symmetric in i - j anyway
    embed_dim: int = 128  # d', size of the sinusoidal embeddings whose inner product is taken
    base: float = 10000.0  # sinusoid base

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("embed_dim", self.embed_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)


class Sandwich(_BiasFamily):
    r"""Sandwich (Chi et al. 2023, https://arxiv.org/abs/2212.10356), parameter-free.

    .. math:: B_{h,i,j} = \frac{H}{8h}\Big(\sum_{k=1}^{d'/2} \cos\frac{i - j}{\mathrm{base}^{2k/d'}}
              - \frac{d'}{2}\Big), \quad h = 1..H

    The sum is the inner product of two sinusoidal embeddings ``p_i . p_j`` of size ``d'``;
    subtracting ``d'/2`` (its value at distance 0) makes the bias 0 on the diagonal and < 0
    off it. It decays roughly logarithmically with small oscillations (it is monotone only
    up to ``pi * base^(2/d')``). The per-head divisor ``8h/H`` mirrors ALiBi's slopes.
    """

    Config = SandwichConfig
    config: SandwichConfig
    paper = (
        "Chi et al. 2023, Dissecting Transformer Length Extrapolation via the Lens of "
        "Receptive Field Analysis, https://arxiv.org/abs/2212.10356"
    )
    equation = "B[h,i,j] = (sum_{k=1}^{d'/2} cos((i - j) / base^(2k/d')) - d'/2) * H / (8h)"
    share_across_layers = True
    translation_invariant = True
    cache_dense = True

    def __init__(self, config: SandwichConfig) -> None:
        super().__init__(config)
        k = torch.arange(1, config.embed_dim // 2 + 1, dtype=torch.float64)
        self.frequencies = config.base ** (-2.0 * k / config.embed_dim)  # (d'/2,) float64
        heads = torch.arange(1, config.num_heads + 1, dtype=torch.float64)
        self.head_scale = config.num_heads / (8.0 * heads)  # (h,) float64
        self._profile_table: dict[torch.device, torch.Tensor] = {}

    def profile(self, distance: torch.Tensor) -> torch.Tensor:
        """``p_i . p_j - d'/2`` for float64 distances ``(...)`` -> ``(...)`` (head-free)."""
        w = self.frequencies.to(distance.device)
        return torch.cos(distance[..., None] * w).sum(-1) - self.config.embed_dim / 2

    def _table(self, size: int, device: torch.device) -> torch.Tensor:
        """Cached float64 ``profile(0 .. size-1)``, grown by doubling."""
        return grown_table(self._profile_table, device, size, self.profile)

    def _prepare(self, device: torch.device) -> Params:
        return {"head_scale": self.head_scale.to(device), "frequencies": self.frequencies.to(device)}

    def _compute(self, q, k, h, p):
        d = (q - k).abs()
        if d.ndim == 0:  # one score at a time (FlexAttention's score_mod): sum directly
            value = torch.cos(d.to(torch.float64) * p["frequencies"]).sum() - self.config.embed_dim / 2
        elif torch.compiler.is_compiling():  # a traced graph cannot size a table from the values
            value = self.profile(d.to(torch.float64))
        else:  # dense: look the distance up in the cached profile table (direct past 2^20)
            top = int(d.max()) + 1 if d.numel() else 1
            value = self._profile_rows(d, top)
        return value * p["head_scale"][h]

    def _profile_rows(self, d: torch.Tensor, top: int) -> torch.Tensor:
        """``profile(d)`` for int64 distances ``0 <= d < top``: from the table up to 2^20, else direct."""
        if top <= 1 << 20:
            return F.embedding(d, self._table(top, d.device)[:, None])[..., 0]
        return self.profile(d.to(torch.float64))

    def distance_bias(
        self, low: int, count: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``(h, count)`` float64 bias at ``delta = low + t``; the largest ``|delta|`` is known here,
        so the profile table is sized without reading the distances."""
        d = (torch.arange(low, low + count, device=device)).abs()
        top = max(abs(low), abs(low + count - 1)) + 1 if count else 1
        return self._profile_rows(d, top)[None, :] * self.head_scale.to(d.device)[:, None]
