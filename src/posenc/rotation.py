"""The plain rotation of feature pairs: the maths RoPE and xPos share, in plain PyTorch.

Axis legend: n positions, d head_dim, r rotary_dim (the leading block that is
rotated), r/2 pairs.

A leaf module: both :mod:`posenc.rotary` (the encodings) and
:mod:`posenc.kernels.rope` (the fused kernel, whose fallback and reference this
is) import it, and it imports neither.

Pair layouts (which features form a rotated pair), named instead of implicit:

* ``"half"``        -- HF / GPT-NeoX ``rotate_half``: feature ``i`` pairs with ``i + r/2``.
* ``"interleaved"`` -- Meta / GPT-J: feature ``2i`` pairs with ``2i + 1``.
"""

from __future__ import annotations

import torch

LAYOUTS = ("half", "interleaved")


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str, rotary_dim: int
) -> torch.Tensor:
    """Rotate the leading ``rotary_dim`` features of ``x`` pair by pair; pass the rest through.

    For each pair ``(x1, x2)`` with angle ``a``:
    ``(x1, x2) -> (x1 cos a - x2 sin a, x1 sin a + x2 cos a)``.

    Args:
        x: ``(..., n, d)``.
        cos, sin: ``(..., n, r/2)`` broadcastable against ``x[..., :r/2]``; any
            magnitude (xPos and attention_scaling fold their factors into them).
        layout: ``"half"`` or ``"interleaved"``.
        rotary_dim: ``r``, even, ``<= d``.

    Returns:
        ``(..., n, d)`` in the dtype of the arithmetic (the caller casts).
    """
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        x1, x2 = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2 :]  # (..., n, r/2) each
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., n, r)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]  # (..., n, r/2) each
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)  # (..., n, r)
    return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out


__all__ = ["LAYOUTS", "apply_rotary"]
