"""Shaw et al. 2018 and Transformer-XL against their NumPy references, plus the maths they promise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.reference import relative as ref

H, D = 2, 8


def make(name: str, dtype=torch.float64, **config) -> posenc.PositionalEncoding:
    torch.manual_seed(0)
    return posenc.build(name, head_dim=D, num_heads=H, **config).to(dtype)


def qk(b: int, i: int, j: int, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, i, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(b, H, j, D, generator=g, dtype=torch.float64).to(dtype)
    return q, k


def random_positions(b: int, n: int, high: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (b, n), generator=g)


# Positions worth checking: arange, a KV-cache offset (queries are the last keys),
# per-row offsets, unsorted sparse positions (Transformer-XL's direct branch).
POSITION_CASES = {
    "arange": (None, None, 5, 5),
    "cache_offset": (torch.arange(4, 7)[None], torch.arange(7)[None], 3, 7),
    "per_row": (torch.arange(6)[None] + torch.tensor([[0], [9], [40]]), None, 6, 6),
    "per_row_self": (torch.arange(6)[None] + torch.tensor([[0], [9], [40]]),) * 2 + (6, 6),
    "gap": (torch.tensor([[0, 1000, 2000]]), torch.tensor([[0, 1000, 2000]]), 3, 3),  # 5 distances
    "sparse": (random_positions(3, 5, 500, 1), random_positions(3, 6, 500, 2), 5, 6),
}


def np_positions(p: torch.Tensor | None, b: int, n: int) -> np.ndarray:
    return np.broadcast_to(np.arange(n) if p is None else p.numpy(), (b, n))


# ---------------------------------------------------------------------------
# Shaw
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(POSITION_CASES))
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_shaw_matches_reference(case, shared, dtype):
    qpos, kpos, i, j = POSITION_CASES[case]
    b = 3
    enc = make("shaw", dtype, max_relative_distance=2, shared_across_heads=shared)
    q, k = qk(b, i, j, dtype)
    g = torch.Generator().manual_seed(5)
    probs = torch.softmax(torch.randn(b, H, i, j, generator=g, dtype=torch.float64), -1).to(dtype)
    scores = enc.scores(q, k, q_positions=qpos, k_positions=kpos)
    values = enc.values(probs, q_positions=qpos, k_positions=kpos)
    qp, kp = np_positions(qpos, b, i), np_positions(kpos, b, j)
    key_table = enc.key_table.detach().double().numpy()
    value_table = enc.value_table.detach().double().numpy()
    want_s = ref.shaw_scores(q.double().numpy(), qp, kp, key_table, 2)
    want_v = ref.shaw_values(probs.double().numpy(), qp, kp, value_table, 2)
    assert scores.dtype == values.dtype == dtype
    torch.testing.assert_close(scores, torch.from_numpy(want_s).to(dtype), **tol(dtype))
    torch.testing.assert_close(values, torch.from_numpy(want_v).to(dtype), **tol(dtype))


@given(
    offset=st.integers(0, 10_000),
    n=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    name=st.sampled_from(["shaw", "transformer_xl"]),
)
def test_scores_invariant_to_shifting_both_positions(offset, n, seed, name):
    enc = make(name)
    q, k = qk(2, n, n + 1, seed=seed)
    qp = random_positions(2, n, 50, seed)
    kp = random_positions(2, n + 1, 50, seed + 1)
    a = enc.scores(q, k, q_positions=qp, k_positions=kp)
    b = enc.scores(q, k, q_positions=qp + offset, k_positions=kp + offset)
    torch.testing.assert_close(a, b, **tol(torch.float64))
    if name == "shaw":
        probs = torch.softmax(a, dim=-1)
        va = enc.values(probs, q_positions=qp, k_positions=kp)
        vb = enc.values(probs, q_positions=qp + offset, k_positions=kp + offset)
        torch.testing.assert_close(va, vb, **tol(torch.float64))


@given(max_distance=st.integers(0, 5), beyond=st.integers(0, 1000), seed=st.integers(0, 2**16))
def test_shaw_clips_distances_beyond_k(max_distance, beyond, seed):
    """Every key further than k (either side) scores like the key at exactly +-k."""
    enc = make("shaw", max_relative_distance=max_distance)
    q, k = qk(1, 1, 1, seed=seed)
    qp = torch.tensor([[2000]])

    def score(distance: int) -> torch.Tensor:
        return enc.scores(q, k, q_positions=qp, k_positions=qp + distance)

    for sign in (1, -1):
        edge = score(sign * max_distance)
        torch.testing.assert_close(score(sign * (max_distance + beyond)), edge, rtol=0, atol=0)
    if max_distance > 0:  # and the table really distinguishes the inside
        assert not torch.equal(score(max_distance), score(max_distance - 1))


def test_shaw_without_values_and_config_errors():
    enc = make("shaw", values=False)
    assert not enc.has_values and enc.value_table is None
    assert enc.values(torch.rand(1, H, 3, 3)) is None
    with pytest.raises(ValueError, match="max_relative_distance"):
        posenc.build("shaw", head_dim=D, num_heads=H, max_relative_distance=-1)
    with pytest.raises(TypeError, match="values"):
        posenc.build("shaw", head_dim=D, num_heads=H, values="yes")


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_bad_inputs_name_the_parameter(name):
    enc = make(name)
    q, k = qk(2, 4, 5)
    with pytest.raises(ValueError, match="q_positions"):
        enc.scores(q, k, q_positions=torch.arange(5)[None])
    with pytest.raises(ValueError, match="k_positions"):
        enc.scores(q, k, k_positions=torch.arange(4)[None])
    with pytest.raises(ValueError, match="k_positions"):
        enc.scores(q, k, k_positions=torch.arange(5).expand(3, 5))
    with pytest.raises(ValueError, match="q_positions"):
        enc.scores(q, k, q_positions=-torch.arange(4)[None])
    with pytest.raises(TypeError, match="q_positions"):
        enc.scores(q, k, q_positions=torch.arange(4.0)[None])
    with pytest.raises(ValueError, match="head_dim"):
        enc.scores(q[..., :4], k[..., :4])
    with pytest.raises(ValueError, match="num_heads"):
        enc.scores(q[:, :1], k[:, :1])
    with pytest.raises(ValueError, match="k must have shape"):
        enc.scores(q, k[:1])


# ---------------------------------------------------------------------------
# Transformer-XL
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(POSITION_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_transformer_xl_matches_reference(case, dtype):
    qpos, kpos, i, j = POSITION_CASES[case]
    b = 3
    enc = make("transformer_xl", dtype)
    with torch.no_grad():  # make u and v large enough that terms (c) and (d) matter
        enc.u.normal_()
        enc.v.normal_()
        enc.w_r.normal_(std=0.3)
    q, k = qk(b, i, j, dtype)
    got = enc.scores(q, k, q_positions=qpos, k_positions=kpos)
    want = ref.transformer_xl_scores(
        q.double().numpy(),
        k.double().numpy(),
        np_positions(qpos, b, i),
        np_positions(kpos, b, j),
        enc.u.detach().double().numpy(),
        enc.v.detach().double().numpy(),
        enc.w_r.detach().double().numpy(),
    )
    assert got.dtype == dtype
    torch.testing.assert_close(got, torch.from_numpy(want).to(dtype), **tol(dtype))


def test_transformer_xl_equals_the_papers_relative_shift():
    """Independent check of the gather: the paper's pad-reshape-slice shift on contiguous positions.

    Queries are the last ``i`` of ``j`` keys (memory + segment); the paper scores each
    query against ``R_{j-1}, ..., R_0`` and shifts row ``r`` left by ``i - 1 - r``.
    """
    i, j = 4, 7
    enc = make("transformer_xl")
    with torch.no_grad():
        enc.v.normal_()
    q, k = qk(2, i, j)
    distances = torch.arange(j - 1, -1, -1)  # R_{j-1} .. R_0
    p = enc.sinusoid(distances) @ enc.w_r.detach().transpose(-1, -2)  # (h, j, d)
    bd = (q + enc.v.detach()[None, :, None, :]) @ p.transpose(-1, -2)[None]  # (b, h, i, j)
    padded = torch.cat([bd.new_zeros(2, H, i, 1), bd], dim=-1)  # (b, h, i, j+1)
    shifted = padded.view(2, H, j + 1, i)[:, :, 1:].reshape(2, H, i, j)  # the paper's _rel_shift
    keep = torch.arange(j)[None, :] <= torch.arange(j - i, j)[:, None]  # causal: only these are valid
    content = (enc.u.detach()[None, :, None, :] * k).sum(-1)[:, :, None, :]
    got = enc.scores(q, k, q_positions=torch.arange(j - i, j)[None])
    torch.testing.assert_close(got[..., keep], (shifted + content)[..., keep], **tol(torch.float64))


def test_transformer_xl_sinusoid_is_float64_exact_and_matches_reference():
    enc = make("transformer_xl")
    distance = torch.tensor([-70_000, -3, 0, 5, 8191, 100_000])  # beyond the cache on both sides
    want = ref.transformer_xl_sinusoid(distance.numpy(), H * D)
    torch.testing.assert_close(enc.sinusoid(distance), torch.from_numpy(want), **tol(torch.float64))
    assert enc.sinusoid(distance).shape == (6, H * D)  # default rel_dim = num_heads * head_dim
    assert make("transformer_xl", rel_dim=6).sinusoid(distance).shape == (6, 6)
    with pytest.raises(ValueError, match="rel_dim"):
        posenc.build("transformer_xl", head_dim=D, num_heads=H, rel_dim=5)


# ---------------------------------------------------------------------------
# Both
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_gradients_reach_every_parameter_and_input(name):
    enc = make(name, torch.float32)
    q, k = qk(2, 5, 5, torch.float32)
    q.requires_grad_(True)
    k.requires_grad_(True)
    s = enc.scores(q, k)
    loss = (s * torch.randn_like(s)).sum()
    if enc.has_values:
        loss = loss + enc.values(torch.softmax(s, -1)).square().sum()
    loss.backward()
    for pname, param in enc.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, pname
    assert q.grad.abs().sum() > 0
    if name == "transformer_xl":  # only term (c) u.k_j involves k
        assert k.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_kv_cache_step_equals_last_row_of_full(name):
    enc = make(name)
    q, k = qk(2, 6, 6)
    full = enc.scores(q, k)
    step = enc.scores(q[:, :, -1:], k, q_positions=torch.tensor([[5]]))
    torch.testing.assert_close(step, full[:, :, -1:], **tol(torch.float64))


@pytest.mark.peers
@pytest.mark.parametrize("qlen, mlen", [(5, 0), (3, 4)])
def test_transformer_xl_matches_xlnet_relative_attention(qlen, mlen):
    """Cross-check against HF transformers' XLNet, which uses Transformer-XL's scores.

    XLNet: ``ac = (q + r_w_bias) . k``, ``bd = rel_shift((q + r_r_bias) . W_R R)`` with
    ``R`` of size d_model, ``[sin | cos]``, ``W_R = r (d_model, h, d)``. So ``ac + bd`` must
    equal ``q.k + scores`` with ``u = r_w_bias``, ``v = r_r_bias``, ``w_r = r`` permuted.
    ``mlen`` memory tokens precede the ``qlen`` queries.
    """
    modeling = pytest.importorskip("transformers.models.xlnet.modeling_xlnet")
    from types import SimpleNamespace

    from transformers import XLNetConfig

    klen, b = qlen + mlen, 2
    config = XLNetConfig(d_model=H * D, n_head=H, d_head=D, n_layer=1, vocab_size=8)
    attn = modeling.XLNetRelativeAttention(config).double()
    torch.manual_seed(3)
    with torch.no_grad():
        for param in attn.parameters():
            param.normal_()
    model_like = SimpleNamespace(  # just what relative_positional_encoding reads
        d_model=H * D,
        attn_type="bi",
        bi_data=False,
        clamp_len=-1,
        positional_embedding=modeling.XLNetModel.positional_embedding,
    )
    r = modeling.XLNetModel.relative_positional_encoding(model_like, qlen, klen, bsz=b).double()
    hidden = torch.randn(klen, b, H * D, dtype=torch.float64)  # (j, b, D): memory then segment
    q_head = torch.einsum("ibh,hnd->ibnd", hidden[mlen:], attn.q)
    k_head = torch.einsum("ibh,hnd->ibnd", hidden, attn.k)
    k_head_r = torch.einsum("ibh,hnd->ibnd", r, attn.r)
    with torch.no_grad():
        ac = torch.einsum("ibnd,jbnd->bnij", q_head + attn.r_w_bias, k_head)
        bd = attn.rel_shift_bnij(torch.einsum("ibnd,jbnd->bnij", q_head + attn.r_r_bias, k_head_r), klen=klen)
        enc = make("transformer_xl")
        enc.u.copy_(attn.r_w_bias)
        enc.v.copy_(attn.r_r_bias)
        enc.w_r.copy_(attn.r.permute(1, 2, 0))  # (D, h, d) -> (h, d, r)
        q = q_head.permute(1, 2, 0, 3)  # (b, h, i, d)
        k = k_head.permute(1, 2, 0, 3)
        ours = q @ k.transpose(-1, -2) + enc.scores(q, k, q_positions=torch.arange(mlen, klen)[None])
    torch.testing.assert_close(ours, ac + bd, rtol=1e-5, atol=1e-4)  # XLNet builds R in float32
