"""The plain rotation of feature pairs: the maths RoPE and xPos share, in plain PyTorch.

Axis legend: n positions, d head_dim, r rotary_dim (the leading block that is
rotated), r/2 pairs.

A leaf module: both :mod:`posenc.encoding.rotary.rope` (the encodings) and
:mod:`posenc.kernels.fused_rope` (the fused kernel, whose fallback and reference this
is) import it, and it imports neither.

Pair layouts (which features form a rotated pair), named instead of implicit:

* ``"half"``        -- HF / GPT-NeoX ``rotate_half``: feature ``i`` pairs with ``i + r/2``.
* ``"interleaved"`` -- Meta / GPT-J: feature ``2i`` pairs with ``2i + 1``.

:func:`permute_qk_weight` moves a model's q/k projections from one layout to the other.
"""

from __future__ import annotations

import torch

from posenc.core.checks import check_choice, check_int, check_tensor
from posenc.core.errors import PosencError

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


# ---------------------------------------------------------------------------
# Layout conversion.
# ---------------------------------------------------------------------------


def layout_permutation(head_dim: int, *, src: str, dst: str, rotary_dim: int | None = None) -> torch.Tensor:
    """Index ``perm`` (d,) with ``x_dst = x_src[..., perm]`` for one head's features.

    Features past ``rotary_dim`` are not rotated and keep their place.
    """
    head_dim = check_int("head_dim", head_dim, minimum=2, even=True)
    r = check_int(
        "rotary_dim",
        rotary_dim if rotary_dim is not None else head_dim,
        minimum=2,
        maximum=head_dim,
        even=True,
    )
    check_choice("src", src, LAYOUTS)
    check_choice("dst", dst, LAYOUTS)
    half = torch.arange(r // 2)
    if src == dst:
        block = torch.arange(r)
    elif src == "interleaved":  # half slot p < r/2 holds pair p's first (2p), p >= r/2 its second
        block = torch.cat((2 * half, 2 * half + 1))
    else:  # interleaved slot 2p holds half slot p, slot 2p+1 holds p + r/2
        block = torch.stack((half, half + r // 2), dim=-1).flatten()
    return torch.cat((block, torch.arange(r, head_dim)))


def permute_qk_weight(
    weight: torch.Tensor,
    num_heads: int,
    head_dim: int,
    *,
    src: str,
    dst: str,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Permute q/k projection rows so a model moves from layout ``src`` to ``dst`` unchanged.

    Rotating ``P q`` in the ``dst`` layout equals ``P`` applied to rotating ``q`` in the
    ``src`` layout, and ``P`` is the same permutation for q and k, so ``q . k`` (hence
    the attention output) is identical. Apply it to W_q and W_k (and their biases),
    never to W_v / W_o.

    Args:
        weight: ``(num_heads * head_dim, d_in)`` or a bias ``(num_heads * head_dim,)``.
        num_heads, head_dim: how the rows split into heads.
        src, dst: ``"half"`` or ``"interleaved"``.
        rotary_dim: rotated leading block per head (default: all of it).

    Returns:
        A new tensor of the same shape.
    """
    weight = check_tensor("weight", weight, ndim=(1, 2))
    num_heads = check_int("num_heads", num_heads, minimum=1)
    head_dim = check_int("head_dim", head_dim, minimum=2, even=True)
    if weight.shape[0] != num_heads * head_dim:
        raise PosencError(
            f"weight has {weight.shape[0]} rows but num_heads * head_dim = {num_heads * head_dim}"
        )
    perm = layout_permutation(head_dim, src=src, dst=dst, rotary_dim=rotary_dim).to(weight.device)
    per_head = weight.reshape(num_heads, head_dim, *weight.shape[1:])  # (h, d, d_in?)
    return per_head[:, perm].reshape(weight.shape)


__all__ = ["LAYOUTS", "apply_rotary", "layout_permutation", "permute_qk_weight"]
