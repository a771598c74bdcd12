"""The fused rotary kernel against the plain path it replaces: full tensors, forward and gradients.

- fused rotary (C kernel) == ``posenc.encoding.rotary.rope.apply_rotary`` for both layouts, partial
  rotary, float64/32/16/bfloat16, strided inputs, broadcast and per-batch tables, out=/in place;
- graceful degradation: unsupported calls take the plain path, one log line (a failed build:
  test__build.py);
- RoPE's and xPos's ``rotate`` == the plain formula on their own tables.
Shapes stay tiny: the kernels are built once per machine (about a second) and cached.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc.encoding.rotary.rope import apply_rotary
from posenc.kernels import fused_rope as rope
from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.registry import ENCODINGS

LAYOUTS = ("half", "interleaved")
DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]

needs_kernel = pytest.mark.skipif(not rope.available(), reason="no C compiler: the plain path is used")


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def tables(shape, dtype, *, scale=1.0, seed=9):
    """cos/sin of random angles times ``scale`` (a magnitude, as xPos / attention_scaling)."""
    angles = randn(*shape, seed=seed)
    wide = torch.promote_types(dtype, torch.float32)
    return (angles.cos() * scale).to(wide), (angles.sin() * scale).to(wide)


def plain(x, cos, sin, layout, r):
    wide = torch.promote_types(x.dtype, torch.float32)
    return apply_rotary(x.to(wide), cos, sin, layout=layout, rotary_dim=r).to(x.dtype)


# ---------------------------------------------------------------------------
# Fused rotary == plain rotary.
# ---------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("r", [8, 4, 2])
def test_fused_rotary_matches_plain_forward_and_grad(dtype, layout, r):
    x = randn(2, 3, 5, 8, seed=1, dtype=dtype).requires_grad_()
    cos, sin = tables((1, 1, 5, r // 2), dtype, scale=1.3)
    grad = randn(2, 3, 5, 8, seed=2, dtype=dtype)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = plain(x, cos, sin, layout, r)
    assert fast.dtype == dtype and fast.shape == x.shape
    # Same roundings in the same order (no FMA): equal to the last bit, gradients too.
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    (g_fast,) = torch.autograd.grad(fast, x, grad)
    (g_slow,) = torch.autograd.grad(slow, x, grad)
    torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d,r", [(128, 128), (96, 64), (64, 64), (32, 32)])
def test_fused_rotary_specialised_head_sizes(dtype, layout, d, r):
    """r/2 = 32 and 64 run constant-size loops in the kernel: same results as the plain path."""
    x = randn(1, 3, 4, d, seed=16, dtype=dtype).transpose(1, 2).requires_grad_()  # (1, 4, 3, d), strided
    cos, sin = tables((1, 1, 3, r // 2), dtype, scale=0.9)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = plain(x, cos, sin, layout, r)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    g = randn(1, 4, 3, d, seed=17, dtype=dtype)
    torch.testing.assert_close(
        torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0], rtol=0, atol=0
    )


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_rotary_strided_input_and_per_batch_tables(layout):
    # q as attention makes it: (b, n, h, d) projected, then viewed as (b, h, n, d).
    x = randn(2, 6, 3, 8, seed=3, dtype=torch.float32).transpose(1, 2).requires_grad_()
    cos, sin = tables((2, 1, 6, 3), torch.float32, seed=4)  # per-batch rows (b, 1, n, r/2)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6)
    slow = plain(x, cos, sin, layout, 6)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    grad = randn(2, 3, 6, 8, seed=5, dtype=torch.float32).transpose(2, 3).contiguous().transpose(2, 3)
    (g_fast,) = torch.autograd.grad(fast, x, grad)  # a non-contiguous incoming gradient too
    (g_slow,) = torch.autograd.grad(slow, x, grad)
    torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("table_shape", [(1, 1, 5, 1), (5, 1), (1, 1, 1, 3), (1, 3, 1, 1)])
def test_fused_rotary_tables_broadcast_over_pairs_and_positions(layout, table_shape):
    """Tables with a size-1 axis anywhere, the pairs' axis included (one angle per position), are
    broadcast as the plain path broadcasts them: the kernel never reads past a size-1 axis."""
    x = randn(2, 3, 5, 8, seed=19, dtype=torch.float32).requires_grad_()
    cos, sin = tables(table_shape, torch.float32, scale=1.1, seed=20)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6)
    slow = plain(x, cos, sin, layout, 6)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    g = randn(2, 3, 5, 8, seed=21, dtype=torch.float32)
    torch.testing.assert_close(
        torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0], rtol=0, atol=0
    )
    op = rope.rotary_op(x.detach(), cos, sin, layout == "interleaved", 6, 1)
    torch.testing.assert_close(op, slow.detach(), rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (3, 5, 8)])
def test_fused_rotary_refuses_tables_that_do_not_broadcast(shape, caplog):
    """A table whose axis is neither 1 nor x's is refused, naming both shapes."""
    x = randn(*shape, seed=22, dtype=torch.float32)
    for table_shape in [(4, 3), (5, 4)]:  # 4 positions for 5; 4 angles for 3 pairs
        cos, sin = tables(table_shape, torch.float32)
        wanted = f"cos and sin of shape {re.escape(str(table_shape))}.*{re.escape(str(tuple(shape)))}"
        with pytest.raises(posenc.PosencError, match=wanted):
            apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=6)


