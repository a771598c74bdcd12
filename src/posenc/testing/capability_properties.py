"""The contract's check of the capabilities no other property checks: a rotary's
``supports_scaling`` and ``cos_sin()``, a bias's ``constant_beyond()`` and ``factored_mlp()``,
``position_axes`` > 1 (:mod:`posenc.testing.encodings` runs it)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from posenc.encoding.base import BiasEncoding
from posenc.kernels.rotation import apply_rotary
from posenc.testing.contract_report import PropertyResult
from posenc.testing.hook_driver import TOLERANCES, Subject, apply_hook, close, hook_inputs, perturb


def _capabilities(s: Subject) -> PropertyResult:  # noqa: C901  (one branch per declaration)
    """The declarations no other property checks: a rotary's ``supports_scaling`` and
    ``cos_sin()`` (what transformers' models use), a bias's ``constant_beyond()`` and
    ``factored_mlp()``, ``position_axes`` > 1."""
    enc = s.make().double()
    checked: list[str] = []
    if enc.kind == "rotary" and getattr(enc, "supports_scaling", False):
        problem = _scaling_problem(enc, s.dims)
        if problem:
            return PropertyResult("capabilities", False, f"declares supports_scaling = True, but {problem}")
        checked.append("supports_scaling")
    if enc.kind == "rotary" and callable(getattr(enc, "cos_sin", None)):
        problem = _cos_sin_problem(enc, s.dims)
        if problem:
            return PropertyResult("capabilities", False, f"cos_sin(positions, dtype) {problem}")
        checked.append("cos_sin()")
    if isinstance(enc, BiasEncoding):
        width = enc.constant_beyond()
        if width is not None:
            perturb(enc)
            problem = _constant_beyond_problem(enc, width)
            if problem:
                return PropertyResult("capabilities", False, f"constant_beyond() = {width}, but {problem}")
            checked.append("constant_beyond()")
        problem = _factored_mlp_problem(enc)
        if problem == "":
            checked.append("factored_mlp()")
        elif problem is not None:
            return PropertyResult("capabilities", False, f"factored_mlp() {problem}")
    if enc.position_axes > 1 and enc.kind != "none":
        b, n = 2, 6
        tensors = hook_inputs(enc, b, n, dims=s.dims, dtype=torch.float64)
        seq = torch.stack([torch.arange(n), torch.arange(n) + 3])
        diagonal = seq[..., None].expand(b, n, enc.position_axes)
        result = close(
            "capabilities", apply_hook(enc, b, n, tensors, diagonal), apply_hook(enc, b, n, tensors, seq),
            torch.float64, "",
        )  # fmt: skip
        if not result.passed:
            return dataclasses.replace(
                result, detail=f"position_axes = {enc.position_axes}, but coordinates (p, ..., p) differ from "
                f"the sequence position p {result.detail}".rstrip(),
            )  # fmt: skip
        checked.append(f"position_axes = {enc.position_axes}")
    if not checked:
        return PropertyResult("capabilities", None, "declares nothing beyond what the other properties check")
    return PropertyResult("capabilities", True, "declared and found: " + ", ".join(checked))


def _cos_sin_problem(enc: Any, dims: tuple[int, int, int]) -> str | None:
    """What a transformers model does with ``cos_sin`` (turn each pair of q by one table per
    position, pairs as ``config.layout`` says) against ``rotate``; why they differ, or None."""
    _, heads, head_dim = dims
    rotary_dim = int(getattr(enc, "rotary_dim", None) or head_dim)
    layout = getattr(enc.config, "layout", "half")
    positions = torch.stack([torch.arange(6), torch.arange(6) + 4])  # (b, n)
    q = torch.randn(2, heads, 6, head_dim, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    tables = enc.cos_sin(positions, torch.float64)
    if not (isinstance(tables, (tuple, list)) and len(tables) == 2):
        return f"returned {type(tables).__name__}, not (cos, sin)"
    shape = (*positions.shape, rotary_dim // 2)
    per_head = (positions.shape[0], heads, positions.shape[1], rotary_dim // 2)  # a table per head
    for name, table in zip(("cos", "sin"), tables):
        if not isinstance(table, torch.Tensor) or tuple(table.shape) not in (shape, per_head):
            found = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
            return f"returned {name} of shape {found}; a transformers model needs positions.shape + (r/2,) = {shape}"
    cos, sin = (t.unsqueeze(1) if t.ndim == 3 else t for t in tables)  # (b, 1|h, n, r/2)
    got = apply_rotary(q, cos, sin, layout=layout, rotary_dim=rotary_dim)
    want = enc.rotate(q, q, q_positions=positions, k_positions=positions)[0]
    result = close("capabilities", got, want, torch.float64, "")
    if result.passed:
        return None
    return (
        f"tables applied to q as a transformers model does ({layout!r} pairs) differ from rotate by "
        f"{result.numbers.get('max_abs_diff', math.nan):.3g}{result.detail}"
    )


def _scaling_problem(enc: Any, dims: tuple[int, int, int]) -> str | None:
    _, heads, head_dim = dims
    g = torch.Generator().manual_seed(8)
    q = torch.randn(1, heads, 9, head_dim, generator=g, dtype=torch.float64)
    positions = torch.arange(3, 12)[None]
    rotate = enc.rotate
    plain = rotate(q, q, q_positions=positions, k_positions=positions)[0]
    scaling = {"rope_type": "linear", "factor": 2.0}
    try:
        enc.set_scaling(scaling)
        scaled = rotate(q, q, q_positions=positions, k_positions=positions)[0]
        enc.set_scaling(None)
    except Exception as exc:  # noqa: BLE001
        return f"set_scaling raised {type(exc).__name__}: {exc}"
    if torch.allclose(scaled, plain):
        return f"set_scaling({scaling}) left rotate's output as it was"
    back = rotate(q, q, q_positions=positions, k_positions=positions)[0]
    result = close("capabilities", back, plain, torch.float64, "")
    return None if result.passed else "set_scaling(None) did not give back the unscaled rotation"


def _constant_beyond_problem(enc: Any, width: int) -> str | None:
    heads = torch.arange(enc.num_heads)[:, None]
    distances = torch.tensor([0, 1, 2, 7, width, 3 * width + 5]) + width  # every one >= width
    bias = enc.evaluate((distances + 4)[None, :], torch.full((1, 1), 4), heads).detach().double()
    spread = float((bias - bias[:, :1]).abs().max())
    if spread > TOLERANCES[torch.float64][0] + 1e-6 * float(bias.abs().max()):
        return f"the bias at distances {distances.tolist()} differs by {spread:.3g} within a head"
    return None


def _factored_mlp_problem(enc: Any) -> str | None:
    """None when the bias has no factored form; "" when it agrees with the dense bias (float32)."""
    q0, k0, i, j = 6, 2, 5, 8
    terms = enc.factored_mlp(q0, k0, i, j)
    if terms is None:
        return None
    a, s_, w1, b1, w2, b2 = (t.double() for t in terms)
    t = torch.arange(i)[:, None] - torch.arange(j)[None, :] + (j - 1)  # (i, j): the distance's entry
    x = a[t] * s_[:, None]  # (i, j)
    mlp = torch.relu(x[..., None] * w1 + b1) @ w2.T + b2  # (i, j, H_out)
    got = mlp[..., : enc.num_heads].permute(2, 0, 1)
    qp, kp = torch.arange(q0, q0 + i)[None], torch.arange(k0, k0 + j)[None]
    want = enc.bias(i, j, q_positions=qp, k_positions=kp)[0].double()
    causal = (qp[0][:, None] >= kp[0][None, :]).expand_as(want)
    diff = float((got - want)[causal].abs().max())
    limit = 1e-5 + 1e-5 * float(want[causal].abs().max())
    return "" if diff <= limit else f"differs from the dense bias by {diff:.3g} (tolerance {limit:.3g})"


#: This property.
CAPABILITY_PROPERTIES = {"capabilities": _capabilities}
