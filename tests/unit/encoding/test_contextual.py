"""CoPE against its NumPy reference, plus the properties of contextual positions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.reference import contextual as ref

H, D = 2, 8


def make(dtype=torch.float64, **config) -> posenc.PositionalEncoding:
    """CoPE with random (not the paper's zero) embeddings, so every test sees z != 0."""
    torch.manual_seed(0)
    enc = posenc.build("cope", head_dim=D, **config).to(dtype)
    with torch.no_grad():
        enc.pos_emb.normal_()
    return enc


def inputs(b: int, i: int, j: int, dtype=torch.float64, seed: int = 0, scale: float = 1.0, causal=True):
    """q, k and the logits attention would pass: q.k/sqrt(d), -inf where masked."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, i, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(b, H, j, D, generator=g, dtype=torch.float64).to(dtype)
    logits = scale * (q @ k.transpose(-1, -2)) / math.sqrt(D)
    if causal:  # queries are the last i of j keys
        mask = torch.arange(j)[None, :] <= torch.arange(j - i, j)[:, None]
        logits = logits.masked_fill(~mask, float("-inf"))
    return q, k, logits


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scale_position_logits", [False, True])
@pytest.mark.parametrize("npos_max", [64, 3])  # 3 exercises the clamp
def test_cope_matches_reference(dtype, causal, scale_position_logits, npos_max):
    enc = make(dtype, npos_max=npos_max, scale_position_logits=scale_position_logits)
    q, k, logits = inputs(3, 5, 7, dtype, scale=3.0, causal=causal)
    got = enc.scores(q, k, logits)
    want = ref.cope_scores(
        q.double().numpy(),
        logits.double().numpy(),
        enc.pos_emb.detach().double().numpy(),
        npos_max,
        scale_position_logits,
    )
    assert got.dtype == dtype
    torch.testing.assert_close(got, torch.from_numpy(want).to(dtype), **tol(dtype))
    assert torch.equal(torch.isinf(got), torch.isinf(logits))  # -inf stays exactly where masked


def test_cope_with_a_padding_mask_matches_reference():
    enc = make()
    q, k, logits = inputs(2, 6, 6)
    padding = torch.tensor([[False, False, True, True, True, True], [True] * 6])  # left padding, row 0
    logits = logits.masked_fill(~padding[:, None, None, :], float("-inf"))
    got = enc.scores(q, k, logits)
    want = ref.cope_scores(q.numpy(), logits.numpy(), enc.pos_emb.detach().numpy(), 64)
    torch.testing.assert_close(got, torch.from_numpy(want), **tol(torch.float64))
    # padded keys count nothing: row 0's positions equal those of the unpadded tail alone
    tail = enc.positions(logits[:1, :, 2:, 2:])
    torch.testing.assert_close(enc.positions(logits)[:1, :, 2:, 2:], tail, **tol(torch.float64))


@given(n=st.integers(1, 9), seed=st.integers(0, 2**16), scale=st.floats(0.1, 30.0))
def test_cope_positions_monotone_and_bounded(n, seed, scale):
    """p_ij = sum_{t=j..i} g_it with 0 <= g <= 1: non-increasing in j, in [0, i-j+1], 0 if masked."""
    enc = make(npos_max=1000)
    _, _, logits = inputs(2, n, n, seed=seed, scale=scale)
    p = enc.positions(logits)  # (b, h, i, j)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    visible = j <= i
    assert (p[..., ~visible] == 0).all()
    assert (p >= 0).all()
    assert (p <= (i - j + 1).clamp(min=0)).all()
    step = p[..., 1:] - p[..., :-1]  # p_{i,j+1} - p_ij = -g_ij <= 0
    assert (step <= 1e-12).all()
    np.testing.assert_allclose(p.numpy(), ref.cope_positions(logits.numpy(), 1000), rtol=1e-12, atol=1e-12)


def test_cope_with_all_gates_open_is_a_relative_encoding():
    """If every visible gate is 1, p_ij = i - j + 1 exactly and z_ij = q_i . e[i - j + 1]."""
    enc = make()
    q, k, _ = inputs(1, 5, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    logits = torch.full((1, H, 5, 5), 50.0, dtype=torch.float64).masked_fill(
        ~causal, float("-inf")
    )  # sigmoid(50) == 1.0
    z = enc.scores(q, k, logits) - logits
    distance = torch.arange(5)[:, None] - torch.arange(5)[None, :]
    e = enc.pos_emb.detach()[(distance + 1).clamp(min=0)]  # (i, j, d)
    want = torch.einsum("bhid,ijd->bhij", q, e)
    torch.testing.assert_close(z[..., causal], want[..., causal], **tol(torch.float64))


def test_cope_default_starts_as_nope_and_still_learns():
    """The paper's zero init: z = 0 at first, but e gets a gradient."""
    enc = posenc.build("cope", head_dim=D)
    q, k, logits = inputs(1, 4, 4, torch.float32)
    out = enc.scores(q, k, logits)
    torch.testing.assert_close(out, logits, rtol=0, atol=0)
    torch.softmax(out, -1)[..., 0].sum().backward()
    assert enc.pos_emb.grad.abs().sum() > 0


def test_cope_gradients_reach_embeddings_query_and_gates():
    enc = make(torch.float32)
    q, k, _ = inputs(2, 5, 5, torch.float32, scale=1.0)
    q.requires_grad_(True)
    k.requires_grad_(True)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    logits = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(~causal, float("-inf"))
    out = enc.scores(q, k, logits)
    loss = torch.softmax(out, -1)[..., 0].sum()
    loss.backward()
    assert enc.pos_emb.grad.abs().sum() > 0
    assert q.grad.abs().sum() > 0 and not torch.isnan(q.grad).any()
    # k influences the output only through the logits and hence the gates
    assert k.grad.abs().sum() > 0 and not torch.isnan(k.grad).any()


def test_cope_gradcheck_through_the_gates():
    """Finite differences agree with autograd for q, logits (via the gates) and e."""
    enc = make(npos_max=6)  # few rows: gradcheck perturbs every entry of e
    q, _, logits = inputs(1, 4, 4, scale=2.0)
    e = enc.pos_emb.detach().clone()

    def fn(q, logits, e):
        with torch.nn.utils.stateless._reparametrize_module(enc, {"pos_emb": e}):
            out = enc.scores(q, q, logits)
        return out.masked_fill(torch.isinf(out), 0.0)

    args = (q.requires_grad_(True), logits.requires_grad_(True), e.requires_grad_(True))
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6)
    # and the gates do carry gradient: d out_ij / d logits_it != 0 for some t != j
    out = fn(*args)
    (grad,) = torch.autograd.grad(out[0, 0, 3, 0], logits)
    assert grad[0, 0, 3, 1:].abs().sum() > 0


