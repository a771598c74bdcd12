"""ALiBi: attention with linear biases (Press et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.core.checks import check_bool, check_int
from posenc.core.fields import EncodingConfig, model_field
from posenc.encoding.base import PaperSetting
from posenc.encoding.bias.family import Params, _BiasFamily


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi head slopes, float64 ``(h,)`` (Press et al. 2022, sec. 3 and the official code).

    Power of two ``n``: ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. Otherwise the slopes of the
    closest lower power of two ``p``, then every other slope of the ``2p`` set (``n - p`` of them).
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)
    p = 1 << (num_heads.bit_length() - 1)  # closest power of two <= num_heads

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * m / n) for m in range(1, n + 1)]  # start 2^(-8/n), ratio 2^(-8/n)

    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: num_heads - p], dtype=torch.float64)


@dataclass(frozen=True)
class ALiBiConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one slope each
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: symmetric -m|i-j| (encoders); False: -m(i-j) (causal)

    def validate(self) -> None:
        # bounded: the slopes are built in a Python loop (2**40 heads ran out of memory, not an error)
        check_int("num_heads", self.num_heads, minimum=1, maximum=1 << 16)
        check_bool("bidirectional", self.bidirectional)


class ALiBi(_BiasFamily):
    r"""Attention with Linear Biases (Press et al. 2022, https://arxiv.org/abs/2108.12409).

    .. math:: B_{h,i,j} = -m_h (i - j), \qquad m_h = 2^{-8h/H}\ (H \text{ a power of two})

    Bidirectional: ``-m_h |i - j|``. Parameter-free; slopes from :func:`alibi_slopes`.
    """

    Config = ALiBiConfig
    config: ALiBiConfig
    paper = (
        "Press et al. 2022, Train Short, Test Long: Attention with Linear Biases Enables "
        "Input Length Extrapolation, https://arxiv.org/abs/2108.12409"
    )
    equation = "B[h,i,j] = -m_h * (i - j)  (bidirectional: -m_h * |i - j|), m_h = 2^(-8h/H)"
    share_across_layers = True
    paper_setting = PaperSetting(
        source="fairseq, where Press et al. trained every encoding they compared, scales all token embeddings "
        "by sqrt(d_model) (a codebase default, not ALiBi's); BLOOM does not; it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )
    translation_invariant = True
    cache_dense = True

    def __init__(self, config: ALiBiConfig) -> None:
        super().__init__(config)
        self.slopes = alibi_slopes(config.num_heads)  # float64 (h,), plain attribute (not a buffer)

    def _prepare(self, device: torch.device) -> Params:
        return {"slopes": self.slopes.to(device)}

    def _compute(self, q, k, h, p):
        d = (q - k).to(torch.float64)  # i - j, exact for |i - j| < 2^53
        if self.config.bidirectional:
            d = d.abs()
        return -p["slopes"][h] * d
