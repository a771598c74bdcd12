"""The contract's properties of the hook itself: what a class declares, its outputs' shapes and
dtypes, a rotary's tensor layouts, default positions and offsets (:mod:`posenc.testing.encodings`
runs them)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from posenc.core.positions import as_positions
from posenc.testing.contract_report import PropertyResult
from posenc.testing.hook_driver import Subject, apply_hook, close, hook_inputs, nan_in


def _declares(s: Subject) -> PropertyResult:
    enc = s.make()
    cls = type(enc)
    missing = [a for a in ("paper", "equation", "__doc__") if not getattr(cls, a, None)]
    if missing:
        return PropertyResult("declares", False, f"{cls.__qualname__} has no {', '.join(missing)}")
    again = type(enc.config).from_json(enc.config.to_json())
    if again != enc.config:
        return PropertyResult(
            "declares", False, f"Config JSON round trip changed it: {again} != {enc.config}"
        )
    return PropertyResult("declares", True, f"kind {cls.kind!r}, paper, equation; Config round-trips to JSON")


#: What the shape checks feed the hooks: a batch, queries at positions 2..6 and keys at 0..6
#: (fewer queries than keys, as with a KV cache or cross-attention).
_B, _I, _J, _Q0 = 3, 5, 7, 2


def _expect(got: Any, shape: tuple[int, ...], dtype: torch.dtype | None, what: str) -> str | None:
    """Why ``got`` is not a tensor of ``shape`` (and ``dtype``), or None."""
    if not isinstance(got, torch.Tensor):
        return f"{what} returned {type(got).__name__}, not a tensor of shape {shape}"
    if tuple(got.shape) != shape:
        return f"{what} returned shape {tuple(got.shape)}, the input's is {shape}"
    if dtype is not None and got.dtype != dtype:
        return f"{what} returned {got.dtype} for {dtype} input"
    if got.is_floating_point() and bool(torch.isnan(got).any()):
        return f"{what}: NaN in the output"
    return None


def _hook_problem(enc: Any, dims: tuple[int, int, int], dtype: torch.dtype) -> str | None:
    """Call the kind's hook on inputs of known shapes; why an output does not match them, or None."""
    d_model, heads, head_dim = dims
    g = torch.Generator().manual_seed(2)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

    qp = (torch.arange(_Q0, _Q0 + _I) + 4 * torch.arange(_B)[:, None]).long()  # (b, i): row r offset 4r
    kp = (torch.arange(_J) + 4 * torch.arange(_B)[:, None]).long()  # (b, j)
    if enc.kind == "additive":
        x = randn(_B, _J, d_model)
        return _expect(enc.embed(x, positions=kp), tuple(x.shape), dtype, "embed(x (b, n, d))")
    if enc.kind == "rotary":
        q, k = randn(_B, heads, _I, head_dim), randn(_B, heads, _J, head_dim)
        out = enc.rotate(q, k, q_positions=qp, k_positions=kp)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            return f"rotate(q, k) returned {type(out).__name__}, not (q, k)"
        return _expect(out[0], tuple(q.shape), dtype, "rotate: q") or _expect(
            out[1], tuple(k.shape), dtype, "rotate: k"
        )
    if enc.kind == "bias":
        h = enc.num_heads
        out = enc.bias(_I, _J, q_positions=qp, k_positions=kp)
        return _expect(out, (_B, h, _I, _J), None, f"bias({_I} queries, {_J} keys)")
    if enc.kind == "relative":
        q, k = randn(_B, heads, _I, head_dim), randn(_B, heads, _J, head_dim)
        scores = enc.scores(q, k, q_positions=qp, k_positions=kp)
        problem = _expect(scores, (_B, heads, _I, _J), None, "scores(q (b, h, i, d), k (b, h, j, d))")
        if problem or not getattr(enc, "has_values", False):
            return problem
        probs = torch.softmax(randn(_B, heads, _I, _J), dim=-1)
        values = enc.values(probs, q_positions=qp, k_positions=kp)
        if values is None:
            return "declares has_values = True, but values(probs) returned None"
        return _expect(values, (_B, heads, _I, head_dim), None, "values(probs (b, h, i, j))")
    if enc.kind == "contextual":
        q, k = randn(_B, heads, _J, head_dim), randn(_B, heads, _J, head_dim)
        logits = (q @ k.transpose(-1, -2)) / head_dim**0.5
        logits = logits.masked_fill(~torch.ones(_J, _J, dtype=torch.bool).tril(), float("-inf"))
        return _expect(
            enc.scores(q, k, logits), tuple(logits.shape), None, "scores(q, k, logits (b, h, i, j))"
        )
    return None


