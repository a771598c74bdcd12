"""posenc-mine: a positional encoding and a task of one's own, for posenc (docs/your-encoding.md)."""

from dataclasses import dataclass

import torch

from posenc.encoding import BiasEncoding, EncodingConfig, model_field
from posenc.tasks import FIRST_SYMBOL, Task


@dataclass(frozen=True)
class LogBiasConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # one slope per head; the model fills it in


class LogBias(BiasEncoding):
    """ALiBi's slopes on a logarithmic distance: far keys fade slowly, near ones sharply."""

    Config = LogBiasConfig
    paper = "Press et al. 2022 (ALiBi) slopes, https://arxiv.org/abs/2108.12409, on log(1 + distance)"
    equation = "B[h,i,j] = -m_h * log(1 + |i - j|), m_h = 2^(-8(h+1)/H)"
    share_across_layers = True  # no parameters: one module serves every layer
    translation_invariant = True  # depends on i - j only (posenc check verifies it)

    def __init__(self, config: LogBiasConfig) -> None:
        super().__init__(config)
        heads = torch.arange(1, config.num_heads + 1, dtype=torch.float64)
        self.slopes = 2.0 ** (-8.0 * heads / config.num_heads)  # (h,)

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        distance = (q_pos - k_pos).abs().to(torch.float64)
        return -self.slopes.to(distance.device)[head] * torch.log1p(distance)


class Sort(Task):
    """Sorting: the model must find each symbol's rank, wherever it stands."""

    description = "n symbols out of 64 (with repeats); y = x sorted"
    vocab_size = FIRST_SYMBOL + 64  # ids below FIRST_SYMBOL are posenc's markers
    chance = 1 / 64

    def example(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(0, 64, (n,), generator=generator) + FIRST_SYMBOL
        return x, x.sort().values
