"""What the bias-attention kernel tests share: seeded inputs, dense SDPA with the encoding's own
float64 bias as the reference, and the blocked path's plain products forced on the CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc.kernels import blocked


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def dense_reference(q, k, v, enc, *, causal, qp=None, kp=None, allowed=None):
    """SDPA with the encoding's full float64 bias (its own definition, bias_fn)."""
    i, j = q.shape[2], k.shape[2]
    qpos = torch.arange(i)[None] if qp is None else qp
    kpos = torch.arange(j)[None] if kp is None else kp
    heads = torch.arange(enc.num_heads)[None, :, None, None]
    bias = enc.bias_fn(qpos[:, None, :, None], kpos[:, None, None, :], heads)
    bias = bias.to(enc.bias(1, 1).dtype).to(q.dtype)  # rounded as the encoding's dense bias
    if causal:
        bias = bias.masked_fill(torch.ones(i, j, dtype=torch.bool).triu(j - i + 1), float("-inf"))
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def qkv(b, h, i, j, d=4, dtype=torch.float64, grad=True):
    return tuple(
        randn(b, h, n, d, seed=s, dtype=dtype).requires_grad_(grad) for s, n in ((1, i), (2, j), (3, j))
    )


def plain_blocks(monkeypatch) -> None:
    """The blocked path's plain matrix products (what every device but the CPU runs), on the CPU."""
    monkeypatch.setattr(blocked, "FLASH_DEVICES", frozenset())
