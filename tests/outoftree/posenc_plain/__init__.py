"""A plug-in written with the standard library's exceptions only, as many users write one: its
Config's ``validate`` raises plain ValueError / TypeError, and a task of its own is named by
import spec (this directory is put on ``sys.path`` by the tests, and installed nowhere).

- :class:`DistanceBias`: ``B[h, i, j] = -scale |i - j|`` (ALiBi with one slope for every head).
- :class:`Echo`: a task, ``y = x``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.encoding import BiasEncoding, EncodingConfig, model_field
from posenc.tasks import FIRST_SYMBOL, Task


@dataclass(frozen=True)
class DistanceBiasConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")
    scale: float = 0.5

    def validate(self) -> None:
        if not isinstance(self.scale, float):
            raise TypeError(f"scale must be a float, got {type(self.scale).__name__}")
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")


class DistanceBias(BiasEncoding):
    """A linear distance penalty, one slope for every head."""

    Config = DistanceBiasConfig
    paper = "Press et al. 2022, ALiBi, https://arxiv.org/abs/2108.12409"
    equation = "B[h,i,j] = -scale * |i - j|"
    share_across_layers = True
    translation_invariant = True

    def bias_fn(self, q_pos, k_pos, head):
        distance = (q_pos - k_pos).abs().to(torch.float64)
        return -self.config.scale * distance + 0.0 * head


class Echo(Task):
    """Echo: the answer is the input."""

    description = "n symbols out of 8; y = x"
    vocab_size = FIRST_SYMBOL + 8
    chance = 1 / 8

    def example(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(0, 8, (n,), generator=generator) + FIRST_SYMBOL
        return x, x.clone()
