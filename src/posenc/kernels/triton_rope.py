"""Fused rotary on a CUDA device: one Triton kernel, one read of ``x`` and one write of the result.

Axis legend: b batch, h heads, n positions, d head_dim, r rotary_dim, r/2 pairs.

The GPU's counterpart of ``_rope.c`` (the CPU's kernel): the same job (``x (b, h, n, d)`` with
any strides and a unit last stride, ``cos``/``sin`` ``(b|1, h|1, n, r/2)`` broadcast by stride
0, features r..d-1 copied), the same arithmetic in float32 (float64 for float64 inputs), no
fused multiply-add (the kernel is compiled with ``enable_fp_fusion=False``), and bfloat16
widened and rounded to nearest even with integer operations, so the result has the plain
PyTorch path's bits. ``sign=-1`` rotates by the transpose (the backward pass).

Triton is not a dependency of posenc: it ships with PyTorch's CUDA builds, and this module
imports it only when a CUDA tensor is rotated (:func:`usable`). Under ``TRITON_INTERPRET=1``
the same kernel runs on CPU tensors, which is how it is tested without a GPU
(tests/unit/kernels/test_triton_rope.py).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

#: dtypes the kernel takes: x in, result out; the arithmetic is in table_dtype (float32, float64 for float64).
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
ROWS_PER_PROGRAM = 2048  # pairs per program: enough work per program, few programs for a decode step


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    """True when ``import triton`` works (a CUDA build of PyTorch brings it)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def usable(x: torch.Tensor) -> bool:
    """True when this kernel can rotate ``x``: a CUDA tensor (any tensor when interpreting) of a
    dtype it takes, and Triton importable."""
    on_device = x.device.type == "cuda" or (interpreting() and x.device.type == "cpu")
    return on_device and x.dtype in DTYPES and triton_importable()


@functools.lru_cache(maxsize=2)
def _kernel(interpret: bool) -> Any:
    """The jitted kernel (built once per mode: Triton reads TRITON_INTERPRET when it decorates)."""
    import triton
    import triton.language as tl

    @triton.jit
    def rope(X, Y, C, S, H, N, HALF, REST, sxb, sxh, sxn, sob, soh, son, scb, sch, scn,
             BLOCK_N: tl.constexpr, HALF_P: tl.constexpr, REST_P: tl.constexpr, INTER: tl.constexpr,
             NEG: tl.constexpr, BF16: tl.constexpr):  # fmt: skip
        bh = tl.program_id(0)
        b, h = bh // H, bh % H
        rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        p = tl.arange(0, HALF_P)
        m = (rows < N)[:, None] & (p < HALF)[None, :]
        xr = X + b * sxb + h * sxh + rows[:, None] * sxn
        orow = Y + b * sob + h * soh + rows[:, None] * son
        cr = b * scb + h * sch + rows[:, None] * scn + p[None, :]
        wide = C.dtype.element_ty
        if INTER:
            i1, i2 = 2 * p, 2 * p + 1
        else:
            i1, i2 = p, p + HALF
        x1 = tl.load(xr + i1[None, :], mask=m, other=0.0)
        x2 = tl.load(xr + i2[None, :], mask=m, other=0.0)
        if BF16:  # the bits, shifted: exact for every value (subnormals too)
            x1 = (x1.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            x2 = (x2.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            x1, x2 = x1.to(wide), x2.to(wide)
        c = tl.load(C + cr, mask=m, other=0.0)
        s = tl.load(S + cr, mask=m, other=0.0)
        if NEG:
            s = -s
        y1, y2 = x1 * c - x2 * s, x1 * s + x2 * c
        if BF16:  # round to nearest even, NaN -> 0x7fc0 (as c10::BFloat16 and _rope.c)
            u1, u2 = y1.to(tl.uint32, bitcast=True), y2.to(tl.uint32, bitcast=True)
            u1 = tl.where(y1 != y1, 0x7FC00000, u1 + 0x7FFF + ((u1 >> 16) & 1)) >> 16
            u2 = tl.where(y2 != y2, 0x7FC00000, u2 + 0x7FFF + ((u2 >> 16) & 1)) >> 16
            tl.store(orow + i1[None, :], u1.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=m)
            tl.store(orow + i2[None, :], u2.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=m)
        else:
            tl.store(orow + i1[None, :], y1.to(Y.dtype.element_ty), mask=m)
            tl.store(orow + i2[None, :], y2.to(Y.dtype.element_ty), mask=m)
        if REST_P > 0:  # features r..d-1 pass through
            e = 2 * HALF + tl.arange(0, REST_P)
            mr = (rows < N)[:, None] & (e < 2 * HALF + REST)[None, :]
            tl.store(orow + e[None, :], tl.load(xr + e[None, :], mask=mr), mask=mr)

    return rope


def launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, *,
           interleaved: bool, rotary_dim: int, sign: int, copy_rest: bool) -> torch.Tensor:  # fmt: skip
    """``out = R(sign * angle) x`` for 4-d ``x``/``out`` ``(b, h, n, d)`` with a unit last stride and
    4-d ``cos``/``sin`` broadcastable to ``(b, h, n, r/2)`` (equal strides, unit last stride) in
    float32 (float64 for float64 ``x``). ``copy_rest``: write features r..d-1 too."""
    import triton

    b, h, n, d = x.shape
    half = rotary_dim // 2
    if not (b * h * n and half):
        return out
    cs, cn = cos.stride(), cos.shape
    sc = [cs[i] if cn[i] != 1 else 0 for i in range(3)]
    half_p = triton.next_power_of_2(half)
    rest = d - rotary_dim if copy_rest else 0
    block_n = max(1, min(triton.next_power_of_2(n), ROWS_PER_PROGRAM // half_p))
    grid = (b * h, triton.cdiv(n, block_n))
    xs, os_ = x.stride(), out.stride()
    _kernel(interpreting())[grid](
        x, out, cos, sin, h, n, half, rest, xs[0], xs[1], xs[2], os_[0], os_[1], os_[2], *sc,
        BLOCK_N=block_n, HALF_P=half_p, REST_P=triton.next_power_of_2(rest) if rest else 0,
        INTER=interleaved, NEG=sign < 0, BF16=x.dtype == torch.bfloat16, enable_fp_fusion=False,
    )  # fmt: skip
    return out
