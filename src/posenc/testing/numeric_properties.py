"""The contract's numeric properties: gradients (gradcheck in float64), agreement with the class's
NumPy reference, and ``torch.compile(fullgraph=True)`` forward and backward
(:mod:`posenc.testing.encodings` runs them)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch.autograd.gradcheck import GradcheckError

from posenc.encoding.base import PositionalEncoding
from posenc.testing.contract_report import PropertyResult
from posenc.testing.hook_driver import Subject, apply_hook, close, hook_inputs, nan_in, numpy_output


def _gradients(s: Subject) -> PropertyResult:
    enc = s.make().double()
    b, n = 2, 5
    tensors = hook_inputs(enc, b, n, dims=s.dims, dtype=torch.float64)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in enc.named_parameters()}
    if not tensors and not params:
        return PropertyResult("gradients", None, "neither inputs nor parameters to differentiate")
    keys, pkeys = list(tensors), list(params)

    def fn(*args):
        inputs = dict(zip(keys, args[: len(keys)]))
        with torch.nn.utils.stateless._reparametrize_module(enc, dict(zip(pkeys, args[len(keys) :]))):
            out = apply_hook(enc, b, n, inputs, None)
        return out.masked_fill(torch.isinf(out), 0.0)

    args = [tensors[k].requires_grad_(True) for k in keys] + [params[k] for k in pkeys]
    with torch.no_grad():
        if nan_in(fn(*args)) is not None:
            return PropertyResult("gradients", False, "NaN in the output: no gradient to check")
    try:
        torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, fast_mode=True)
    except GradcheckError as exc:
        return PropertyResult("gradients", False, f"gradcheck: {str(exc).splitlines()[0]}")
    return PropertyResult(
        "gradients", True, f"gradcheck (float64) through {len(keys)} inputs and {len(pkeys)} parameters"
    )


def _numpy_reference_agrees(s: Subject) -> PropertyResult:
    enc = s.make().double()
    if getattr(enc, "numpy_reference", None) is None:
        return PropertyResult("numpy_reference", None, "numpy_reference = None: the class has none")
    if type(enc).numpy_reference is PositionalEncoding.numpy_reference:
        return PropertyResult("numpy_reference", None, "the class defines no numpy_reference")
    b, n = 2, 6
    tensors = hook_inputs(enc, b, n, dims=s.dims, dtype=torch.float64)
    positions = torch.stack([torch.arange(n) + 3 * r for r in range(b)])
    with torch.no_grad():
        got = apply_hook(enc, b, n, tensors, positions)
    want = torch.from_numpy(np.array(numpy_output(enc, b, n, tensors, positions.numpy()), dtype=np.float64))
    return close("numpy_reference", got, want, torch.float64, "the hook vs numpy_reference (float64)")


def _compile(s: Subject) -> PropertyResult:
    enc = s.make().double()
    b, n = 2, 5
    tensors = {
        k: t.requires_grad_() for k, t in hook_inputs(enc, b, n, dims=s.dims, dtype=torch.float64).items()
    }

    def call(inputs):
        return apply_hook(enc, b, n, inputs, None)

    torch._dynamo.reset()
    try:
        eager = call(tensors)
        compiled = torch.compile(call, fullgraph=True, backend=s.compile_backend)(tensors)
    finally:
        torch._dynamo.reset()
    result = close(
        "compile",
        compiled,
        eager,
        torch.float64,
        f"torch.compile(fullgraph=True, backend={s.compile_backend!r}) vs eager",
    )
    wrt = [*tensors.values(), *(p for p in enc.parameters() if p.requires_grad)]
    if not result.passed or not eager.requires_grad or not wrt:
        return result
    weight = torch.randn(eager.shape, generator=torch.Generator().manual_seed(5), dtype=eager.dtype)
    g_eager = torch.autograd.grad(eager, wrt, weight, allow_unused=True, retain_graph=True)
    g_comp = torch.autograd.grad(compiled, wrt, weight, allow_unused=True)
    worst = result.numbers["max_abs_diff"]
    for a, c in zip(g_eager, g_comp):
        if (a is None) != (c is None):
            return PropertyResult("compile", False, "a gradient is missing in the compiled graph")
        if a is not None and c is not None:
            grad = close("compile", c, a, torch.float64, "")
            worst = max(worst, grad.numbers.get("max_abs_diff", math.inf))
            if not grad.passed:
                return dataclasses.replace(grad, detail="gradients of the compiled hook differ from eager")
    return PropertyResult(
        "compile", True, result.detail + ", forward and backward", {**result.numbers, "max_abs_diff": worst}
    )


#: These properties, in the order they run.
NUMERIC_PROPERTIES = {
    "gradients": _gradients,
    "numpy_reference": _numpy_reference_agrees,
    "compile": _compile,
}
