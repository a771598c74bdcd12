"""FIRE's float32 C kernel (posenc.kernels.mlp_bias): its blocks and their gradient against dense attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tests.tolerances import tol

import posenc
from posenc.kernels import mlp_bias
from posenc.kernels.bias_attention import bias_attention


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


@pytest.mark.skipif(not mlp_bias.available(), reason="no C compiler: FIRE takes the generic path")
@pytest.mark.parametrize("offset", [0, 9])
def test_fire_float32_mlp_path_matches_dense(offset):
    """FIRE in float32 goes through the C kernel (its MLP per score in float32, blocks and their
    gradient); the result and every gradient equal the float64 definition's dense path.
    A threshold below the length puts rows on both sides of FIRE's normaliser switch."""
    torch.manual_seed(0)
    enc = posenc.build_for_model("fire", d_model=12, num_heads=3, init_threshold=6.0)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    i, j = 25, 25 + offset
    q, k, v = qkv(2, 3, i, j, dtype=torch.float32)
    params = [q, k, v, *enc.parameters()]
    g = randn(2, 3, i, 4, seed=4, dtype=torch.float32)
    qp, kp = torch.arange(offset, j)[None], torch.arange(j)[None]
    out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=6)
    ref = dense_reference(q, k, v, enc, causal=True, qp=qp, kp=kp)
    torch.testing.assert_close(out, ref, **tol(torch.float32))
    for a, c in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
