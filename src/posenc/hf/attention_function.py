"""Bias encodings inside a transformers model: the attention function ``"posenc"``.

transformers looks an attention function up by name in ``AttentionInterface`` (its public
registry for this purpose); :func:`register` adds :func:`attention` as ``"posenc"``, with a mask
function that always gives the boolean mask (transformers skips the mask where SDPA's causal flag
would do, but a bias needs it). :func:`posenc.hf.apply` switches a model to it when a layer has a
bias encoding; layers without one run transformers' own SDPA function.

Axis legend: b batch, h query heads, g key/value heads (``h = g * groups``), i queries,
j keys (cache included), d head_dim.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from posenc.core.errors import PosencError
from posenc.kernels.bias_attention import bias_attention, repeat_kv

ATTENTION = "posenc"  # the name posenc registers in transformers' AttentionInterface


# ---------------------------------------------------------------------------


def _key_positions(q_pos: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Keys end at the last query: ``k_pos = q_pos[:, -1:] - (j - 1) + arange(j)``, clamped at 0
    (negative only for left padding, which the mask removes)."""
    steps = torch.arange(num_keys, device=q_pos.device)
    return (q_pos[:, -1:] - (num_keys - 1) + steps).clamp(min=0)


def attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; ``query (b, h, i, d)``, ``key/value (b, g, j, d)``.

    Returns ``(out (b, i, h, d), None)`` as transformers' functions do.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # the optional peer

    enc = getattr(module, "posenc_encoding", None)
    if enc is None or enc.kind != "bias":
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if kwargs.get("softcap") is not None:
        raise PosencError("posenc's bias attention does not implement logit soft-capping (Gemma 2)")
    b, h, i, d = query.shape
    j, groups = key.shape[2], h // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)  # grouped-query: as posenc's attention
    if scaling is not None and not math.isclose(scaling, d**-0.5, rel_tol=1e-12):
        query = query * (scaling * math.sqrt(d))  # posenc's kernel scales by 1/sqrt(d)
    position_ids = kwargs.get("position_ids")
    q_pos = position_ids if isinstance(position_ids, torch.Tensor) else None
    if q_pos is None or q_pos.shape[-1] != i:
        q_pos = torch.arange(j - i, j, device=query.device)[None]
    k_pos = _key_positions(q_pos, j)
    allowed = None
    if attention_mask is not None:
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask > -1e30
    row_ok = None
    if allowed is not None:
        row_ok = allowed.any(dim=-1, keepdim=True)  # (b, 1, i, 1): padded queries see nothing
        allowed = allowed | ~row_ok  # let them attend everywhere, zeroed below
    out = bias_attention(
        query, key, value, enc, q_positions=q_pos, k_positions=k_pos, allowed=allowed,
        causal=allowed is None and getattr(module, "is_causal", True) and i > 1,
        dropout=dropout if module.training else 0.0,
    )  # fmt: skip
    if row_ok is not None:
        out = out * row_ok.to(out.dtype)
    return out.transpose(1, 2).contiguous(), None


def _boolean_mask(*args: Any, **kwargs: Any):
    """transformers' SDPA mask, never skipped: bias attention needs the mask it would drop."""
    from transformers.masking_utils import sdpa_mask

    for name in ("allow_is_causal_skip", "allow_is_bidirectional_skip"):
        if name in inspect.signature(sdpa_mask).parameters:
            kwargs[name] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Register :func:`attention` as ``"posenc"`` (transformers' own registry for this purpose)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, _boolean_mask)


__all__ = ["ATTENTION", "attention", "register"]
