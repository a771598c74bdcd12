"""FIRE's float32 C kernel (posenc.kernels.mlp_bias): its blocks and their gradient against dense attention."""

from __future__ import annotations

import pytest
import torch
from tests.bias_kernels import dense_reference, qkv, randn
from tests.tolerances import tol

import posenc
from posenc.kernels import mlp_bias
from posenc.kernels.bias_attention import bias_attention


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
