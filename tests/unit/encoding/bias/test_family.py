"""The bias family: every encoding vs its NumPy reference, the papers' properties, FlexAttention."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.encoding import bias as B
from posenc.reference import bias as R

NAMES = ["alibi", "t5", "kerple_log", "kerple_power", "fire", "sandwich"]
F64 = tol(torch.float64)


def build(name: str, num_heads: int = 3, **config) -> B._BiasFamily:
    torch.manual_seed(0)
    enc = posenc.build(name, num_heads=num_heads, **config)
    if name == "fire":  # make the MLP's output visibly depend on its input
        with torch.no_grad():
            for p in enc.parameters():
                if p.ndim:
                    p.normal_(0.0, 1.0)
    return enc


def np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def reference(enc: B._BiasFamily, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The NumPy reference for ``enc`` with ``enc``'s own (clamped) parameters."""
    c = enc.config
    if isinstance(enc, B.ALiBi):
        return R.alibi(q, k, c.num_heads, c.bidirectional)
    if isinstance(enc, B.T5RelativeBias):
        return R.t5(q, k, np64(enc.table), c.bidirectional, c.max_distance)
    if isinstance(enc, B.KerpleLog | B.KerplePower):
        p = enc._prepare(torch.device("cpu"))
        fn = R.kerple_log if isinstance(enc, B.KerpleLog) else R.kerple_power
        return fn(q, k, np64(p["r1"]), np64(p["r2"]), c.bidirectional)
    if isinstance(enc, B.FIRE):
        threshold = abs(enc.threshold_multiplier.item() * c.init_threshold)
        return R.fire(
            q,
            k,
            enc.c.item(),
            threshold,
            np64(enc.mlp_in.weight)[:, 0],
            np64(enc.mlp_in.bias),
            np64(enc.mlp_out.weight),
            np64(enc.mlp_out.bias),
            c.bidirectional,
            c.eps,
        )
    if isinstance(enc, B.Sandwich):
        return R.sandwich(q, k, c.num_heads, c.embed_dim, c.base)
    raise AssertionError(type(enc).__name__)


def positions(batch: int, n: int, seed: int, spread: int = 300) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.sort(torch.randint(0, spread, (batch, n), generator=g), dim=-1).values


# --- each encoding vs its reference, on full tensors ------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_bias_fn_matches_reference_float64(name, bidirectional):
    enc = build(name, bidirectional=bidirectional)
    qp, kp = positions(2, 9, seed=1), positions(2, 11, seed=2)  # cross-attention shapes, j > i too
    head = torch.arange(enc.num_heads)[None, :, None, None]
    got = enc.bias_fn(qp[:, None, :, None], kp[:, None, None, :], head)
    assert got.dtype == torch.float64 and got.shape == (2, enc.num_heads, 9, 11)
    torch.testing.assert_close(got, torch.from_numpy(reference(enc, qp.numpy(), kp.numpy())), **F64)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_dense_bias_matches_reference(name, bidirectional):
    enc = build(name, bidirectional=bidirectional)
    want = torch.from_numpy(reference(enc, np.arange(12), np.arange(12)))[None]
    dense = enc.bias(12, 12)
    assert dense.shape == (1, enc.num_heads, 12, 12) and dense.dtype == torch.float32
    torch.testing.assert_close(dense, want.float(), **tol(torch.float32))
    if list(enc.parameters()):  # learned: a float64 module gives float64 biases
        torch.testing.assert_close(enc.double().bias(12, 12), want, **F64)


