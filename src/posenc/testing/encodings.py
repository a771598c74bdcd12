"""The contract every encoding passes (``posenc.testing.check_encoding``); see :mod:`posenc.testing`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.autograd.gradcheck import GradcheckError

from posenc.attention import MultiHeadAttention
from posenc.encoding import KINDS, PositionalEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.kv_cache import KVCache
from posenc.positions import from_attention_mask, from_document_ids
from posenc.registry import check_encoding_class, get_encoding_class, model_values
from posenc.testing.report import CheckReport, PropertyResult

#: Tolerances per dtype (max absolute and relative difference), as posenc's own tests use.
TOLERANCES = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-5)}


# ---------------------------------------------------------------------------
# Driving any encoding through its kind's hook.
# ---------------------------------------------------------------------------


def hook_inputs(
    enc: PositionalEncoding,
    batch: int,
    seq: int,
    *,
    dims: tuple[int, int, int],
    dtype=torch.float32,
    seed: int = 1,
) -> dict[str, torch.Tensor]:
    """Random inputs of the kind's hook (what gradients flow into); ``dims = (d_model, num_heads, head_dim)``."""
    d_model, num_heads, head_dim = dims
    g = torch.Generator().manual_seed(seed)
    if enc.kind == "additive":
        return {"x": torch.randn(batch, seq, d_model, generator=g, dtype=torch.float64).to(dtype)}
    if enc.kind in ("rotary", "relative", "contextual"):
        shape = (batch, num_heads, seq, head_dim)
        q = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        k = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        return {"q": q, "k": k}
    return {}


def apply_hook(
    enc: PositionalEncoding,
    batch: int,
    seq: int,
    tensors: dict[str, torch.Tensor],
    positions: torch.Tensor | None,
) -> torch.Tensor:
    """Call the kind's hook with ``positions`` for queries and keys; one tensor holding every output."""
    if enc.kind == "additive":
        return enc.embed(tensors["x"], positions=positions)  # type: ignore[operator]
    if enc.kind == "rotary":
        q, k = enc.rotate(tensors["q"], tensors["k"], q_positions=positions, k_positions=positions)  # type: ignore[operator]
        return torch.cat([q, k], dim=-1)
    if enc.kind == "bias":
        bias = enc.bias(seq, seq, q_positions=positions, k_positions=positions)  # type: ignore[operator]
        return bias.expand(batch, -1, -1, -1)
    if enc.kind == "relative":
        q, k = tensors["q"], tensors["k"]
        s = enc.scores(q, k, q_positions=positions, k_positions=positions)  # type: ignore[operator]
        if not getattr(enc, "has_values", False):
            return s
        probs = torch.softmax(s + q @ k.transpose(-1, -2), dim=-1)
        v = enc.values(probs, q_positions=positions, k_positions=positions)  # type: ignore[operator]
        return torch.cat([s, v], dim=-1)
    if enc.kind == "contextual":
        q, k = tensors["q"], tensors["k"]
        logits = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        logits = logits.masked_fill(~causal, float("-inf"))
        return enc.scores(q, k, logits)  # type: ignore[operator]
    if enc.kind == "none":
        return torch.zeros(batch, seq)
    raise PosencError(f"unknown kind {enc.kind!r}; valid kinds: {list(KINDS)}")


def _numpy_reference(
    enc: PositionalEncoding, batch: int, seq: int, tensors: dict[str, torch.Tensor], positions: np.ndarray
) -> np.ndarray:
    """The class's ``numpy_reference`` shaped like :func:`apply_hook`'s output."""
    arrays = {k: v.detach().double().numpy() for k, v in tensors.items()}
    ref = enc.numpy_reference
    if enc.kind == "additive":
        return np.asarray(ref(arrays["x"], positions))
    if enc.kind == "rotary":
        q, k = ref(arrays["q"], arrays["k"], positions, positions)
        return np.concatenate([q, k], axis=-1)
    if enc.kind == "bias":
        return np.broadcast_to(ref(positions, positions), (batch, *np.shape(ref(positions, positions))[1:]))
    if enc.kind == "relative":
        return np.asarray(ref(arrays["q"], arrays["k"], positions, positions))
    raise PosencError(f"numpy_reference is not checked for kind {enc.kind!r}")