def test_cope_kv_cache_step_equals_last_row_of_full():
    """Positions ignore absolute indices: the new query's logits over all cached keys suffice."""
    enc = make()
    q, k, logits = inputs(2, 6, 6)
    full = enc.scores(q, k, logits)
    step = enc.scores(q[:, :, -1:], k, logits[:, :, -1:])
    torch.testing.assert_close(step, full[:, :, -1:], **tol(torch.float64))


def test_cope_low_precision_counts_in_float32():
    """bf16 cannot represent 257; the positions are computed in float32 regardless."""
    enc = make(torch.bfloat16, npos_max=1000)
    logits = torch.full((1, 1, 1, 300), 50.0, dtype=torch.bfloat16)
    p = enc.positions(logits)
    assert p.dtype == torch.float32
    torch.testing.assert_close(p[0, 0, 0], torch.arange(300, 0, -1, dtype=torch.float32), rtol=0, atol=0)


def test_cope_bad_inputs_name_the_parameter():
    enc = make()
    q, k, logits = inputs(2, 4, 5)
    with pytest.raises(ValueError, match="logits"):
        enc.scores(q, k, logits[..., :4])
    with pytest.raises(ValueError, match="head_dim"):
        enc.scores(q[..., :4], k[..., :4], logits)
    with pytest.raises(TypeError, match="logits"):
        enc.scores(q, k, logits.long())
    with pytest.raises(ValueError, match="npos_max"):
        posenc.build("cope", head_dim=D, npos_max=0)
