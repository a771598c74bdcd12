"""What every member of the bias family shares (``posenc.encoding.bias.family``): each against its NumPy
reference on full tensors, float64 precision far out, translation invariance, decoding rows, FlexAttention,
the cached dense bias and the errors. Each member's own properties are in ``test_<member>.py``."""

from __future__ import annotations

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
