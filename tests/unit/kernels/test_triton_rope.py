"""The CUDA rotary kernel (Triton), run on the CPU by Triton's interpreter, against the plain path.

A GPU is not needed to check what the kernel computes: ``TRITON_INTERPRET=1`` runs the same
kernel on CPU tensors. Bit for bit against ``apply_rotary`` (float32, float64, float16, bfloat16;
both layouts; whole and partial rotary; strided inputs; tables per batch row; the transpose
for backward), and through posenc's own dispatch (autograd, ``rotate_trusted``, in place, the
RoPE encoding) with the kernel standing in for the CUDA device's. tests/gpu/test_cuda.py runs
the compiled kernel on a GPU. Skipped where Triton is not installed (it comes with PyTorch's
CUDA builds and with posenc's test extra).
"""

from __future__ import annotations

import logging

import pytest
import torch

import posenc
from posenc.kernels import fused_rope as rope
from posenc.kernels import triton_rope
from posenc.kernels.rotation import apply_rotary

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on inf and NaN
LAYOUTS = ("half", "interleaved")


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(rope, "_TRITON_FAILED", [])


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """posenc's dispatch sends CPU tensors to the Triton kernel, as it sends a CUDA device's."""
    monkeypatch.setattr(rope, "_backend", lambda x: "triton" if triton_rope.usable(x) else None)


def randn(*shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def tables(shape, dtype, *, seed):
    angles = randn(*shape, seed=seed, dtype=torch.float64) * 3
    wide = rope.table_dtype(dtype)
    return (angles.cos() * 1.2).to(wide), (angles.sin() * 1.2).to(wide)


def plain(x, cos, sin, layout, r, sign=1):
    wide = rope.table_dtype(x.dtype)
    return apply_rotary(x.to(wide), cos, sign * sin, layout=layout, rotary_dim=r).to(x.dtype)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d,r", [(64, 64), (40, 34), (8, 8), (12, 4)], ids=str)
@pytest.mark.parametrize("sign", [1, -1])
def test_the_kernel_equals_the_plain_path(dtype, layout, d, r, sign):
    """(b, n, h, d) viewed as (b, h, n, d): strided rows; tables per batch row; rest copied."""
    x = randn(2, 5, 3, d, seed=d + r, dtype=dtype).transpose(1, 2)
    cos, sin = tables((2, 1, 5, r // 2), dtype, seed=r)
    out = torch.empty_like(x)
    triton_rope.launch(x, cos, sin, out, interleaved=layout == "interleaved", rotary_dim=r, sign=sign,
                       copy_rest=True)  # fmt: skip
    same_bits(out, plain(x, cos, sin, layout, r, sign))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_bfloat16_bit_pattern_rounds_as_the_plain_path(layout):
    """All 65536 bfloat16 values (NaN, infinities, subnormals) as x1 and x2, factors that make ties:
    the kernel widens with a shift and rounds to nearest even with integer operations."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16).reshape(1, 1, 512, 128)
    x = torch.cat((values, values.flip(-1)), dim=-1)
    ties = torch.tensor([1.5, 0.75, 1 + 2**-8, 1.0, 0.0, -1.5])
    factors = torch.cat((ties, randn(128 - ties.numel(), seed=11, dtype=torch.float32)))
    cos = factors.roll(7).expand(512, 128).reshape(1, 1, 512, 128).contiguous()
    sin = factors.expand(512, 128).reshape(1, 1, 512, 128).contiguous()
    out = torch.empty_like(x)
    triton_rope.launch(x, cos, sin, out, interleaved=layout == "interleaved", rotary_dim=256, sign=1,
                       copy_rest=True)  # fmt: skip
    same_bits(out, plain(x, cos, sin, layout, 256))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_posenc_dispatch_forward_backward_and_in_place(as_on_a_gpu, dtype, layout):
    x = randn(2, 3, 7, 16, seed=1, dtype=dtype).requires_grad_()
    cos, sin = tables((1, 1, 7, 6), dtype, seed=2)
    fast = rope.apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=12)
    slow = plain(x, cos, sin, layout, 12)
    same_bits(fast, slow)
    g = randn(2, 3, 7, 16, seed=3, dtype=dtype)
    same_bits(torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0])
    with torch.no_grad():
        y = x.detach().clone()
        assert rope.apply_rotary_fused(y, cos, sin, layout=layout, rotary_dim=12, out=y) is y
        same_bits(y, slow.detach())
        k = randn(2, 1, 7, 16, seed=4, dtype=dtype)
        outs = rope.rotate_trusted(((x.detach(), cos, sin), (k, cos, sin)), layout=layout, rotary_dim=12)
        same_bits(outs[1], plain(k, cos, sin, layout, 12))


def test_the_rope_encoding_through_the_kernel_equals_its_plain_path(as_on_a_gpu, monkeypatch):
    enc = posenc.build("rope", head_dim=32)
    q, k = randn(1, 4, 9, 32, seed=5, dtype=torch.float32), randn(1, 2, 9, 32, seed=6, dtype=torch.float32)
    fused = enc.rotate(q, k)
    monkeypatch.setattr(rope, "_backend", lambda x: None)
    for a, b in zip(fused, enc.rotate(q, k)):
        same_bits(a, b)


def test_a_kernel_that_fails_is_said_once_and_the_plain_path_runs(as_on_a_gpu, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("no PTX for this GPU")

    monkeypatch.setattr(triton_rope, "launch", broken)
    x = randn(1, 2, 5, 8, seed=7, dtype=torch.float32)
    cos, sin = tables((1, 1, 5, 4), torch.float32, seed=8)
    with caplog.at_level(logging.WARNING, logger="posenc"):
        for _ in range(2):
            same_bits(
                rope.apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8),
                plain(x, cos, sin, "half", 8),
            )
    lines = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(lines) <= 1 and rope._TRITON_FAILED and "no PTX" in rope._TRITON_FAILED[0]


def test_only_a_cuda_device_or_the_interpreter_uses_the_kernel(monkeypatch):
    x = torch.zeros(1, 1, 2, 4)
    assert triton_rope.usable(x)  # interpreting (the fixture)
    assert not triton_rope.usable(x.to(torch.int32))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not triton_rope.usable(x)
    assert rope._backend(x) in ("c", None)  # the CPU's own kernel, never Triton
