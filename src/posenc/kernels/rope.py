"""Fused rotary application: one read of ``x``, one write of the output, nothing else.

Axis legend: b batch, h heads, n positions, d head_dim, r rotary_dim, r/2 pairs.

The plain path (:func:`posenc.rotation.apply_rotary`) builds ``x1 * cos``, ``x2 * sin``,
their difference, the same for the second half, a ``cat`` (or ``stack``) and a second
``cat`` for partial rotary: about ten passes over memory, each allocating a tensor.
:func:`apply_rotary_fused` does one pass in C (``_rope.c``): per row it reads the pairs,
rotates them in float32 (float64 for float64 inputs) and writes the result in the input
dtype, with OpenMP over rows. Products and sums are rounded exactly as in the plain path
(no FMA contraction), so float32/float64 results are bitwise equal to
``apply_rotary(...).to(x.dtype)``; half-precision ones differ by at most the final rounding.

Backward: the rotation is linear in ``x`` with matrix ``R``; its gradient is ``R^T``,
i.e. the same kernel with ``sin`` negated (``sign=-1``), again one pass. cos/sin are
constants here (tables); if they require grad the call takes the plain path.

Anything the kernel cannot do (no compiler, non-CPU tensors, ``x.ndim > 4``, cos/sin
that need gradients, ...) takes the plain path with ONE log line per reason.
"""

from __future__ import annotations

import ctypes

import torch

from posenc.base import compute_dtype
from posenc.errors import PosencError
from posenc.kernels._build import load, warn_once
from posenc.rotation import apply_rotary

_FUNCS = {
    torch.float32: ("posenc_rope_f32", torch.float32),
    torch.float64: ("posenc_rope_f64", torch.float64),
    torch.bfloat16: ("posenc_rope_bf16", torch.float32),
    torch.float16: ("posenc_rope_f16", torch.float32),
}
_PARALLEL_MIN = 1 << 15  # elements; below this one thread is faster than waking a team
_I64, _INT, _PTR = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
_ARGTYPES = [_PTR, _PTR, _PTR, _PTR, _I64, _I64, _I64, _I64, _I64, _INT, _INT] + [_I64] * 9 + [_INT, _INT]


def _function(dtype: torch.dtype):
    lib = load("_rope")
    if lib is None:
        return None
    fn = getattr(lib, _FUNCS[dtype][0])
    if fn.argtypes is None:
        fn.argtypes, fn.restype = _ARGTYPES, None
    return fn


def available() -> bool:
    """True when the compiled rotary kernel loads on this machine."""
    return load("_rope") is not None


def _unsupported(x, cos, sin, layout, rotary_dim) -> str | None:
    """Why the fused kernel cannot take this call (None if it can)."""
    if torch.compiler.is_compiling():  # inside torch.compile the plain path is traced and fused
        return "torch.compile tracing"
    if layout not in ("half", "interleaved"):
        return f"layout {layout!r}"
    if x.dtype not in _FUNCS:
        return f"dtype {x.dtype}"
    if x.device.type != "cpu" or cos.device.type != "cpu" or sin.device.type != "cpu":
        return f"device {x.device.type}"
    if not 2 <= x.ndim <= 4:
        return f"{x.ndim}-d input"
    if cos.requires_grad or sin.requires_grad:
        return "cos/sin that require grad"
    if not (isinstance(rotary_dim, int) and 2 <= rotary_dim <= x.shape[-1] and rotary_dim % 2 == 0):
        return f"rotary_dim {rotary_dim!r}"
    if cos.ndim > x.ndim or sin.shape != cos.shape:
        return "cos/sin shapes"
    try:
        torch.broadcast_shapes(cos.shape, (*x.shape[:-1], rotary_dim // 2))
    except RuntimeError:
        return "cos/sin not broadcastable"
    if _function(x.dtype) is None:
        return "kernel not built"
    return None


def _as4d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) if t.ndim < 4 else t


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, *,
            layout: str, rotary_dim: int, sign: int) -> torch.Tensor:  # fmt: skip
    """Run the kernel: ``out = R(sign * angle) x`` (features past rotary_dim copied unless in place)."""
    if x.numel() == 0:  # nothing to rotate (and no row to divide by in the kernel)
        return out
    x4, o4 = _as4d(x), _as4d(out)
    if x4.stride(-1) != 1:
        x4 = x4.contiguous()
    half = rotary_dim // 2
    table_dtype = _FUNCS[x.dtype][1]
    cos, sin = cos.to(table_dtype), sin.to(table_dtype)
    if cos.stride(-1) != 1 or sin.stride() != cos.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    c4 = _as4d(cos).expand(*x4.shape[:-1], half)  # (b, h, n, r/2), stride 0 where broadcast
    s4 = _as4d(sin).expand(*x4.shape[:-1], half)
    b, h, n, d = x4.shape
    threads = torch.get_num_threads() if x4.numel() >= _PARALLEL_MIN else 1
    _function(x.dtype)(
        x4.data_ptr(), o4.data_ptr(), c4.data_ptr(), s4.data_ptr(),
        b, h, n, d, rotary_dim, int(layout == "interleaved"), sign,
        *x4.stride()[:3], *o4.stride()[:3], *c4.stride()[:3],
        int(o4.data_ptr() != x4.data_ptr()), threads,
    )  # fmt: skip
    return out