@pytest.mark.parametrize("name", NAMES)
def test_large_positions_keep_float64_precision(name):
    """Tables come from integer positions in float64: position 10^7 is as exact as 7."""
    enc = build(name, bidirectional=True)
    pos = torch.arange(5) + 10**7
    want = torch.from_numpy(reference(enc, pos.numpy(), pos.numpy()))[None]
    far = enc.bias_fn(pos[None, None, :, None], pos[None, None, None, :], torch.arange(3)[:, None, None])
    torch.testing.assert_close(far, want, **F64)
    dense = enc.bias(5, 5, q_positions=pos, k_positions=pos)  # float32, cast last
    torch.testing.assert_close(dense, want.float(), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_log", "kerple_power", "sandwich"])
@given(shift=st.integers(0, 10**6))
def test_relative_encodings_are_translation_invariant(name, shift):
    enc = build(name)
    qp, kp = positions(1, 6, seed=3), positions(1, 6, seed=4)
    a = enc.bias(6, 6, q_positions=qp, k_positions=kp)
    b = enc.bias(6, 6, q_positions=qp + shift, k_positions=kp + shift)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_decode_row_equals_full_bias_row(name):
    """KV-cache decoding: the query at position n-1 against n keys == the full bias's last row."""
    enc = build(name)
    full = enc.bias(9, 9)
    torch.testing.assert_close(
        enc.bias(1, 9, q_positions=torch.tensor([[8]])), full[:, :, 8:], rtol=0, atol=0
    )


# --- ALiBi -----------------------------------------------------------------------------


@given(num_heads=st.integers(1, 64))
def test_alibi_slopes_follow_the_construction(num_heads):
    slopes = B.alibi_slopes(num_heads)
    assert slopes.dtype == torch.float64 and slopes.shape == (num_heads,)
    torch.testing.assert_close(slopes, torch.from_numpy(R.alibi_slopes(num_heads)), rtol=0, atol=0)
    p = 2 ** int(math.log2(num_heads))
    ratio = 2.0 ** (-8.0 / p)
    torch.testing.assert_close(slopes[:p], ratio ** torch.arange(1, p + 1, dtype=torch.float64), **F64)
    if p == num_heads:  # a power of two: geometric, from 2^(-8/n) down to 2^-8
        torch.testing.assert_close(slopes[1:] / slopes[:-1], torch.full((p - 1,), ratio, dtype=torch.float64))
        assert slopes[-1] == 2.0**-8
    else:  # every other slope of the doubled set (2^(-4/p), 2^(-12/p), ...)
        odd = 2.0 ** (-4.0 * torch.arange(1, 2 * (num_heads - p), 2, dtype=torch.float64) / p)
        torch.testing.assert_close(slopes[p:], odd, **F64)
    assert bool(((slopes > 0) & (slopes < 1)).all()) and len(set(slopes.tolist())) == num_heads


def test_alibi_published_slopes_for_8_heads():
    """Press et al. sec. 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256."""
    torch.testing.assert_close(B.alibi_slopes(8), 0.5 ** torch.arange(1, 9, dtype=torch.float64))


def test_alibi_causal_and_bidirectional_forms():
    causal, both = build("alibi", 4).bias(6, 6)[0], build("alibi", 4, bidirectional=True).bias(6, 6)[0]
    lower = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(causal[:, lower], both[:, lower], rtol=0, atol=0)  # same for j <= i
    torch.testing.assert_close(both, both.transpose(-1, -2), rtol=0, atol=0)  # symmetric
    assert causal[:, 5, 0].tolist() == (-5 * B.alibi_slopes(4)).float().tolist()


# --- T5 ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_bucket():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    return t5.T5Attention._relative_position_bucket


@given(
    bidirectional=st.booleans(),
    num_buckets=st.integers(4, 64),
    extra_distance=st.integers(1, 400),
)
def test_t5_buckets_match_transformers(hf_bucket, bidirectional, num_buckets, extra_distance):
    n = num_buckets // 2 if bidirectional else num_buckets
    max_distance = n // 2 + extra_distance  # the valid range: > max_exact
    rel = torch.arange(-3000, 3001)
    ours = B.t5_relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = hf_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(ours, theirs)
    np.testing.assert_array_equal(
        R.t5_relative_position_bucket(rel.numpy(), bidirectional, num_buckets, max_distance), ours.numpy()
    )


@given(bidirectional=st.booleans(), num_buckets=st.integers(4, 64), max_distance=st.integers(40, 1000))
def test_t5_buckets_monotone_in_distance_and_saturate(bidirectional, num_buckets, max_distance):
    kwargs = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    distance = torch.arange(0, 3 * max_distance)
    before = B.t5_relative_position_bucket(-distance, **kwargs)  # keys before the query
    assert bool((before.diff() >= 0).all()) and before[0] == 0
    half = num_buckets // 2 if bidirectional else num_buckets
    assert before.max() <= half - 1
    assert bool((before[max_distance:] == half - 1).all())  # far beyond max_distance: last bucket
    if bidirectional:
        after = B.t5_relative_position_bucket(distance[1:], **kwargs)
        assert bool((after.diff() >= 0).all()) and bool((after >= half).all())
        assert bool((after[max_distance:] == 2 * half - 1).all())


def test_t5_far_positions_fall_in_the_last_bucket():
    enc = build("t5", bidirectional=True)
    got = enc.bias(1, 2, q_positions=torch.tensor([[10**6]]), k_positions=torch.tensor([[0, 2 * 10**6]]))
    table = enc.table.detach()
    torch.testing.assert_close(got[0, :, 0, 0], table[15])  # keys long before: last "before" bucket
    torch.testing.assert_close(got[0, :, 0, 1], table[31])  # keys long after: last bucket
    assert B.T5RelativeBias.share_across_layers is True


# --- KERPLE and Sandwich: 0 at distance 0, decaying with distance ------------------------


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
@given(r1=st.floats(-1, 5), r2=st.floats(-1, 5), bidirectional=st.booleans())
def test_kerple_zero_at_zero_and_non_increasing(name, r1, r2, bidirectional):
    enc = build(name, num_heads=1, bidirectional=bidirectional)
    with torch.no_grad():  # raw values outside the range exercise the clamps
        enc.r1.fill_(r1)
        enc.r2.fill_(r2)
    row = enc.bias_fn(torch.tensor(400), torch.arange(400, -1, -1), torch.tensor(0))  # distance 0..400
    assert row[0] == 0
    assert bool((row.diff() <= 0).all())
    p = enc._prepare(torch.device("cpu"))
    assert p["r1"].item() >= 0.01 and p["r2"].item() >= 0.01
    if name == "kerple_power":
        assert p["r2"].item() <= 2.0


def test_kerple_init_follows_the_official_code():
    """Official code: log r1 ~ 2 U(0,1), r2 ~ U(0,1); power r1 ~ U(0,1), r2 ~ 2 U(0,1)."""
    log, power = build("kerple_log", 256), build("kerple_power", 256)
    assert 0 <= log.r1.min() and log.r1.max() <= 2 and log.r1.max() > 1
    assert 0 <= log.r2.min() and log.r2.max() <= 1
    assert 0 <= power.r1.min() and power.r1.max() <= 1
    assert 0 <= power.r2.min() and power.r2.max() <= 2 and power.r2.max() > 1


@given(embed_dim=st.integers(1, 128).map(lambda x: 2 * x), num_heads=st.integers(1, 16))
def test_sandwich_zero_at_zero_negative_elsewhere(embed_dim, num_heads):
    enc = build("sandwich", num_heads=num_heads, embed_dim=embed_dim)
    distance = torch.arange(0, 1000)
    bias = enc.bias_fn(
        distance[None, :], torch.zeros(1, 1, dtype=torch.long), torch.arange(num_heads)[:, None]
    )
    assert bool((bias[:, 0] == 0).all())
    assert bool((bias[:, 1:] < 0).all())  # p_i . p_j < |p|^2 = d'/2 off the diagonal
    # Monotone while every frequency's phase is in [0, pi]: derivative -sum w sin(w d) <= 0.
    last = int(math.pi / enc.frequencies.max())
    assert bool((bias[:, : last + 1].diff(dim=-1) <= 0).all())
    # Head h (1-based) is head 1 divided by h: the ALiBi-like compression.
    torch.testing.assert_close(bias * torch.arange(1, num_heads + 1)[:, None], bias[:1].expand_as(bias))


# --- FIRE ---------------------------------------------------------------------------------


def test_fire_init_and_bidirectional_heads():
    enc = posenc.build("fire", num_heads=4)
    assert enc.c.item() == pytest.approx(0.1) and enc.threshold_multiplier.item() == 1.0
    assert enc.mlp_in.out_features == 32 and enc.mlp_out.out_features == 4
    both = build("fire", 4, bidirectional=True)
    assert both.mlp_out.out_features == 8
    dense = both.bias(6, 6)[0]
    assert not torch.allclose(dense, dense.transpose(-1, -2))  # directions told apart


# --- FlexAttention ------------------------------------------------------------------------


def flex(q, k, v, score_mod):
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile()": the eager path is enough here
        return flex_attention(q, k, v, score_mod=score_mod)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("given_positions", [False, True])
def test_flex_score_mod_equals_sdpa_with_dense_bias(name, given_positions):
    small = {"mlp_width": 4} if name == "fire" else {}  # eager flex runs FIRE's unit loop slowly
    enc = build(name, bidirectional=given_positions, **small).double()
    b, h, n, d = 2, enc.num_heads, 7, 4
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    pos = positions(b, n, seed=6) if given_positions else None
    out = flex(q, k, v, enc.score_mod(pos, pos))
    dense = enc.bias(n, n, q_positions=pos, k_positions=pos)
    if dense.dtype != torch.float64:  # parameter-free: bias() is float32; use the float64 definition
        p = pos if pos is not None else torch.arange(n)[None]
        dense = enc.bias_fn(p[:, None, :, None], p[:, None, None, :], torch.arange(h)[:, None, None])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    torch.testing.assert_close(out, ref, **F64)


@pytest.mark.parametrize("name", ["t5", "kerple_log", "kerple_power", "fire"])
def test_flex_gradients_reach_the_parameters(name):
    enc = build(name, **({"mlp_width": 4} if name == "fire" else {})).double()  # see above
    b, h, n, d = 1, enc.num_heads, 6, 4
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    w = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    (flex(q, k, v, enc.score_mod()) * w).sum().backward()
    via_flex = {key: p.grad.clone() for key, p in enc.named_parameters()}
    enc.zero_grad()
    mask = enc.bias(n, n)
    (torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) * w).sum().backward()
    for key, p in enc.named_parameters():
        torch.testing.assert_close(via_flex[key], p.grad, **F64, msg=key)