# ---------------------------------------------------------------------------
# The properties.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Subject:
    """What every property gets: a factory of freshly seeded instances, and the model's dims."""

    make: Callable[[], PositionalEncoding]
    d_model: int
    num_heads: int
    compile_backend: str

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.d_model, self.num_heads, self.d_model // self.num_heads


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return math.inf
    return float((a - b).abs()[finite].max()) if finite.any() else 0.0


def _close(name: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> PropertyResult:
    """PASS when ``got`` equals ``want`` on the full tensors within the dtype's tolerance."""
    atol, rtol = TOLERANCES[dtype]
    if got.shape != want.shape:
        return PropertyResult(name, False, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    diff = _diff(got.detach(), want.detach())
    scale = float(want.detach().abs()[torch.isfinite(want.detach())].max()) if want.numel() else 0.0
    limit = atol + rtol * scale
    return PropertyResult(name, diff <= limit, what, {"max_abs_diff": diff, "tolerance": limit})


def _declares(s: _Subject) -> PropertyResult:
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


def _shapes_and_dtypes(s: _Subject) -> PropertyResult:
    b, n = 3, 7
    for dtype in (torch.float32, torch.float64):
        enc = s.make().to(dtype)
        tensors = hook_inputs(enc, b, n, dims=s.dims, dtype=dtype)
        out = apply_hook(enc, b, n, tensors, None)
        if out.shape[0] != b:
            return PropertyResult("shapes_and_dtypes", False, f"{dtype}: batch {out.shape[0]} != {b}")
        if enc.kind in ("additive", "rotary") and out.dtype != dtype:
            return PropertyResult("shapes_and_dtypes", False, f"{dtype} input gave {out.dtype}")
        if enc.kind == "additive" and out.shape != tensors["x"].shape:
            return PropertyResult("shapes_and_dtypes", False, f"embed shape {tuple(out.shape)} != input's")
        if enc.kind in ("bias", "relative", "contextual") and out.shape[-2] != n:
            return PropertyResult(
                "shapes_and_dtypes", False, f"score shape {tuple(out.shape)} has no query axis {n}"
            )
        if torch.isnan(out).any():
            return PropertyResult("shapes_and_dtypes", False, f"{dtype}: NaN in the output")
    return PropertyResult(
        "shapes_and_dtypes", True, "float32 and float64 kept, shapes as the kind's hook says, no NaN"
    )


def _default_positions(s: _Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    got = apply_hook(enc, b, n, tensors, None)
    want = apply_hook(enc, b, n, tensors, torch.arange(n).expand(b, n))
    return _close("default_positions", got, want, torch.float32, "positions=None vs arange")


def _offsets(s: _Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    positions = torch.stack([torch.arange(n) + 5 * r for r in range(b)])  # row r starts at 5r
    full = apply_hook(enc, b, n, tensors, positions)
    again = apply_hook(enc, b, n, tensors, positions)
    if not torch.equal(full, again):
        return PropertyResult("offsets", False, "two identical calls differ (not deterministic)")
    worst = 0.0
    for r in range(b):
        row = {key: value[r : r + 1] for key, value in tensors.items()}
        result = _close(
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


class _Layer(torch.nn.Module):
    """An attention layer around the encoding: additive ones embed first, others act inside."""

    def __init__(self, enc: PositionalEncoding, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.enc = enc
        inside = None if enc.kind == "additive" else enc
        self.attn = MultiHeadAttention(d_model, num_heads, encoding=inside, causal=True)

    def forward(self, x, *, positions=None, padding_mask=None, cache=None, document_ids=None):
        if self.enc.kind == "additive":
            if positions is None:
                start = 0 if cache is None else cache.length
                positions = torch.arange(start, start + x.shape[1]).expand(x.shape[0], -1)
                if padding_mask is not None:
                    positions = from_attention_mask(padding_mask)
            x = self.enc.embed(x, positions=positions)  # type: ignore[operator]
        return self.attn(
            x, positions=positions, padding_mask=padding_mask, cache=cache, document_ids=document_ids
        )


def _layer(s: _Subject) -> _Layer:
    enc = s.make()
    layer = _Layer(enc, s.d_model, s.num_heads).double().eval()
    with torch.no_grad():  # stand in for trained parameters (some start at zero)
        g = torch.Generator().manual_seed(7)
        for param in enc.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=g, dtype=param.dtype))
    return layer


def _tokens(s: _Subject, b: int, n: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(b, n, s.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _padding(s: _Subject) -> PropertyResult:
    layer, pad, n = _layer(s), 3, 6
    x = _tokens(s, 1, n)
    padded = torch.cat([_tokens(s, 1, pad, seed=4), x], dim=1)
    mask = torch.tensor([[False] * pad + [True] * n])
    with torch.no_grad():
        got = layer(padded, padding_mask=mask)[:, pad:]
        want = layer(x)
    return _close(
        "padding", got, want, torch.float64, f"{pad} left pads + {n} tokens vs the {n} tokens alone"
    )


def _packing(s: _Subject) -> PropertyResult:
    layer, lengths = _layer(s), (4, 5)
    docs = [_tokens(s, 1, n, seed=10 + i) for i, n in enumerate(lengths)]
    ids = torch.tensor([[i for i, n in enumerate(lengths) for _ in range(n)]])
    with torch.no_grad():
        got = layer(torch.cat(docs, dim=1), positions=from_document_ids(ids), document_ids=ids)
        want = torch.cat([layer(doc) for doc in docs], dim=1)
    return _close("packing", got, want, torch.float64, f"documents of {list(lengths)} packed vs each alone")


def _kv_cache(s: _Subject) -> PropertyResult:
    enc = s.make()
    if not enc.supports_kv_cache:
        return PropertyResult("kv_cache", None, "declares supports_kv_cache = False")
    layer, n, prefill = _layer(s), 9, 4
    x = _tokens(s, 2, n)
    cache = KVCache()
    with torch.no_grad():
        steps = [layer(x[:, :prefill], cache=cache)]
        steps += [layer(x[:, t : t + 1], cache=cache) for t in range(prefill, n)]
        # each step against a full recompute of the prefix it ends (a length-dependent encoding,
        # e.g. dynamic NTK, sees a different length in each)
        want = [layer(x[:, :prefill])] + [layer(x[:, : t + 1])[:, -1:] for t in range(prefill, n)]
    return _close(
        "kv_cache",
        torch.cat(steps, dim=1),
        torch.cat(want, dim=1),
        torch.float64,
        f"prefill {prefill}, then {n - prefill} single-token steps vs recomputing each prefix",
    )


def _relative_invariance(s: _Subject) -> PropertyResult:
    enc = s.make()
    if not enc.translation_invariant:
        return PropertyResult("relative_invariance", None, "not declared (translation_invariant is False)")
    layer, n, shift = _layer(s), 7, 11
    x = _tokens(s, 2, n)
    positions = torch.arange(n).expand(2, n)
    with torch.no_grad():
        got = layer(x, positions=positions + shift)
        want = layer(x, positions=positions)
    return _close("relative_invariance", got, want, torch.float64, f"every position shifted by {shift}")


def _gradients(s: _Subject) -> PropertyResult:
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
    try:
        torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, fast_mode=True)
    except GradcheckError as exc:
        return PropertyResult("gradients", False, f"gradcheck: {str(exc).splitlines()[0]}")
    return PropertyResult(
        "gradients", True, f"gradcheck (float64) through {len(keys)} inputs and {len(pkeys)} parameters"
    )


def _numpy_reference_agrees(s: _Subject) -> PropertyResult:
    enc = s.make().double()
    if type(enc).numpy_reference is PositionalEncoding.numpy_reference:
        return PropertyResult("numpy_reference", None, "the class defines no numpy_reference")
    b, n = 2, 6
    tensors = hook_inputs(enc, b, n, dims=s.dims, dtype=torch.float64)
    positions = torch.stack([torch.arange(n) + 3 * r for r in range(b)])
    with torch.no_grad():
        got = apply_hook(enc, b, n, tensors, positions)
    want = torch.from_numpy(
        np.array(_numpy_reference(enc, b, n, tensors, positions.numpy()), dtype=np.float64)
    )
    return _close("numpy_reference", got, want, torch.float64, "the hook vs numpy_reference (float64)")


def _compile(s: _Subject) -> PropertyResult:
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
    result = _close(
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
            grad = _close("compile", c, a, torch.float64, "")
            worst = max(worst, grad.numbers.get("max_abs_diff", math.inf))
            if not grad.passed:
                return dataclasses.replace(grad, detail="gradients of the compiled hook differ from eager")
    return PropertyResult(
        "compile", True, result.detail + ", forward and backward", {**result.numbers, "max_abs_diff": worst}
    )


#: Property name -> check, in the order they run and are reported.
PROPERTIES: dict[str, Callable[[_Subject], PropertyResult]] = {
    "declares": _declares,
    "shapes_and_dtypes": _shapes_and_dtypes,
    "default_positions": _default_positions,
    "offsets": _offsets,
    "padding": _padding,
    "packing": _packing,
    "kv_cache": _kv_cache,
    "relative_invariance": _relative_invariance,
    "gradients": _gradients,
    "numpy_reference": _numpy_reference_agrees,
    "compile": _compile,
}


# ---------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------


def _subject(encoding: Any, d_model: int, num_heads: int, config: dict[str, Any], backend: str):
    if isinstance(encoding, PositionalEncoding):
        cls, label = type(encoding), f"{type(encoding).__module__}:{type(encoding).__qualname__}"
        config = {**encoding.config.to_dict(), **config}
    elif isinstance(encoding, str):
        cls, label = get_encoding_class(encoding), encoding
    elif isinstance(encoding, type):
        cls = check_encoding_class(encoding, source="encoding")
        label = f"{cls.__module__}:{cls.__qualname__}"
    else:
        raise PosencTypeError(
            f"encoding must be a registry name, an import spec, an encoding class or instance, got {type(encoding).__name__}"
        )
    merged = {**model_values(cls, d_model=d_model, num_heads=num_heads, causal=True), **config}
    parsed = cls.Config.from_dict(merged, owner=label)  # a bad config fails here, before any property

    def make() -> PositionalEncoding:
        torch.manual_seed(0)
        return cls(parsed)

    return _Subject(make, d_model, num_heads, backend), cls, label


def check_encoding(
    encoding: str | type[PositionalEncoding] | PositionalEncoding,
    *,
    properties: Iterable[str] | None = None,
    d_model: int = 16,
    num_heads: int = 2,
    compile_backend: str = "aot_eager",
    **config: Any,
) -> CheckReport:
    """Run the contract (:data:`PROPERTIES`, or the ``properties`` named) on ``encoding``.

    Args:
        encoding: a registry name, an import spec ``"package.module:Class"``, a class or an
            instance (its config is used; ``config`` overrides fields).
        properties: names from :data:`PROPERTIES` (default: all, in order).
        d_model, num_heads: the small model the encoding is built for.
        compile_backend: ``torch.compile`` backend of the ``compile`` property (``"aot_eager"``
            traces forward and backward without generating code; ``"inductor"`` compiles).
        config: Config fields of the encoding.

    Returns:
        A :class:`CheckReport`; a property that raises is a failure naming the exception.
    """
    names = list(PROPERTIES) if properties is None else list(properties)
    for name in names:
        if name not in PROPERTIES:
            raise PosencError(f"unknown property {name!r}; valid: {list(PROPERTIES)}")
    subject, cls, label = _subject(encoding, d_model, num_heads, config, compile_backend)
    results = []
    for name in names:
        try:
            results.append(PROPERTIES[name](subject))
        except Exception as exc:  # a user's class may fail in any way: report it as this property's failure
            results.append(PropertyResult(name, False, f"raised {type(exc).__name__}: {exc}"))
    return CheckReport(label, cls.kind, tuple(results))


def assert_encoding(
    encoding: str | type[PositionalEncoding] | PositionalEncoding, **kwargs: Any
) -> CheckReport:
    """:func:`check_encoding`, raising AssertionError with the failed properties (for pytest)."""
    report = check_encoding(encoding, **kwargs)
    report.raise_for_failures()
    return report


__all__ = ["PROPERTIES", "TOLERANCES", "apply_hook", "assert_encoding", "check_encoding", "hook_inputs"]