class _FusedRotary(torch.autograd.Function):
    """Autograd wrapper: forward rotates by ``sign * angle``, backward by ``-sign * angle``
    (``R^T``), itself through this Function, so gradients of any order are available."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, rotary_dim, sign):
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.rotary_dim, ctx.sign = layout, rotary_dim, sign
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return _launch(x, cos, sin, out, layout=layout, rotary_dim=rotary_dim, sign=sign)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        grad_x = _FusedRotary.apply(grad, cos, sin, ctx.layout, ctx.rotary_dim, -ctx.sign)
        return grad_x, None, None, None, None, None


def apply_rotary_fused(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str,
    rotary_dim: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate the leading ``rotary_dim`` features of ``x`` in one pass; result in ``x.dtype``.

    Same maths as :func:`posenc.rotation.apply_rotary` (which it falls back to), but the
    result is cast back to ``x.dtype`` inside the kernel.

    Args:
        x: ``(..., n, d)``, at most 4-d (e.g. ``(b, h, n, d)``), any strides.
        cos, sin: ``(..., n, r/2)`` broadcastable against ``x[..., :r/2]``, any magnitude
            (attention_scaling and xPos decay folded in); cast to float32 (float64 for
            float64 ``x``) before use.
        layout: ``"half"`` or ``"interleaved"``.
        rotary_dim: ``r``, even, ``<= d``.
        out: optional ``(..., n, d)`` tensor of ``x``'s dtype to write into; may be ``x``
            itself (in place). Only when no gradient is needed.

    Returns:
        The rotated tensor (``out`` when given), same shape and dtype as ``x``.
    """
    reason = _unsupported(x, cos, sin, layout, rotary_dim)
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    if reason is None and out is not None:
        if needs_grad:
            reason = "out= with autograd"
        elif out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or out.ndim > 4:
            raise PosencError(
                f"out must have x's shape {tuple(x.shape)} and dtype {x.dtype}, "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        elif out.stride(-1) != 1 or (out.data_ptr() == x.data_ptr() and out.stride() != x.stride()):
            reason = "out with a non-unit last stride or aliasing x with other strides"
    if reason is not None:
        if reason != "torch.compile tracing":
            warn_once(
                f"rope:{reason}", f"posenc: fused rotary kernel cannot take {reason}; using the plain path"
            )
        wide = compute_dtype(x.dtype)
        y = apply_rotary(x.to(wide), cos.to(wide), sin.to(wide), layout=layout, rotary_dim=rotary_dim)
        return y.to(x.dtype) if out is None else out.copy_(y)
    if needs_grad:
        return _FusedRotary.apply(x, cos.detach(), sin.detach(), layout, rotary_dim, 1)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return _launch(x, cos, sin, out, layout=layout, rotary_dim=rotary_dim, sign=1)