def _shapes_and_dtypes(s: Subject) -> PropertyResult:
    for dtype in (torch.float32, torch.float64):
        problem = _hook_problem(s.make().to(dtype), s.dims, dtype)
        if problem is not None:
            return PropertyResult("shapes_and_dtypes", False, f"{dtype}: {problem}")
    return PropertyResult(
        "shapes_and_dtypes", True,
        f"float32 and float64 kept; {_I} queries and {_J} keys in, every output shape exactly as the input's; no NaN",
    )  # fmt: skip


def _layout(s: Subject) -> PropertyResult:
    enc: Any = s.make().double()
    if enc.kind != "rotary":
        return PropertyResult("layout", None, f"only rotary hooks take a layout (kind {enc.kind!r})")
    _, heads, head_dim = s.dims
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, heads, _I, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(2, heads, _J, head_dim, generator=g, dtype=torch.float64)
    qp, kp = torch.arange(_Q0, _Q0 + _I)[None], torch.arange(_J)[None]
    want = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    try:
        got = enc.rotate(q.transpose(1, 2), k.transpose(1, 2), q_positions=qp, k_positions=kp, layout="bshd")
    except Exception as exc:  # noqa: BLE001  (an encoding that reads every tensor as (b, h, n, d))
        return PropertyResult(
            "layout", False, f"rotate(q, k, layout='bshd') raised {type(exc).__name__}: {exc}; "
            "rotate must honour layout ('bshd': q (b, i, h, d), k (b, j, h, d))",
        )  # fmt: skip
    for name, out, ref in (("q", got[0], want[0]), ("k", got[1], want[1])):
        result = close(
            "layout", out, ref.transpose(1, 2), torch.float64,
            f"rotate(layout='bshd') vs rotate(layout='bhsd'), {name} transposed",
        )  # fmt: skip
        if not result.passed:
            return dataclasses.replace(result, detail=result.detail + ": rotate must honour layout")
    return PropertyResult(
        "layout", True, "rotate(layout='bshd') on (b, n, h, d) == rotate(layout='bhsd') transposed",
        {"max_abs_diff": result.numbers["max_abs_diff"]},
    )  # fmt: skip


def _default_positions(s: Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    want = apply_hook(enc, b, n, tensors, torch.arange(n).expand(b, n))
    result = close(
        "default_positions",
        apply_hook(enc, b, n, tensors, None),
        want,
        torch.float32,
        "positions=None vs arange",
    )
    if not result.passed or enc.kind in ("contextual", "none"):
        return result
    try:
        given = apply_hook(enc, b, n, tensors, as_positions(torch.arange(n).expand(b, n), n))
    except Exception as exc:  # noqa: BLE001
        return PropertyResult(
            "default_positions", False, f"positions as a posenc.core.positions.Positions (what attention passes) "
            f"raised {type(exc).__name__}: {exc}",
        )  # fmt: skip
    again = close("default_positions", given, want, torch.float32, "a Positions vs the tensor it holds")
    if not again.passed:
        return again
    return dataclasses.replace(result, detail="positions=None, a tensor arange and a Positions agree")


def _offsets(s: Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    positions = torch.stack([torch.arange(n) + 5 * r for r in range(b)])  # row r starts at 5r
    full = apply_hook(enc, b, n, tensors, positions)
    if nan_in(full) is not None:
        return PropertyResult("offsets", False, "rows at offsets 0, 5, 10: NaN in the output")
    again = apply_hook(enc, b, n, tensors, positions)
    if not torch.equal(full, again):
        return PropertyResult("offsets", False, "two identical calls differ (not deterministic)")
    worst = 0.0
    for r in range(b):
        row = {key: value[r : r + 1] for key, value in tensors.items()}
        result = close(
            "offsets", apply_hook(enc, 1, n, row, positions[r : r + 1])[0], full[r], torch.float32, ""
        )
        worst = max(worst, result.numbers.get("max_abs_diff", math.inf))
        if not result.passed:
            return dataclasses.replace(
                result, detail=f"row {r} (offset {5 * r}) alone differs from in the batch"
            )
    return PropertyResult(
        "offsets",
        True,
        "rows at offsets 0, 5, 10: deterministic, each alone == in the batch",
        {"max_abs_diff": worst},
    )


#: These properties, in the order they run.
HOOK_PROPERTIES = {
    "declares": _declares,
    "shapes_and_dtypes": _shapes_and_dtypes,
    "layout": _layout,
    "default_positions": _default_positions,
    "offsets": _offsets,
}
