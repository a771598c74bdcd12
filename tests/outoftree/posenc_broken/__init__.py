"""Encodings that each break posenc's contract in one way, as a user's package might: the suite
holds them so that ``posenc check`` is seen to fail each with a reason naming the property (this
directory is put on ``sys.path`` by the tests, and installed nowhere).

- :class:`DroppedPair`: a rotary whose ``rotate`` returns q and k without their last pair.
- :class:`IgnoresLayout`: a rotary of its own that always reads ``(b, h, n, d)``, whatever
  ``layout`` says.
- :class:`DroppedKeyPair`: a rotary whose ``rotate`` drops the last pair of k only (q is right).
- :class:`NaNOutput`: sinusoidal positions whose ``embed`` returns NaN.
- :class:`NaNTurn`: PlainTurn whose ``rotate`` returns NaN (PyTorch's fused CPU attention turns a
  row of NaN scores into zeros, so attention's outputs alone do not show it).
- :class:`NaNRoPE`: RoPE whose ``rotate`` returns NaN, with RoPE's declarations (scalings, tables).
- :class:`QueryTerm`: a bias that declares ``translation_invariant = True`` but adds a term of the
  query position alone (which softmax cancels, so attention alone does not show it).
- :class:`PlainTurn`: IgnoresLayout fixed (correct), the start of the three below.
- :class:`PerHeadTurn`: turns every head at its own speed but declares ``supports_grouped_kv``.
- :class:`ClaimsScaling`: declares ``supports_scaling = True`` and has no ``set_scaling``.
- :class:`LengthTurn`: its angles depend on the sequence's length, and it declares
  ``supports_kv_cache`` without ``cache_unrotated_keys``.
- :class:`NoReference`: drops an inherited ``numpy_reference`` by setting it to None (not broken).
- :class:`MarkerTask`: a task whose answers use the ids posenc reserves for its markers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc.core.positions import as_positions
from posenc.encoding import BiasEncoding, EncodingConfig, RotaryEncoding, model_field
from posenc.registry import BUILTINS
from posenc.tasks import FIRST_SYMBOL, Task

RoPE = BUILTINS["rope"]
Sinusoidal = BUILTINS["sinusoidal"]


class DroppedPair(RoPE):
    """RoPE whose rotate loses the last feature pair of q and k: (2, 3, 5, 8) -> (2, 3, 5, 6)."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        q, k = super().rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)
        return q[..., :-2], k[..., :-2]


@dataclass(frozen=True)
class PlainRotaryConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")
    base: float = 10000.0


class IgnoresLayout(RotaryEncoding):
    """A rotary of its own (RoPE's angles, pairs (2t, 2t+1)) that reads q and k as (b, h, n, d)
    even when ``layout="bshd"`` says (b, n, h, d)."""

    Config = PlainRotaryConfig
    paper = "Su et al. 2021, RoFormer, https://arxiv.org/abs/2104.09864"
    equation = "q'_m = R(m theta) q_m"
    share_across_layers = True
    translation_invariant = True

    def _turn(self, x: torch.Tensor, positions) -> torch.Tensor:
        n, d = x.shape[-2], x.shape[-1]
        pos = as_positions(positions, n, device=x.device).tensor.to(torch.float64)  # (b|1, n)
        freq = self.config.base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = pos[:, None, :, None] * freq  # (b|1, 1, n, d/2)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        return self._turn(q, q_positions), self._turn(k, k_positions)


