"""Fused rotary application: one read of ``x``, one write of the output, nothing else.

Axis legend: b batch, h heads, n positions, d head_dim, r rotary_dim, r/2 pairs.

The plain path (:func:`posenc.kernels.rotation.apply_rotary`) builds ``x1 * cos``, ``x2 * sin``,
their difference, the same for the second half, a ``cat`` (or ``stack``) and a second
``cat`` for partial rotary: about ten passes over memory, each allocating a tensor.
:func:`apply_rotary_fused` does one pass in C (``_rope.c``): per row it reads the pairs,
rotates them in float32 (float64 for float64 inputs) and writes the result in the input
dtype, with OpenMP over rows. Its vector code is AVX-512 or AVX2 as the CPU has them
(:func:`isa` says which was built; ``POSENC_KERNEL_ISA=avx2`` forces the AVX2 build on an
AVX-512 machine; an AVX-512 build rotates float32 with 256-bit vectors, measured faster for
that memory-bound case), plain C loops elsewhere; every build gives the same bits. Products and sums
are rounded exactly as in the plain path (no FMA contraction), so float32/float64 results are
bitwise equal to ``apply_rotary(...).to(x.dtype)``; half-precision ones too (the same float32
arithmetic, rounded once to nearest even). On a CUDA device the same entry points launch a Triton
kernel instead (:mod:`posenc.kernels.triton_rope`, same job, same bits).

Backward: the rotation is linear in ``x`` with matrix ``R``; its gradient is ``R^T``,
i.e. the same kernel with ``sin`` negated (``sign=-1``), again one pass. cos/sin are
constants here (tables); if they require grad the call takes the plain path.

Three entry points:

- :func:`apply_rotary_fused`: the public one; checks its arguments, and anything the
  kernel cannot do (no compiler, non-CPU tensors, ``x.ndim > 4``, cos/sin that need
  gradients, ...) takes the plain path with ONE log line per reason.
- :func:`rotate_trusted`: for the encodings, whose tables are already in the kernel's
  layout; it rotates several tensors (q and k) in one foreign call, which is what keeps a
  one-token decode step in microseconds.
- ``torch.ops.posenc.rotary``: the kernel as a ``torch.library`` custom op (fake
  implementation and autograd registered), for ``torch.compile``. Under compile
  :data:`COMPILED_PATH` picks the op or the plain path for inductor to trace and fuse (the
  two measured equal, see benchmarks/README.md).
"""

from __future__ import annotations

import ctypes
import struct

import torch

from posenc.core.checks import compute_dtype
from posenc.core.errors import PosencError
from posenc.kernels import triton_rope
from posenc.kernels._build import disabled, load, warn_once
from posenc.kernels.rotation import apply_rotary

_FUNCS = {
    torch.float32: ("posenc_rope_f32", torch.float32),
    torch.float64: ("posenc_rope_f64", torch.float64),
    torch.bfloat16: ("posenc_rope_bf16", torch.float32),
    torch.float16: ("posenc_rope_f16", torch.float32),
}
_WORDS = 22  # int64 words per job (JOB_WORDS in _rope.c)
_PARALLEL_MIN = 1 << 15  # elements; below this one thread is faster than waking a team
#: Under torch.compile: "plain" (inductor traces and fuses apply_rotary), "op" (the C kernel as an
#: opaque custom op) or "auto": the op for CPU tensors, plain elsewhere (a GPU's inductor fuses the
#: rotation into its Triton code). Measured with ``benchmarks/run_speed.py`` (compiled rope case): a
#: tie on the CPU. "auto" keeps CPU graphs off inductor's own code for the rotation: torch 2.13's
#: inductor, compiling the traced plain path of (1, 32, 2048, 128) float32 q and k with AVX-512
#: code, corrupted the heap ("double free or corruption") in 5 of 5 speed races on a 2-core AMD
#: EPYC (torch 2.15: 0 of 1; forced AVX2 code: 0 of 4). Tables that need a gradient (a learned
#: cos/sin) take the plain path on every device.
COMPILED_PATH = "auto"