@needs_kernel
@pytest.mark.parametrize("shape", [(5, 8), (3, 5, 8)])
def test_fused_rotary_lower_rank_inputs(shape):
    x = randn(*shape, seed=6, dtype=torch.float32)
    cos, sin = tables((5, 4), torch.float32)
    torch.testing.assert_close(
        apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8),
        plain(x, cos, sin, "half", 8),
        rtol=0,
        atol=0,
    )


@needs_kernel
@pytest.mark.parametrize("shape", [(2, 3, 0, 8), (0, 3, 5, 8), (2, 0, 5, 8)])
def test_fused_rotary_empty_inputs(shape):
    x = randn(*shape, seed=18, dtype=torch.float32).requires_grad_()
    cos, sin = tables((1, 1, shape[2], 4), torch.float32)
    y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    assert y.shape == x.shape
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.shape == x.shape


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_rotary_out_and_in_place(layout):
    x = randn(2, 3, 5, 8, seed=7, dtype=torch.bfloat16)
    cos, sin = tables((1, 1, 5, 3), torch.bfloat16)
    expected = plain(x, cos, sin, layout, 6)
    out = torch.empty_like(x)
    assert apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6, out=out) is out
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    y = x.clone()
    assert apply_rotary_fused(y, cos, sin, layout=layout, rotary_dim=6, out=y) is y
    torch.testing.assert_close(y, expected, rtol=0, atol=0)  # pass-through features untouched
    with pytest.raises(ValueError, match="out must have"):
        apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6, out=torch.empty(2, 3, 5, 8))


def test_fused_rotary_backward_is_the_transpose():
    """<R x, g> == <x, R^T g>: the backward kernel (sign -1) is the adjoint of the forward."""
    x = randn(1, 2, 7, 8, seed=8).requires_grad_()
    cos, sin = tables((1, 1, 7, 4), torch.float64, scale=0.7)
    g = randn(1, 2, 7, 8, seed=9)
    y = apply_rotary_fused(x, cos, sin, layout="interleaved", rotary_dim=8)
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close((y * g).sum(), (x * gx).sum(), **tol(torch.float64))


@needs_kernel
def test_fused_rotary_gradcheck_and_second_order():
    x = randn(1, 2, 3, 6, seed=15).requires_grad_()
    cos, sin = tables((1, 1, 3, 2), torch.float64, scale=1.1)

    def f(t):
        return apply_rotary_fused(t, cos, sin, layout="half", rotary_dim=4)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_unsupported_calls_take_the_plain_path_with_one_log_line(caplog):
    # cos/sin that require grad: the kernel treats tables as constants, so the plain path runs
    # and the tables get their gradient.
    x = randn(1, 2, 4, 8, seed=10)
    cos, sin = tables((1, 1, 4, 4), torch.float64)
    cos.requires_grad_()
    with caplog.at_level(logging.WARNING, logger="posenc"):
        for _ in range(3):
            y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    torch.testing.assert_close(y, plain(x, cos, sin, "half", 8), rtol=0, atol=0)
    (gc,) = torch.autograd.grad(y.sum(), cos)
    assert gc.abs().sum() > 0
    lines = [r for r in caplog.records if "require grad" in r.getMessage()]
    assert len(lines) <= 1  # once per process (it may have been said by an earlier test)
    # 5-d inputs are not a kernel shape: the plain result, same values.
    x5 = randn(2, 1, 2, 4, 8, seed=11, dtype=torch.float32)
    c5, s5 = tables((4, 4), torch.float32)
    torch.testing.assert_close(
        apply_rotary_fused(x5, c5, s5, layout="half", rotary_dim=8), plain(x5, c5, s5, "half", 8)
    )