class PlainTurn(IgnoresLayout):
    """The same turn, honouring ``layout``: correct, the start of the false declarations below."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        if layout == "bshd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q, k = self.rotate(q, k, q_positions=q_positions, k_positions=k_positions)
            return q.transpose(1, 2), k.transpose(1, 2)
        return super().rotate(q, k, q_positions=q_positions, k_positions=k_positions)


class PerHeadTurn(PlainTurn):
    """Head h turns at (h + 1) times the speed: keys shared by several query heads (grouped-query
    attention) are turned at one head's speed, yet it keeps ``supports_grouped_kv = True``."""

    def _turn(self, x: torch.Tensor, positions) -> torch.Tensor:
        speed = torch.arange(1, x.shape[1] + 1, dtype=torch.float64)[None, :, None]  # (1, h, 1)
        pos = as_positions(positions, x.shape[-2], device=x.device).tensor[:, None, :] * speed  # (b|1, h, n)
        d = x.shape[-1]
        freq = self.config.base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = pos[..., None] * freq  # (b|1, h, n, d/2)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class ClaimsScaling(PlainTurn):
    """Declares that it takes RoPE's scalings, and has no set_scaling."""

    supports_scaling = True


class LengthTurn(PlainTurn):
    """Its angles shrink with the longest position seen (as dynamic NTK does), yet it declares a
    KV cache of turned keys (``cache_unrotated_keys`` stays False)."""

    translation_invariant = False

    def _turn(self, x: torch.Tensor, positions) -> torch.Tensor:
        pos = as_positions(positions, x.shape[-2], device=x.device).tensor
        stretch = 1.0 + int(pos.max()) / 8.0
        return super()._turn(x, (pos.double() / stretch * 4).round().long())


class NaNTurn(PlainTurn):
    """PlainTurn whose rotate returns NaN everywhere."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        q, k = super().rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)
        return q * math.nan, k * math.nan


class NaNRoPE(RoPE):
    """RoPE whose rotate returns NaN everywhere (it keeps RoPE's scalings and ``cos_sin``)."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        q, k = super().rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)
        return q * math.nan, k * math.nan


class DroppedKeyPair(PlainTurn):
    """PlainTurn whose rotate loses the last feature pair of k only: q (2, 3, 5, 8) stays, k
    (2, 3, 7, 8) -> (2, 3, 7, 6)."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        q, k = super().rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)
        return q, k[..., :-2]


class NaNOutput(Sinusoidal):
    """Sinusoidal positions whose embed returns NaN everywhere."""

    def embed(self, x, *, positions=None):
        return super().embed(x, positions=positions) * math.nan


@dataclass(frozen=True)
class QueryTermConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")


class QueryTerm(BiasEncoding):
    """ALiBi's distance penalty plus a term of the query position alone, ``0.1 i``: it declares
    ``translation_invariant = True`` but shifting every position changes the bias (attention does
    not see it: softmax cancels a term that is constant along a row)."""

    Config = QueryTermConfig
    paper = "Press et al. 2022, ALiBi, https://arxiv.org/abs/2108.12409"
    equation = "B[h,i,j] = -m_h |i - j| + 0.1 i"
    share_across_layers = True
    translation_invariant = True  # false: the 0.1 i term moves with the positions

    def bias_fn(self, q_pos, k_pos, head):
        slopes = 2.0 ** (-8.0 * (head + 1).to(torch.float64) / self.config.num_heads)
        return -slopes * (q_pos - k_pos).abs().to(torch.float64) + 0.1 * q_pos.to(torch.float64)


class NoReference(Sinusoidal):
    """Sinusoidal positions that drop the inherited NumPy reference (``numpy_reference = None``)."""

    numpy_reference = None  # type: ignore[assignment]


class MarkerTask(Task):
    """Echo, except that every answer ends in id 1, which is posenc's BOS marker."""

    description = "n symbols out of 8; y = x, then BOS"
    vocab_size = FIRST_SYMBOL + 8
    chance = 1 / 8

    def example(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(0, 8, (n,), generator=generator) + FIRST_SYMBOL
        return x, torch.cat([x, torch.tensor([1])])


__all__ = [
    "ClaimsScaling",
    "DroppedKeyPair",
    "DroppedPair",
    "IgnoresLayout",
    "LengthTurn",
    "MarkerTask",
    "NaNOutput",
    "NaNRoPE",
    "NaNTurn",
    "NoReference",
    "PerHeadTurn",
    "PlainTurn",
    "QueryTerm",
]
