"""Blocks of an MLP-of-one-scalar bias (FIRE) and their gradient, from the C kernel ``_mlp_bias.c``.

Axis legend: h heads (MLP outputs), u hidden units, r rows of a block, c its columns (keys,
reversed), t index into the per-distance table ``a`` (``i + j - 1`` entries, as
:func:`posenc.kernels.bias_attention.distance_table`).

``bias[h, r, c] = b2[h] + sum_u w2[h, u] relu(w1[u] x + b1[u])`` with ``x = a[t] s[r]``, float32,
``-inf`` where ``a[t] < 0`` (a masked distance). :func:`forward` writes one row block;
:func:`backward` adds one block's contribution to the float64 gradients of every input.
"""

from __future__ import annotations

import array
import ctypes

import torch

from posenc.kernels._build import load

_PARALLEL_MIN = 1 << 14  # scores; below this one thread is faster


def _lib():
    lib = load("_mlp_bias")
    if lib is None:
        return None
    for name in ("posenc_mlp_bias_forward", "posenc_mlp_bias_backward"):
        fn = getattr(lib, name)
        if fn.argtypes is None:
            fn.argtypes, fn.restype = [ctypes.c_void_p], None
    return lib


def available() -> bool:
    """True when the compiled kernel loads on this machine."""
    return _lib() is not None


def _words(
    a, s, w1, b1, w2, b2, *, start, stop, keys, num_keys, out=None, grad=None, grads=None
) -> array.array:
    rows = stop - start
    heads, units = w2.shape
    threads = torch.get_num_threads() if rows * keys * heads >= _PARALLEL_MIN else 1
    o = out if out is not None else grad
    assert o is not None
    d = grads or [None] * 6
    return array.array("q", [
        out.data_ptr() if out is not None else 0, a.data_ptr(), s.data_ptr() + 4 * start,
        w1.data_ptr(), b1.data_ptr(), w2.data_ptr(), b2.data_ptr(), heads, units, rows, keys,
        start + num_keys - keys, o.stride(0), o.stride(1), threads,
        grad.data_ptr() if grad is not None else 0, o.stride(0), o.stride(1),
        *(0 if t is None else t.data_ptr() for t in (d[0], d[1], d[2], d[3], d[4], d[5])),
    ])  # fmt: skip


def forward(a, s, w1, b1, w2, b2, *, start: int, stop: int, keys: int, num_keys: int) -> torch.Tensor:
    """The bias of rows ``[start, stop)`` and the first ``keys`` keys (reversed): ``(1, h, rows, keys)``.

    All inputs float32, contiguous: ``a (t,)``, ``s (i,)``, ``w1, b1 (u,)``, ``w2 (h, u)``, ``b2 (h,)``.
    """
    out = torch.empty(w2.shape[0], stop - start, keys, dtype=torch.float32, device=a.device)
    words = _words(a, s, w1, b1, w2, b2, start=start, stop=stop, keys=keys, num_keys=num_keys, out=out)
    _lib().posenc_mlp_bias_forward(words.buffer_info()[0])
    return out[None]


def backward(a, s, w1, b1, w2, b2, grad, grads, *, start: int, stop: int, keys: int, num_keys: int) -> None:
    """Add the block's gradient: ``grad (h, rows, keys)`` float32 (the score gradient summed over
    the batch) into ``grads``, float64 tensors shaped as ``(a, s, w1, b1, w2, b2)``."""
    ds = grads[1][start:stop]
    words = _words(
        a, s, w1, b1, w2, b2, start=start, stop=stop, keys=keys, num_keys=num_keys, grad=grad,
        grads=[grads[0], ds, grads[2], grads[3], grads[4], grads[5]],
    )  # fmt: skip
    _lib().posenc_mlp_bias_backward(words.buffer_info()[0])