def test_a_device_other_than_the_cpu_takes_the_plain_path_without_a_word(caplog):
    """The C kernel is the CPU's fast path; elsewhere (a GPU; here the meta device) the plain path is
    the design, not a fallback to warn about."""
    x = torch.empty(1, 2, 4, 8, device="meta")
    cos, sin = (torch.empty(1, 1, 4, 4, device="meta") for _ in range(2))
    with caplog.at_level(logging.WARNING, logger="posenc"):
        y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    assert y.shape == x.shape and y.device.type == "meta"
    assert not [r for r in caplog.records if "fused rotary" in r.getMessage()]


# ---------------------------------------------------------------------------
# RoPE and xPos through the kernel == the plain formula on their tables.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rope", "xpos"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encoding_rotate_equals_plain_apply(name, layout, dtype):
    """What RoPE/xPos.rotate return (the fused path when built) == apply_rotary on their tables."""
    extra = {"rotary_dim": 4} if name == "rope" else {}
    enc = posenc.build(name, head_dim=8, layout=layout, **extra)
    q = randn(2, 3, 5, 8, seed=12, dtype=dtype).requires_grad_()
    k = randn(2, 3, 6, 8, seed=13, dtype=dtype).requires_grad_()
    qp, kp = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]]), torch.arange(6)[None]
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    wide = torch.promote_types(dtype, torch.float32)
    expected = []
    for x, pos, is_key in ((q, qp, False), (k, kp, True)):
        if name == "rope":
            cos, sin = enc.cos_sin(pos, wide)
            r = enc.rotary_dim
        else:
            cos, sin = enc._sincos(pos, torch.float64)
            s = enc.scale(pos, torch.float64, key=is_key)
            cos, sin, r = (cos * s).to(wide), (sin * s).to(wide), 8
        expected.append(plain(x, cos[:, None], sin[:, None], layout, r))
    torch.testing.assert_close(qo, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(ko, expected[1], rtol=0, atol=0)
    g = randn(2, 3, 5, 8, seed=14, dtype=dtype)
    torch.testing.assert_close(
        torch.autograd.grad(qo, q, g)[0], torch.autograd.grad(expected[0], q, g)[0], rtol=0, atol=0
    )


def test_under_compile_a_cpu_rotation_takes_the_custom_op_by_default():
    """COMPILED_PATH "auto": the C kernel as a custom op for CPU tensors (torch 2.13's inductor
    corrupted the heap compiling the traced plain path with AVX-512 code), the traced plain path
    on other devices and whenever the tables need a gradient."""
    from posenc.kernels import fused_rope

    assert fused_rope.COMPILED_PATH == "auto"
    x, cos, sin = torch.randn(1, 2, 3, 8), torch.randn(3, 4), torch.randn(3, 4)
    assert fused_rope._compiled_op(x, cos, sin)
    assert not fused_rope._compiled_op(x, cos.requires_grad_(), sin)
    meta = torch.empty(1, 2, 3, 8, device="meta")
    assert not fused_rope._compiled_op(
        meta, torch.empty(3, 4, device="meta"), torch.empty(3, 4, device="meta")
    )
    calls = []
    real = fused_rope.rotary_op
    enc = posenc.build("rope", head_dim=8)
    q = torch.randn(1, 2, 5, 8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused_rope, "rotary_op", lambda *a: calls.append(1) or real(*a))
        got = torch.compile(lambda t: enc.rotate(t, t)[0], fullgraph=True, backend="eager")(q)
    assert calls, "the compiled rotation did not go through the custom op"
    torch.testing.assert_close(got, enc.rotate(q, q)[0])
