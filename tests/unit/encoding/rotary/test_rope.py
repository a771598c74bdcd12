"""RoPE and xPos: against the NumPy rotation-matrix reference, properties, numerics, errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.encoding.rotary.rope import apply_rotary, layout_permutation, permute_qk_weight
from posenc.reference import rotary as ref

LAYOUTS = ("half", "interleaved")
# (config overrides, rotated block size for head_dim 8)
PARTIAL = [({}, 8), ({"rotary_dim": 4}, 4), ({"partial_rotary_factor": 0.5}, 4), ({"rotary_dim": 2}, 2)]


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def qk_case(dtype=torch.float64, d=8):
    """q (2,3,5,d) and k (2,3,7,d) with separate positions: q per row (b, i), k shared (1, j)."""
    q, k = randn(2, 3, 5, d, seed=1, dtype=dtype), randn(2, 3, 7, d, seed=2, dtype=dtype)
    qp = torch.tensor([[10, 11, 12, 13, 14], [0, 1, 2, 3, 4000]])  # right-aligned / arbitrary
    kp = torch.tensor([[0, 2, 5, 9, 14, 99, 1234]])
    return q, k, qp, kp


def np64(x):
    return x.detach().to(torch.float64).numpy()


def rope_ref(x, pos, **kw):
    return torch.from_numpy(ref.rope(np64(x), pos.numpy()[:, None, :], **kw))


def xpos_ref(x, pos, *, key, **kw):
    return torch.from_numpy(ref.xpos(np64(x), pos.numpy()[:, None, :], key=key, **kw))


# ---------------------------------------------------------------------------
# Against the reference, full tensors.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("overrides,r", PARTIAL)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_rope_matches_reference(layout, overrides, r, dtype):
    enc = posenc.build("rope", head_dim=8, layout=layout, **overrides)
    assert enc.rotary_dim == r
    q, k, qp, kp = qk_case(dtype)
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    assert qo.dtype == ko.dtype == dtype and qo.shape == q.shape and ko.shape == k.shape
    torch.testing.assert_close(qo.double(), rope_ref(q, qp, layout=layout, rotary_dim=r), **tol(dtype))
    torch.testing.assert_close(ko.double(), rope_ref(k, kp, layout=layout, rotary_dim=r), **tol(dtype))
    # the pass-through block is bit-identical
    torch.testing.assert_close(qo[..., r:], q[..., r:], rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("center", [0, 150])
def test_xpos_matches_reference(layout, dtype, center):
    kw = dict(layout=layout, scale_base=64.0, scale_center=center)
    enc = posenc.build("xpos", head_dim=8, **kw)
    q, k, qp, kp = qk_case(dtype)
    qp = qp.clamp(max=300)
    kp = kp.clamp(max=300)
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    assert qo.dtype == ko.dtype == dtype
    torch.testing.assert_close(qo.double(), xpos_ref(q, qp, key=False, **kw), **tol(dtype))
    torch.testing.assert_close(ko.double(), xpos_ref(k, kp, key=True, **kw), **tol(dtype))


def test_xpos_is_rope_times_reciprocal_decay():
    """The key's factor is the reciprocal of the query's at the same position; zeta as the paper."""
    enc = posenc.build("xpos", head_dim=8)
    pos = torch.arange(0, 2000, 7)[None]
    up, down = enc.scale(pos, torch.float64, key=False), enc.scale(pos, torch.float64, key=True)
    torch.testing.assert_close(up * down, torch.ones_like(up), **tol(torch.float64))
    zeta = torch.tensor([(2 * i / 8 + 0.4) / 1.4 for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(up, zeta ** (pos[..., None] / 512.0), **tol(torch.float64))


# ---------------------------------------------------------------------------
# Numerics: float64 angles from integer positions, cast last.
# ---------------------------------------------------------------------------


def test_bfloat16_8192_positions_give_distinct_rotations():
    enc = posenc.build("rope", head_dim=64)
    x = randn(1, 1, 1, 64, seed=3, dtype=torch.bfloat16).expand(1, 1, 8192, 64)
    pos = torch.arange(8192)[None]
    out, _ = enc.rotate(x, x, q_positions=pos, k_positions=pos)
    assert out.dtype == torch.bfloat16
    assert torch.unique(out[0, 0].float(), dim=0).shape[0] == 8192
    # Control: the same count with angles formed from bfloat16 positions collapses,
    # so this test can fail (bf16 holds integers exactly only up to 256).
    inv = (10000.0 ** (-torch.arange(0, 64, 2) / 64)).to(torch.bfloat16)
    naive = pos.to(torch.bfloat16)[0, :, None] * inv
    assert torch.unique(torch.cat((naive.cos(), naive.sin()), -1).float(), dim=0).shape[0] < 8192


def test_bfloat16_far_positions_accurate():
    enc = posenc.build("rope", head_dim=64)
    x = randn(1, 2, 12, 64, seed=4, dtype=torch.bfloat16)
    pos = torch.arange(8180, 8192)[None]
    out, _ = enc.rotate(x, x, q_positions=pos, k_positions=pos)
    torch.testing.assert_close(out.double(), rope_ref(x, pos), **tol(torch.bfloat16))


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_module_to_bfloat16_keeps_float64_tables(name):
    enc = posenc.build(name, head_dim=8).to(torch.bfloat16)
    assert list(enc.state_dict()) == []  # nothing for .to() to degrade
    q, k, qp, kp = qk_case(torch.float64)
    qo, ko = enc.rotate(q, k, q_positions=qp.clamp(max=2000), k_positions=kp.clamp(max=2000))
    if name == "rope":
        expected = rope_ref(q, qp.clamp(max=2000))
    else:
        expected = xpos_ref(q, qp.clamp(max=2000), key=False)
    torch.testing.assert_close(qo, expected, **tol(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize(
    "config",
    [
        {"layout": "half"},
        {"layout": "interleaved", "rotary_dim": 6},
        {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
    ],
)
def test_one_run_of_positions_goes_to_the_kernel_with_the_checked_paths_bits(config, dtype, monkeypatch):
    """rotate(q, k) with one run of positions for both (none: a training step; a trusted Positions
    that knows its start: attention's; a one-element tensor: a decode step) goes straight to the
    kernel; it gives the bits of the checked path (positions per token), strided inputs included,
    and every call it cannot take (other positions, "bshd", gradients, lengths that differ, dynamic
    frequencies) goes through the checked hook."""
    from posenc.core.positions import Positions
    from posenc.encoding.rotary import rope as rope_module

    enc = posenc.build("rope", head_dim=8, **config)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 3, 8, generator=g).to(dtype).transpose(1, 2)  # (2, 3, 5, 8), strided
    k = torch.randn(2, 1, 5, 8, generator=g).to(dtype)  # one key head (grouped-query)
    calls = []
    hook = rope_module.rotary_hook
    monkeypatch.setattr(rope_module, "rotary_hook", lambda *a, **kw: calls.append(a) or hook(*a, **kw))

    def checked(qq, kk, first):  # a position tensor per token, one for q and one for k: the hook
        n = qq.shape[2]
        return enc.rotate(qq, kk, q_positions=torch.arange(first, first + n)[None],
                          k_positions=torch.arange(first, first + n)[None])  # fmt: skip

    decode = torch.tensor([[7]])
    for qq, kk, positions, first in [
        (q, k, None, 0),
        (q, k, Positions.arange(5), 0),
        (q, k, Positions.arange(5, start=1000), 1000),
        (q[:, :, :1], k[:, :, :1], decode, 7),
        (q[:, :, :1], k[:, :, :1], decode[0].to(torch.int32), 7),
    ]:
        fast = enc.rotate(qq, kk, q_positions=positions, k_positions=positions)
        assert not calls, positions  # the call did not take the hook
        expected = checked(qq, kk, first)
        assert len(calls) == 1
        calls.clear()
        for a, b in zip(fast, expected):
            assert a.dtype == dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    enc.rotate(q, k[:, :, :4])  # lengths differ
    enc.rotate(q.transpose(1, 2), k.transpose(1, 2), layout="bshd")
    enc.rotate(q.detach().requires_grad_(), k)
    enc.rotate(q, k, q_positions=Positions.arange(5), k_positions=Positions.arange(5, start=1))
    enc.rotate(q[:, :, :1], k[:, :, :1], q_positions=decode, k_positions=decode.clone())  # not one tensor
    enc.rotate(q[:, :, :1], k[:, :, :1], q_positions=decode.expand(2, 1), k_positions=decode.expand(2, 1))
    assert len(calls) == 6
    dynamic = posenc.build("rope", head_dim=8, scaling={"rope_type": "dynamic", "factor": 2.0},
                           max_position_embeddings=4)  # fmt: skip
    dynamic.rotate(q.detach(), k)
    assert len(calls) == 7


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (torch.tensor([[-1]]), "q_positions must be >= 0"),
        (torch.tensor([[2**53 + 1]]), "q_positions must be <= 2**53"),
        (torch.tensor([[1.0]]), "q_positions must have an integer dtype"),
        (torch.tensor([[True]]), "q_positions must have an integer dtype"),
        (torch.tensor([[3, 4]]), "q_positions has shape (1, 2)"),
    ],
)
def test_a_decode_steps_bad_position_is_refused_by_name(positions, message):
    """A one-token call's position is read on the fast path; what it does not accept the checked
    path refuses, naming the parameter (never a wrong rotation)."""
    from posenc.core.errors import PosencError, PosencTypeError

    enc = posenc.build("rope", head_dim=8)
    q = torch.randn(1, 2, 1, 8)
    with pytest.raises((PosencError, PosencTypeError), match=re.escape(message)):
        enc.rotate(q, q, q_positions=positions, k_positions=positions)


def test_sincos_cache_rebuilt_only_when_inv_freq_changes():
    enc = posenc.build("rope", head_dim=8)
    q, k, qp, kp = qk_case()
    enc.rotate(q, k, q_positions=qp, k_positions=kp)
    first = enc._sincos
    enc.rotate(q, k, q_positions=qp, k_positions=kp)
    assert enc._sincos is first
    enc.set_scaling({"rope_type": "linear", "factor": 2.0})
    enc.rotate(q, k, q_positions=qp, k_positions=kp)
    assert enc._sincos is not first
    torch.testing.assert_close(enc._sincos.inv_freq, first.inv_freq / 2.0, **tol(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_far_positions_are_exact_in_every_dtype(dtype):
    """Position 10^6 is as exact as position 1: float32 angles would be off by ~0.03 rad there."""
    enc = posenc.build("rope", head_dim=8)
    q, k = randn(1, 1, 4, 8, seed=5, dtype=dtype), randn(1, 1, 4, 8, seed=6, dtype=dtype)
    pos = torch.tensor([[9_999, 60_001, 70_000, 1_000_000]])  # the last two past SinCosCache.max_cached
    qo, _ = enc.rotate(q, k, q_positions=pos, k_positions=pos)
    expected = rope_ref(q, pos)
    if dtype == torch.float64:  # angle m * theta in float64 carries ~m * 1e-16 rad of rounding
        torch.testing.assert_close(qo, expected, rtol=1e-9, atol=1e-9)
    else:
        torch.testing.assert_close(qo.double(), expected, **tol(dtype))


# ---------------------------------------------------------------------------
# Scalings.
# ---------------------------------------------------------------------------


def test_the_config_holds_a_typed_scaling_once_and_set_scaling_does_not_rebuild_it(monkeypatch):
    """A RoPEConfig holds its scaling as given: a typed Scaling is the field itself (and its
    parsed_scaling, nothing parsed again), equal to the dict it stands for, written as that dict.
    set_scaling installs a Scaling without making a config; reading the config afterwards makes one
    holding it, once."""
    typed = rope_scaling.Scaling.parse(
        {"rope_type": "yarn", "factor": 4.0}, dim=8, max_position_embeddings=32
    )
    config = posenc.get_encoding_class("rope").Config(head_dim=8, scaling=typed)
    assert config.scaling is typed and config.parsed_scaling is typed
    assert config.scaling == typed.to_dict() and config.to_dict()["scaling"] == typed.to_dict()
    again = type(config).from_json(config.to_json())
    assert again == config and isinstance(again.scaling, dict) and again.parsed_scaling == typed
    assert typed != {"rope_type": "yarn", "factor": 2.0} and typed != "yarn"
    enc = posenc.build("rope", head_dim=8, max_position_embeddings=32)
    made = []
    real = type(config).validate
    monkeypatch.setattr(type(config), "validate", lambda self: made.append(1) or real(self))
    enc.set_scaling(typed)
    enc.set_scaling({"rope_type": "linear", "factor": 2.0})
    assert made == []  # installed: no config made
    assert enc.config.scaling == {"rope_type": "linear", "factor": 2.0} and made == [1]
    assert enc.config is enc.config and made == [1]  # made once, kept until the next scaling
    enc.set_scaling(None)
    assert enc.config.scaling is None and enc.config.parsed_scaling.rope_type == "default"


def test_set_scaling_linear_is_position_interpolation_and_none_restores():
    """Linear scaling by s: rotation at m equals plain RoPE at m / s (Chen et al. 2023)."""
    enc = posenc.build("rope", head_dim=8, rotary_dim=6)
    q, k, qp, kp = qk_case()
    plain = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    enc.set_scaling({"rope_type": "linear", "factor": 4.0})
    assert enc.config.scaling == {"rope_type": "linear", "factor": 4.0}
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(qo, rope_ref(q, qp / 4.0, rotary_dim=6), **tol(torch.float64))
    torch.testing.assert_close(ko, rope_ref(k, kp / 4.0, rotary_dim=6), **tol(torch.float64))
    enc.set_scaling(None)
    again = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(again, plain, rtol=0, atol=0)


def test_attention_scaling_multiplies_rotated_block_only():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    enc = posenc.build("rope", head_dim=8, rotary_dim=4, layout="interleaved", scaling=scaling)
    inv_freq, attention_scaling = rope_scaling.compute(scaling, dim=4, base=10000.0)
    assert attention_scaling != 1.0
    q, k, qp, kp = qk_case()
    qo, _ = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    expected = rope_ref(
        q,
        qp,
        layout="interleaved",
        rotary_dim=4,
        inv_freq=inv_freq.numpy(),
        attention_scaling=attention_scaling,
    )
    torch.testing.assert_close(qo, expected, **tol(torch.float64))
    torch.testing.assert_close(qo[..., 4:], q[..., 4:], rtol=0, atol=0)


def test_max_position_embeddings_fills_original_length():
    a = posenc.build(
        "rope", head_dim=8, scaling={"rope_type": "yarn", "factor": 2.0}, max_position_embeddings=32
    )
    b = posenc.build(
        "rope",
        head_dim=8,
        scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32},
    )
    torch.testing.assert_close(a.frequencies(0)[0], b.frequencies(0)[0], rtol=0, atol=0)
    assert a.frequencies(0)[1] == b.frequencies(0)[1]


def test_dynamic_scaling_uses_max_position_plus_one_for_q_and_k():
    """Decode step: 1 query at position 40, keys 0..40; both rotate with inv_freq(seq_len=41)."""
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    enc = posenc.build("rope", head_dim=8, scaling=scaling)
    assert enc.cache_unrotated_keys and not posenc.build("rope", head_dim=8).cache_unrotated_keys
    q, k = randn(1, 2, 1, 8, seed=7), randn(1, 2, 41, 8, seed=8)
    qp, kp = torch.tensor([[40]]), torch.arange(41)[None]
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    inv_freq, _ = rope_scaling.compute(scaling, dim=8, base=10000.0, seq_len=41)
    torch.testing.assert_close(qo, rope_ref(q, qp, inv_freq=inv_freq.numpy()), **tol(torch.float64))
    torch.testing.assert_close(ko, rope_ref(k, kp, inv_freq=inv_freq.numpy()), **tol(torch.float64))
    # within the original length it is plain RoPE
    short = enc.rotate(q, k[:, :, :10], q_positions=torch.tensor([[9]]), k_positions=kp[:, :10])
    torch.testing.assert_close(short[1], rope_ref(k[:, :, :10], kp[:, :10]), **tol(torch.float64))


# ---------------------------------------------------------------------------
# Layouts and weight conversion.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_permute_qk_weight_converted_model_gives_identical_scores(rotary_dim):
    """x -> Wq, Wk -> heads -> rotate -> scores: interleaved model == converted half model."""
    h, d, d_in, n = 3, 8, 10, 6
    x = randn(2, n, d_in, seed=9)
    wq, wk = randn(h * d, d_in, seed=10), randn(h * d, d_in, seed=11)
    bq = randn(h * d, seed=12)
    pos = torch.tensor([[0, 1, 2, 50, 51, 900]])

    def scores(layout, wq, wk, bq):
        enc = posenc.build("rope", head_dim=d, layout=layout, rotary_dim=rotary_dim)
        q = (x @ wq.T + bq).view(2, n, h, d).transpose(1, 2)  # (b, h, n, d)
        k = (x @ wk.T).view(2, n, h, d).transpose(1, 2)
        q, k = enc.rotate(q, k, q_positions=pos, k_positions=pos)
        return q @ k.transpose(-1, -2)  # (b, h, n, n)

    kw = dict(src="interleaved", dst="half", rotary_dim=rotary_dim)
    converted = [permute_qk_weight(w, h, d, **kw) for w in (wq, wk, bq)]
    assert not torch.equal(converted[0], wq)
    torch.testing.assert_close(
        scores("half", *converted), scores("interleaved", wq, wk, bq), **tol(torch.float64)
    )
    back = permute_qk_weight(converted[0], h, d, src="half", dst="interleaved", rotary_dim=rotary_dim)
    torch.testing.assert_close(back, wq, rtol=0, atol=0)


def test_rotary_embedding_identity_at_position_zero():
    for layout in LAYOUTS:
        enc = posenc.build("rope", head_dim=8, layout=layout)
        q = randn(1, 1, 3, 8, seed=13)
        zeros = torch.zeros(1, 3, dtype=torch.long)
        torch.testing.assert_close(
            enc.rotate(q, q, q_positions=zeros, k_positions=zeros)[0], q, rtol=0, atol=0
        )


# ---------------------------------------------------------------------------
# Properties (hypothesis).
# ---------------------------------------------------------------------------

positions = st.integers(min_value=0, max_value=20_000)
layouts = st.sampled_from(LAYOUTS)
rotary_dims = st.sampled_from([2, 4, 6, 8])


def rotated_score(enc, q, k, m, n):
    qo, ko = enc.rotate(q, k, q_positions=torch.tensor([[m]]), k_positions=torch.tensor([[n]]))
    return (qo * ko).sum()


@given(m=positions, n=positions, shift=positions, layout=layouts, r=rotary_dims, seed=st.integers(0, 99))
def test_rope_score_depends_only_on_distance(m, n, shift, layout, r, seed):
    enc = posenc.build("rope", head_dim=8, layout=layout, rotary_dim=r)
    q, k = randn(1, 1, 1, 8, seed=seed), randn(1, 1, 1, 8, seed=seed + 100)
    a = rotated_score(enc, q, k, m, n)
    b = rotated_score(enc, q, k, m + shift, n + shift)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@given(m=positions, layout=layouts, r=rotary_dims, seed=st.integers(0, 99))
def test_rope_preserves_norms(m, layout, r, seed):
    enc = posenc.build("rope", head_dim=8, layout=layout, rotary_dim=r)
    q = randn(1, 1, 1, 8, seed=seed)
    qo, _ = enc.rotate(q, q, q_positions=torch.tensor([[m]]), k_positions=torch.tensor([[m]]))
    torch.testing.assert_close(qo.norm(dim=-1), q.norm(dim=-1), **tol(torch.float64))
    torch.testing.assert_close(qo[..., :r].norm(dim=-1), q[..., :r].norm(dim=-1), **tol(torch.float64))


@given(m=positions, r=rotary_dims, seed=st.integers(0, 99))
def test_layouts_agree_up_to_feature_permutation(m, r, seed):
    half = posenc.build("rope", head_dim=8, layout="half", rotary_dim=r)
    inter = posenc.build("rope", head_dim=8, layout="interleaved", rotary_dim=r)
    perm = layout_permutation(8, src="interleaved", dst="half", rotary_dim=r)
    x = randn(1, 1, 1, 8, seed=seed)
    pos = torch.tensor([[m]])
    a, _ = half.rotate(x[..., perm], x[..., perm], q_positions=pos, k_positions=pos)
    b, _ = inter.rotate(x, x, q_positions=pos, k_positions=pos)
    torch.testing.assert_close(a, b[..., perm], **tol(torch.float64))


@given(
    m=st.integers(0, 3000),
    n=st.integers(0, 3000),
    shift=st.integers(0, 3000),
    center=st.integers(0, 3000),
    layout=layouts,
    seed=st.integers(0, 99),
)
def test_xpos_score_invariant_to_shift_and_center(m, n, shift, center, layout, seed):
    enc = posenc.build("xpos", head_dim=8, layout=layout)
    other = posenc.build("xpos", head_dim=8, layout=layout, scale_center=center)
    q, k = randn(1, 1, 1, 8, seed=seed), randn(1, 1, 1, 8, seed=seed + 100)
    a = rotated_score(enc, q, k, m, n)
    torch.testing.assert_close(rotated_score(enc, q, k, m + shift, n + shift), a, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(rotated_score(other, q, k, m, n), a, rtol=1e-9, atol=1e-12)


def test_xpos_decays_with_distance():
    """|score| of a fixed pair q = k = e_0 (the fastest-decaying, zeta_0 = gamma/(1+gamma)) over distance."""
    enc = posenc.build("xpos", head_dim=8, scale_base=16.0)
    e0 = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    e0[..., 0] = 1.0
    envelope = [
        float(torch.linalg.vector_norm(enc.rotate(e0, e0, q_positions=torch.tensor([[d]]))[0]))
        * float(torch.linalg.vector_norm(enc.rotate(e0, e0, k_positions=torch.tensor([[0]]))[1]))
        for d in (0, 16, 32)
    ]
    zeta0 = 0.4 / 1.4
    np.testing.assert_allclose(envelope, [1.0, zeta0, zeta0**2], rtol=1e-12)


# ---------------------------------------------------------------------------
# Bad input: ValueError / TypeError naming the parameter.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,config,match",
    [
        ("rope", dict(head_dim=7), "head_dim"),
        ("rope", dict(head_dim=8, rotary_dim=10), "rotary_dim"),
        ("rope", dict(head_dim=8, rotary_dim=3), "rotary_dim"),
        ("rope", dict(head_dim=8, rotary_dim=4, partial_rotary_factor=0.75), "partial_rotary_factor"),
        ("rope", dict(head_dim=10, partial_rotary_factor=0.5), "partial_rotary_factor"),
        ("rope", dict(head_dim=8, layout="neox"), "layout"),
        ("rope", dict(head_dim=8, base=1.0), "base"),
        ("rope", dict(head_dim=8, scaling={"rope_type": "lineer"}), "rope_type"),
        ("rope", dict(head_dim=8, scaling={"rope_type": "linear"}), "factor"),
        ("xpos", dict(head_dim=9), "head_dim"),
        ("xpos", dict(head_dim=8, scale_base=0.0), "scale_base"),
        ("xpos", dict(head_dim=8, gamma=-1.0), "gamma"),
        ("xpos", dict(head_dim=8, layout="x"), "layout"),
    ],
)
def test_bad_config_names_the_parameter(name, config, match):
    with pytest.raises(ValueError, match=match):
        posenc.build(name, **config)


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_bad_inputs_name_the_parameter(name):
    enc = posenc.build(name, head_dim=8)
    q, k = randn(2, 2, 5, 8), randn(2, 2, 7, 8)
    with pytest.raises(ValueError, match="q_positions"):
        enc.rotate(q, k, q_positions=torch.arange(7)[None])
    with pytest.raises(ValueError, match="k_positions"):
        enc.rotate(q, k, k_positions=torch.arange(5)[None])
    with pytest.raises(ValueError, match="k_positions"):
        enc.rotate(q, k, k_positions=torch.arange(7).expand(3, 7))  # batch 3 vs 2
    with pytest.raises(ValueError, match="q_positions"):
        enc.rotate(q, k, q_positions=-torch.ones(1, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="q_positions"):
        enc.rotate(q, k, q_positions=torch.zeros(1, 5))
    with pytest.raises(ValueError, match="head_dim"):
        enc.rotate(randn(2, 2, 5, 6), k)
    with pytest.raises(ValueError, match="q"):
        enc.rotate(randn(2, 5, 8), k)


def test_permute_qk_weight_bad_input():
    w = randn(16, 4)
    with pytest.raises(ValueError, match="num_heads"):
        permute_qk_weight(w, 3, 8, src="half", dst="interleaved")
    with pytest.raises(ValueError, match="dst"):
        permute_qk_weight(w, 2, 8, src="half", dst="neox")
    with pytest.raises(ValueError, match="rotary_dim"):
        permute_qk_weight(w, 2, 8, src="half", dst="interleaved", rotary_dim=5)


def test_apply_rotary_is_the_plain_formula():
    """One pair, angle pi/2: (x1, x2) -> (-x2, x1) in both layouts."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    cos, sin = torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)
    # half: pairs (0, 2) angle pi/2, (1, 3) angle 0
    torch.testing.assert_close(
        apply_rotary(x, cos, sin, layout="half", rotary_dim=4),
        torch.tensor([-3.0, 2.0, 1.0, 4.0], dtype=torch.float64),
    )
    # interleaved: pairs (0, 1) angle pi/2, (2, 3) angle 0
    torch.testing.assert_close(
        apply_rotary(x, cos, sin, layout="interleaved", rotary_dim=4),
        torch.tensor([-2.0, 1.0, 3.0, 4.0], dtype=torch.float64),
    )


# ---------------------------------------------------------------------------
# Peers: Hugging Face transformers and rotary-embedding-torch.
# ---------------------------------------------------------------------------


@pytest.mark.peers
@pytest.mark.parametrize("rope_type", ["default", "yarn"])
def test_matches_transformers_llama(rope_type):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    params = {"rope_type": rope_type, "rope_theta": 10000.0}
    scaling = None
    if rope_type == "yarn":
        extra = {"factor": 4.0, "original_max_position_embeddings": 64}
        params.update(extra)
        scaling = {"rope_type": "yarn", **extra}
    cfg = LlamaConfig(
        hidden_size=32,
        num_attention_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rope_parameters=params,
    )
    x = randn(1, 2, 5, 16, seed=14, dtype=torch.float32)
    pos = torch.tensor([[0, 3, 100, 200, 255]])
    cos, sin = llama.LlamaRotaryEmbedding(cfg)(x, pos)
    hq, hk = llama.apply_rotary_pos_emb(x, x, cos, sin)
    q, k = posenc.build("rope", head_dim=16, scaling=scaling).rotate(x, x, q_positions=pos, k_positions=pos)
    # HF forms position * inv_freq in float32 (angle error ~ 255 * 2^-24), hence 5e-5.
    torch.testing.assert_close(q, hq, rtol=5e-5, atol=5e-5)
    torch.testing.assert_close(k, hk, rtol=5e-5, atol=5e-5)


@pytest.mark.peers
def test_matches_rotary_embedding_torch():
    ret = pytest.importorskip("rotary_embedding_torch")
    x, y = randn(1, 2, 40, 8, seed=15, dtype=torch.float32), randn(1, 2, 40, 8, seed=16, dtype=torch.float32)
    # plain RoPE, GPT-J / interleaved pairs
    theirs = ret.RotaryEmbedding(dim=8).rotate_queries_or_keys(x)
    ours, _ = posenc.build("rope", head_dim=8, layout="interleaved").rotate(x, x)
    torch.testing.assert_close(ours, theirs, **tol(torch.float32))
    # xPos: they centre the exponent on the window, we do not; scores must agree.
    tq, tk = ret.RotaryEmbedding(dim=8, use_xpos=True, xpos_scale_base=32).rotate_queries_and_keys(x, y)
    oq, ok = posenc.build("xpos", head_dim=8, layout="interleaved", scale_base=32.0).rotate(x, y)
    torch.testing.assert_close(oq @ ok.transpose(-1, -2), tq @ tk.transpose(-1, -2), rtol=1e-4, atol=1e-4)


def test_longrope_factor_inferred_from_max_position_embeddings():
    """As HF: LongRoPE without ``factor`` uses max_position_embeddings / original length."""
    import math

    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 32,
        "long_factor": [2.0] * 32,
        "original_max_position_embeddings": 4096,
    }
    enc = posenc.build("rope", head_dim=64, scaling=scaling, max_position_embeddings=131072)
    expected = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))
    assert abs(enc.frequencies(200000)[1] - expected) < 1e-12
