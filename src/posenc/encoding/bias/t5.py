"""T5's bucketed relative position bias (Raffel et al. 2020)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.checks import check_bool, check_float, check_int
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.encoding.base import PaperSetting
from posenc.encoding.bias.family import Params, _BiasFamily


def t5_relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket of ``relative_position = j - i`` (key minus query), as Mesh-TF / HF T5.

    Half of a direction's buckets hold the exact distances ``0 .. max_exact-1``; the rest
    grow logarithmically up to ``max_distance``; farther distances share the last bucket.
    Bidirectional: keys after the query use the upper ``num_buckets // 2`` buckets.
    Causal: keys after the query fall in bucket 0 (they are masked anyway).
    """
    rel = relative_position.long()
    n = num_buckets
    if bidirectional:
        n //= 2
        offset = (rel > 0).long() * n
        dist = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        dist = (-rel).clamp(min=0)
    max_exact = n // 2
    ratio = torch.log(dist.clamp(min=1).to(torch.float64) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + torch.floor(ratio * (n - max_exact)).long()).clamp(max=n - 1)
    return offset + torch.where(dist < max_exact, dist, large)


@dataclass(frozen=True)
class T5Config(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one learned scalar per (bucket, head)
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: separate buckets for keys before/after the query
    num_buckets: int = 32  # T5 default; per direction when bidirectional
    max_distance: int = length_field("paper_length", default=128)  # distances >= this share the last bucket
    init_std: float = 0.02  # table ~ N(0, init_std^2); HF T5 uses d_model^-0.5

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("num_buckets", self.num_buckets, minimum=4 if self.bidirectional else 2)
        n = self.num_buckets // 2 if self.bidirectional else self.num_buckets
        check_int(
            f"max_distance (beyond the {n // 2} exact buckets of num_buckets={self.num_buckets})",
            self.max_distance,
            minimum=max(1, n // 2 + 1),
        )
        check_float("init_std", self.init_std, minimum=0.0, maximum=1e6)  # larger overflows float32


class T5RelativeBias(_BiasFamily):
    r"""T5 relative position buckets (Raffel et al. 2020, https://arxiv.org/abs/1910.10683).

    .. math:: B_{h,i,j} = w_{\mathrm{bucket}(j - i),\,h}

    A learned ``(num_buckets, num_heads)`` table indexed by a log-spaced bucket of ``j - i``
    (:func:`t5_relative_position_bucket`, identical to HF's ``_relative_position_bucket``).
    T5 shares one table across layers (``share_across_layers = True``).
    """

    Config = T5Config
    config: T5Config
    paper = (
        "Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
        "Text-to-Text Transformer, https://arxiv.org/abs/1910.10683"
    )
    equation = (
        "B[h,i,j] = table[bucket(j - i), h]; bucket exact below max_exact, log-spaced up to max_distance"
    )
    share_across_layers = True
    translation_invariant = True
    paper_setting = PaperSetting(
        source="T5 does not scale token embeddings (it initialises them N(0, 1) and scales tied output "
        "logits by 1/sqrt(d_model)); it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.table = nn.Parameter(torch.randn(config.num_buckets, config.num_heads) * config.init_std)

    def _prepare(self, device: torch.device) -> Params:
        return {"table": self.table.to(device=device, dtype=torch.float64)}

    def constant_beyond(self) -> int | None:
        """Causal: every distance ``>= max_distance`` falls in the last bucket."""
        return None if self.config.bidirectional else self.config.max_distance

    def _compute(self, q, k, h, p):
        c = self.config
        bucket = t5_relative_position_bucket(
            k - q, bidirectional=c.bidirectional, num_buckets=c.num_buckets, max_distance=c.max_distance
        )
        return p["table"][bucket, h]