def _compiled_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether a rotation being compiled goes through the custom op (see :data:`COMPILED_PATH`)."""
    if cos.requires_grad or sin.requires_grad:
        return False
    return COMPILED_PATH == "op" or (COMPILED_PATH == "auto" and x.device.type == "cpu")


_FN: dict[torch.dtype, object] = {}  # loaded entry points (a dict hit on every decode step)


def _function(dtype: torch.dtype):
    fn = _FN.get(dtype)
    if fn is not None:
        return fn
    lib = load("_rope")
    if lib is None:
        return None
    fn = getattr(lib, _FUNCS[dtype][0])
    if fn.argtypes is None:
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int], None
    _FN[dtype] = fn
    return fn


_TRITON_FAILED: list[str] = []  # the reason, once the Triton kernel failed here: the plain path after


def _backend(x: torch.Tensor) -> str | None:
    """Which fused kernel rotates ``x``: ``"c"`` (the CPU's, ``_rope.c``), ``"triton"`` (a CUDA
    device's, :mod:`posenc.kernels.triton_rope`), or None (the plain path)."""
    if x.device.type == "cpu" and x.dtype in _FUNCS and _function(x.dtype) is not None:
        return "c"
    if x.device.type != "cpu" and not _TRITON_FAILED and triton_rope.usable(x) and not disabled():
        return "triton"
    return None


def _triton(x4, cos, sin, o4, *, interleaved: bool, rotary_dim: int, sign: int, copy_rest: bool, layout: str):
    """The Triton kernel, or (once it has failed to build or run here: said once) the plain path.
    ``copy_rest`` False: ``o4`` is ``x4`` (in place), whose features past rotary_dim are already there."""
    if not _TRITON_FAILED:
        try:
            return triton_rope.launch(x4, cos, sin, o4, interleaved=interleaved, rotary_dim=rotary_dim,
                                      sign=sign, copy_rest=copy_rest)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a compile or launch failure: the plain path
            _TRITON_FAILED.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            warn_once("rope:triton", f"posenc: fused rotary kernel on {x4.device.type} failed "
                      f"({_TRITON_FAILED[0]}); using the plain path")  # fmt: skip
    wide = compute_dtype(x4.dtype)
    s = sin.to(wide) if sign > 0 else -sin.to(wide)
    return o4.copy_(apply_rotary(x4.to(wide), cos.to(wide), s, layout=layout, rotary_dim=rotary_dim))


def available() -> bool:
    """True when the compiled rotary kernel loads on this machine."""
    return load("_rope") is not None


def isa() -> str | None:
    """The vector instruction set the loaded rotary kernel was compiled for: ``"avx512"``,
    ``"avx2"`` or ``"scalar"`` (plain C loops); None when no kernel loads.

    ``-march=native`` picks it from the CPU; ``POSENC_KERNEL_ISA`` forces a build
    (:mod:`posenc.kernels._build`)."""
    lib = load("_rope")
    if lib is None:
        return None
    fn = lib.posenc_isa
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    return fn().decode()


def streamed_calls() -> int | None:
    """How many calls of the loaded rotary kernel wrote their outputs with non-temporal stores
    (calls past ``STREAM_BYTES`` whose every store is aligned, see ``_rope.c``); None when no
    kernel loads. For tests and benchmarks: which path a call took."""
    lib = load("_rope")
    if lib is None:
        return None
    fn = lib.posenc_rope_streamed_calls
    fn.restype, fn.argtypes = ctypes.c_int64, []
    return int(fn())


def table_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernel reads cos/sin in for inputs of ``dtype`` (float32, float64 for float64)."""
    return compute_dtype(dtype)


# ---------------------------------------------------------------------------
# The foreign call.
# ---------------------------------------------------------------------------


def _job(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, *, interleaved: bool,
         rotary_dim: int, sign: int) -> list[int]:  # fmt: skip
    """The kernel's int64 words for one 4-d tensor (see ``_rope.c``: ``A_X`` .. ``A_THREADS``).

    ``x``/``out`` ``(b, h, n, d)`` with unit last stride; ``cos``/``sin`` 4-d, broadcastable to
    ``(b, h, n, r/2)``, with equal strides and unit last stride (broadcast dims get stride 0).
    """
    b, h, n, d = x.shape
    xs, os, cs, cn = x.stride(), out.stride(), cos.stride(), cos.shape
    threads = torch.get_num_threads() if x.numel() >= _PARALLEL_MIN else 1
    return [
        x.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(), b, h, n, d, rotary_dim,
        int(interleaved), sign, xs[0], xs[1], xs[2], os[0], os[1], os[2],
        cs[0] if cn[0] != 1 else 0, cs[1] if cn[1] != 1 else 0, cs[2] if cn[2] != 1 else 0,
        int(out.data_ptr() != x.data_ptr()), threads,
    ]  # fmt: skip


_PACKERS: dict[int, struct.Struct] = {}  # int64 packers by word count (a dict hit per call)


def _packed(words: list[int]) -> bytes:
    """``words`` as native int64s, the kernel's job array (bytes: ctypes passes their address)."""
    packer = _PACKERS.get(len(words))
    if packer is None:
        packer = _PACKERS[len(words)] = struct.Struct(f"={len(words)}q")
    return packer.pack(*words)


def _call(dtype: torch.dtype, words: list[int], count: int) -> None:
    """Run ``count`` jobs (``words`` from :func:`_job`, concatenated) in one foreign call."""
    _function(dtype)(_packed(words), count)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, *,
            layout: str, rotary_dim: int, sign: int) -> torch.Tensor:  # fmt: skip
    """``out = R(sign * angle) x`` for any kernel-shaped call (the public path's launcher)."""
    if x.numel() == 0:  # nothing to rotate
        return out
    x4, o4 = _as4d(x), _as4d(out)
    if x4.stride(-1) != 1:
        x4 = x4.contiguous()
    dtype = table_dtype(x.dtype)
    cos, sin = _as4d(cos.to(dtype)), _as4d(sin.to(dtype))
    if cos.shape[-1] != rotary_dim // 2:  # one angle per position, broadcast over the pairs
        cos, sin = (t.expand(*t.shape[:-1], rotary_dim // 2) for t in (cos, sin))
    if cos.stride(-1) != 1 or sin.stride() != cos.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    interleaved = layout == "interleaved"
    if _backend(x) == "triton":
        _triton(x4, cos, sin, o4, interleaved=interleaved, rotary_dim=rotary_dim, sign=sign,
                copy_rest=out.data_ptr() != x.data_ptr(), layout=layout)  # fmt: skip
        return out
    _call(x.dtype, _job(x4, cos, sin, o4, interleaved=interleaved, rotary_dim=rotary_dim, sign=sign), 1)
    return out


def _output_like(x: torch.Tensor) -> torch.Tensor:
    """An output with ``x``'s strides when they have a unit last stride (a (b, n, h, d) tensor
    viewed as (b, h, n, d) stays (b, n, h, d) in memory), contiguous otherwise."""
    if x.stride(-1) == 1:
        return torch.empty_like(x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _as4d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) if t.ndim < 4 else t


# ---------------------------------------------------------------------------
# Autograd (eager) and the custom op (torch.compile).
# ---------------------------------------------------------------------------


class _FusedRotary(torch.autograd.Function):
    """Autograd wrapper: forward rotates by ``sign * angle``, backward by ``-sign * angle``
    (``R^T``), itself through this Function, so gradients of any order are available."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, rotary_dim, sign):
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.rotary_dim, ctx.sign = layout, rotary_dim, sign
        out = _output_like(x)
        return _launch(x, cos, sin, out, layout=layout, rotary_dim=rotary_dim, sign=sign)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        grad_x = _FusedRotary.apply(grad, cos, sin, ctx.layout, ctx.rotary_dim, -ctx.sign)
        return grad_x, None, None, None, None, None


@torch.library.custom_op("posenc::rotary", mutates_args=())
def rotary_op(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, rotary_dim: int, sign: int
) -> torch.Tensor:
    """The fused rotation as an operator: ``R(sign * angle) x`` in ``x.dtype``, contiguous.

    ``cos``/``sin`` broadcast against ``x[..., :rotary_dim // 2]`` and are constants (no
    gradient); the gradient of ``x`` is the same op with ``-sign``. Calls the C kernel for
    CPU tensors it can take, the plain path otherwise.
    """
    layout = "interleaved" if interleaved else "half"
    if x.device.type != "cpu" or x.dtype not in _FUNCS or not 1 <= x.ndim <= 4 or not available():
        wide = compute_dtype(x.dtype)
        s = sin.to(wide) if sign > 0 else -sin.to(wide)
        return apply_rotary(x.to(wide), cos.to(wide), s, layout=layout, rotary_dim=rotary_dim).to(
            x.dtype, memory_format=torch.contiguous_format
        )
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return _launch(x, cos, sin, out, layout=layout, rotary_dim=rotary_dim, sign=sign)


@rotary_op.register_fake
def _(x, cos, sin, interleaved, rotary_dim, sign):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _setup_context(ctx, inputs, output):
    _, cos, sin, interleaved, rotary_dim, sign = inputs
    ctx.save_for_backward(cos, sin)
    ctx.interleaved, ctx.rotary_dim, ctx.sign = interleaved, rotary_dim, sign


def _backward(ctx, grad):
    cos, sin = ctx.saved_tensors
    return rotary_op(grad, cos, sin, ctx.interleaved, ctx.rotary_dim, -ctx.sign), None, None, None, None, None


rotary_op.register_autograd(_backward, setup_context=_setup_context)


def _plain(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int):
    wide = compute_dtype(x.dtype)
    return apply_rotary(x.to(wide), cos.to(wide), sin.to(wide), layout=layout, rotary_dim=rotary_dim).to(
        x.dtype
    )


# ---------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------


def rotate_trusted(
    items: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...], *, layout: str, rotary_dim: int
) -> list[torch.Tensor]:
    """Rotate each ``(x, cos, sin)`` of ``items``; results in ``x.dtype``.

    For callers that built the tables themselves: ``x`` 4-d ``(b, h, n, d)``; ``cos``/``sin``
    4-d ``(b|1, h|1, n, r/2)`` in :func:`table_dtype` of ``x.dtype``, equal strides, unit last
    stride, no gradient. Without autograd, every tensor goes through ONE foreign call.
    """
    if torch.compiler.is_compiling():
        interleaved = layout == "interleaved"
        return [
            rotary_op(x, c, s, interleaved, rotary_dim, 1)
            if _compiled_op(x, c, s)
            else _plain(x, c, s, layout, rotary_dim)
            for x, c, s in items
        ]
    x0 = items[0][0]
    backend = _backend(x0)
    if backend is None:
        # a device without a fused kernel takes the plain path by design (no word); a CPU dtype the
        # kernel lacks is said once (a failed build says so itself)
        if x0.device.type == "cpu" and x0.dtype not in _FUNCS:
            reason = f"dtype {x0.dtype}"
            warn_once(
                f"rope:{reason}", f"posenc: fused rotary kernel cannot take {reason}; using the plain path"
            )
        return [_plain(x, c, s, layout, rotary_dim) for x, c, s in items]
    if torch.is_grad_enabled() and any(x.requires_grad for x, _, _ in items):
        return [_FusedRotary.apply(x, c, s, layout, rotary_dim, 1) for x, c, s in items]
    if backend == "triton":  # a kernel launch per tensor (no foreign call to save)
        return [
            _launch(x, c, s, _output_like(x), layout=layout, rotary_dim=rotary_dim, sign=1)
            for x, c, s in items
        ]
    interleaved = layout == "interleaved"
    outs, words = [], []
    for x, c, s in items:
        if x.stride(-1) != 1:
            x = x.contiguous()
        out = torch.empty_like(x)  # x's strides when dense (unit last stride either way)
        outs.append(out)
        if x.numel():
            words += _job(x, c, s, out, interleaved=interleaved, rotary_dim=rotary_dim, sign=1)
    if words:
        _call(x0.dtype, words, len(words) // _WORDS)
    return outs


def rotate_rows(
    xs: tuple[torch.Tensor, ...],
    cos: torch.Tensor,
    sin: torch.Tensor,
    start: int,
    *,
    layout: str,
    rotary_dim: int,
) -> list[torch.Tensor]:
    """Rotate each ``x (b, h, n, d)`` of ``xs`` by rows ``start .. start + n - 1`` of the tables
    ``cos``/``sin`` ``(size, r/2)`` (contiguous, in :func:`table_dtype` of the inputs' dtype).

    The fast path for contiguous positions (every training step, every decode step): the
    kernel reads the rows where they are, by pointer, so not even a view is made; every
    ``x`` goes through one foreign call. Anything else the kernel cannot take (autograd,
    ``torch.compile``, other devices) gets views of the rows and :func:`rotate_trusted`.
    """
    if (
        xs[0].is_cpu
        and not torch.compiler.is_compiling()
        and not (torch.is_grad_enabled() and _any_requires_grad(xs))
    ):
        outs = rows_eager(xs, cos, sin, start, interleaved=layout == "interleaved", rotary_dim=rotary_dim)
        if outs is not None:
            return outs
    c4, s4 = cos[None, None], sin[None, None]
    items = tuple((x, c4.narrow(2, start, x.shape[2]), s4.narrow(2, start, x.shape[2])) for x in xs)
    return rotate_trusted(items, layout=layout, rotary_dim=rotary_dim)


def rows_eager(
    xs: tuple[torch.Tensor, ...],
    cos: torch.Tensor,
    sin: torch.Tensor,
    start: int,
    *,
    interleaved: bool,
    rotary_dim: int,
) -> list[torch.Tensor] | None:
    """:func:`rotate_rows`'s foreign call, for a caller that has checked what it checks: CPU
    tensors, eager (not compiling), nothing that requires grad, ``(b, h, n, d)`` of one dtype.
    None when the kernel does not load for that dtype (the caller then takes its checked path)."""
    dtype = xs[0].dtype
    if _FN.get(dtype) is None and (dtype not in _FUNCS or _function(dtype) is None):
        return None
    row = cos.stride()[0]
    offset = start * row * cos.element_size()
    c_ptr, s_ptr = cos.data_ptr() + offset, sin.data_ptr() + offset
    flag = int(interleaved)
    outs, words = [], []
    for x in xs:
        st = x.stride()
        if st[3] != 1:
            x = x.contiguous()
            st = x.stride()
        out = torch.empty_like(x)  # x's strides when dense (unit last stride either way)
        outs.append(out)
        b, h, n, d = x.shape
        if not b * h * n:
            continue
        so = out.stride()
        words += [
            x.data_ptr(), out.data_ptr(), c_ptr, s_ptr, b, h, n, d, rotary_dim, flag, 1,
            st[0], st[1], st[2], so[0], so[1], so[2], 0, 0, row, int(rotary_dim != d),
            torch.get_num_threads() if b * h * n * d >= _PARALLEL_MIN else 1,
        ]  # fmt: skip
    if words:
        _call(dtype, words, len(words) // _WORDS)
    return outs


def _any_requires_grad(xs: tuple[torch.Tensor, ...]) -> bool:
    for x in xs:  # (a loop: a generator costs more than the check on a decode step)
        if x.requires_grad:
            return True
    return False


def _unsupported(x, cos, sin, layout, rotary_dim) -> str | None:
    """Why the fused kernel cannot take this call (None if it can)."""
    if torch.compiler.is_compiling():  # inside torch.compile the plain path is traced and fused
        return "torch.compile tracing"
    if layout not in ("half", "interleaved"):
        return f"layout {layout!r}"
    if x.dtype not in _FUNCS:
        return f"dtype {x.dtype}"
    if (
        cos.device != x.device
        or sin.device != x.device
        or (x.device.type != "cpu" and _backend(x) != "triton")
    ):
        return f"device {x.device.type}"
    if not 2 <= x.ndim <= 4:
        return f"{x.ndim}-d input"
    if cos.requires_grad or sin.requires_grad:
        return "cos/sin that require grad"
    if not (isinstance(rotary_dim, int) and 2 <= rotary_dim <= x.shape[-1] and rotary_dim % 2 == 0):
        return f"rotary_dim {rotary_dim!r}"
    if cos.ndim > x.ndim or sin.shape != cos.shape:
        return "cos/sin shapes"
    target = (*x.shape[:-1], rotary_dim // 2)
    for have, want in zip(reversed(cos.shape), reversed(target)):  # (torch.broadcast_shapes: 10x the time)
        if have != 1 and have != want:
            return "cos/sin not broadcastable"
    if x.device.type == "cpu" and _function(x.dtype) is None:
        return "kernel not built"
    return None


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

    Same maths as :func:`posenc.kernels.rotation.apply_rotary` (which it falls back to), but the
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
    if reason == "cos/sin not broadcastable":
        raise PosencError(
            f"cos and sin of shape {tuple(cos.shape)} do not broadcast against the {rotary_dim // 2} pairs of "
            f"x of shape {tuple(x.shape)}: each axis must be 1 or x's, the last rotary_dim // 2"
        )
    if reason is not None:
        if reason != "torch.compile tracing" and not reason.startswith("device "):  # a GPU's path by design
            warn_once(
                f"rope:{reason}", f"posenc: fused rotary kernel cannot take {reason}; using the plain path"
            )
        elif reason == "torch.compile tracing" and out is None and _compiled_op(x, cos, sin):
            return rotary_op(x, cos, sin, layout == "interleaved", rotary_dim, 1)
        y = _plain(x, cos, sin, layout, rotary_dim)
        return y if out is None else out.copy_(y)
    if needs_grad:
        return _FusedRotary.apply(x, cos.detach(), sin.detach(), layout, rotary_dim, 1)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return _launch(x, cos, sin, out, layout=layout, rotary_dim=rotary_dim, sign=1)