# --- caching, validation ------------------------------------------------------------------


def test_parameter_free_dense_bias_is_cached():
    enc = build("alibi")
    assert enc.bias(8, 8) is enc.bias(8, 8)
    assert enc.bias(9, 9).shape[-1] == 9
    sandwich = build("sandwich")
    sandwich.bias(100, 100)
    table = sandwich._profile_table[torch.device("cpu")]
    sandwich.bias(3, 3, q_positions=torch.tensor([[5, 6, 7]]))
    assert sandwich._profile_table[torch.device("cpu")] is table  # not rebuilt for shorter inputs


@pytest.mark.parametrize(
    ("name", "config", "param"),
    [
        ("alibi", {"num_heads": 0}, "num_heads"),
        ("t5", {"num_heads": 2, "num_buckets": 1}, "num_buckets"),
        ("t5", {"num_heads": 2, "num_buckets": 3, "bidirectional": True}, "num_buckets"),
        ("t5", {"num_heads": 2, "max_distance": 0}, "max_distance"),
        ("t5", {"num_heads": 2, "max_distance": 16}, "max_distance"),  # must exceed max_exact=16
        ("t5", {"num_heads": 2, "init_std": -1.0}, "init_std"),
        ("kerple_log", {"num_heads": -1}, "num_heads"),
        ("kerple_power", {"num_heads": 2, "clamp_min": 0.0}, "clamp_min"),
        ("fire", {"num_heads": 2, "mlp_width": 0}, "mlp_width"),
        ("fire", {"num_heads": 2, "init_c": 0.0}, "init_c"),
        ("fire", {"num_heads": 2, "init_threshold": -5.0}, "init_threshold"),
        ("sandwich", {"num_heads": 2, "embed_dim": 7}, "embed_dim"),
        ("sandwich", {"num_heads": 2, "base": 1.0}, "base"),
    ],
)
def test_bad_config_names_the_parameter(name, config, param):
    with pytest.raises(ValueError, match=param):
        posenc.build(name, **config)


@pytest.mark.parametrize("name", NAMES)
def test_bad_call_arguments(name):
    enc = build(name)
    with pytest.raises(TypeError, match="bidirectional"):
        posenc.build(name, num_heads=2, bidirectional="yes")
    with pytest.raises(TypeError, match="q_pos"):
        enc.bias_fn(torch.tensor([0.5]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="head"):
        enc.bias_fn(torch.tensor([0]), torch.tensor([0]), torch.tensor([enc.num_heads]))
    with pytest.raises(ValueError, match="k_pos"):
        enc.bias_fn(torch.tensor([0]), torch.tensor([-1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="q_positions"):
        enc.bias(3, 3, q_positions=torch.tensor([[0, -1, 2]]))
    with pytest.raises(ValueError, match="num_keys"):
        enc.bias(3, -1)
    with pytest.raises(TypeError, match="k_positions"):
        enc.score_mod(k_positions=torch.tensor([[0.0, 1.0]]))
