"""No positional encoding: NoPE (kind ``none``), its own kind.

Attention runs with no positional term; a causal mask alone still lets a decoder infer positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from posenc.core.fields import EncodingConfig
from posenc.encoding.base import NoEncoding, PaperSetting


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
    config: NoPEConfig
    paper = "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization, https://arxiv.org/abs/2305.19466"
    equation = "attention(X) with no positional term"
    share_across_layers = True
    paper_setting = PaperSetting(
        source="Kazemnejad et al. 2023 train a T5-style decoder, whose token embeddings are not scaled",
    )


__all__ = ["NoPE", "NoPEConfig"]
