"""The blocked backward (posenc.kernels.blocked): the score gradient reduced into the bias's own parameters, against dense attention's."""

from __future__ import annotations

import pytest
import torch
from tests.bias_kernels import dense_reference, plain_blocks, qkv, randn
from tests.tolerances import tol

import posenc
from posenc.kernels import blocked
from posenc.kernels.bias_attention import bias_attention
from posenc.registry import ENCODINGS

BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]


@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_toeplitz_blocks_pass_gradcheck(flash, monkeypatch):
    """Float64 gradcheck of the custom backward (q, k, v and the per-distance table) over
    uneven causal row blocks with a KV-cache offset."""
    if not flash:
        plain_blocks(monkeypatch)
    i, j, h = 5, 7, 2
    q, k, v = qkv(1, h, i, j, d=3)
    table = randn(h, i + j - 1, seed=8).requires_grad_()
    blocks = blocked.blocks_for(i, j, 2, causal=True)
    masked = j - 1 - (j - i)

    def attend(q, k, v, table):
        causal = torch.cat((table.new_full((h, masked), float("-inf")), table[:, masked:]), -1)
        return blocked.blocked_attention(q, k, v, "toeplitz", (causal,), blocks=blocks)

    assert torch.autograd.gradcheck(attend, (q, k, v, table))


@pytest.mark.parametrize("name", ["t5", "kerple_log", "alibi"])
@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_trainable_bias_gradients_reach_the_parameters_in_float32(name, flash, monkeypatch):
    """The per-distance reduction gives the parameters the dense path's gradients (full tensors)."""
    if not flash:
        plain_blocks(monkeypatch)
    torch.manual_seed(1)
    enc = posenc.build_for_model(name, d_model=12, num_heads=3)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    q, k, v = qkv(2, 3, 30, 30, dtype=torch.float32)
    params = [q, k, v, *enc.parameters()]
    g = randn(2, 3, 30, 4, seed=4, dtype=torch.float32)
    out = bias_attention(q, k, v, enc, causal=True, chunk=7)
    ref = dense_reference(q, k, v, enc, causal=True)
    torch.testing.assert_close(out, ref, **tol(torch.float32))
    for a, c in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("offset", [0, 6])
@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_t5_band_backward_equals_dense(offset, flash, monkeypatch):
    """Causal T5 is one parameter per head past max_distance: the backward forms the score
    gradient on that band of diagonals only, and the far bucket's gradient from each softmax
    row summing to zero. Float64, a KV-cache offset, blocks narrower and wider than the band."""
    if not flash:
        plain_blocks(monkeypatch)
    torch.manual_seed(2)
    enc = posenc.build_for_model("t5", d_model=12, num_heads=3, num_buckets=8, max_distance=5).double()
    assert enc.constant_beyond() == 5
    with torch.no_grad():
        enc.table.add_(0.5 * torch.randn_like(enc.table))
    i, j = 23, 23 + offset
    q, k, v = qkv(2, 3, i, j)
    params = [q, k, v, enc.table]
    g = randn(2, 3, i, 4, seed=4)
    qp, kp = torch.arange(offset, j)[None], torch.arange(j)[None]
    ref = dense_reference(q, k, v, enc, causal=True, qp=qp, kp=kp)
    expected = torch.autograd.grad(ref, params, g)
    for chunk in (3, 9):
        out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=chunk)
        torch.testing.assert_close(out, ref, **tol(torch.float64))
        for a, c in zip(torch.autograd.grad(out, params, g), expected):
            torch.testing.assert_close(a, c, **tol(torch.float64))
