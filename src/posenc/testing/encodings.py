"""The contract every encoding passes (``posenc.testing.check_encoding``); see :mod:`posenc.testing`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch.autograd.gradcheck import GradcheckError

from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.positions import Positions, as_positions, from_attention_mask, from_document_ids
from posenc.encoding.base import KINDS, BiasEncoding, PositionalEncoding, RotaryEncoding
from posenc.kernels.rotation import apply_rotary
from posenc.nn.attention import MultiHeadAttention
from posenc.nn.kv_cache import KVCache
from posenc.registry import check_encoding_class, get_encoding_class, model_values
from posenc.testing.contract_report import CheckReport, PropertyResult

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
    positions: torch.Tensor | Positions | None,
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


class _HookFault(BaseException):
    """What a rotary's ``rotate`` returned inside a property makes every comparison through it
    meaningless (the message says why). A BaseException, so that no ``except Exception`` on the
    way (the encoding's, or a property's around a call it expects may fail) turns it into
    another reason."""


def _rotate_fault(q: torch.Tensor, k: torch.Tensor, out: Any) -> str | None:
    """Why ``rotate(q, k)``'s ``out`` cannot be compared (not q and k of their input's shapes, or
    NaN), or None."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        return f"rotate(q, k) returned {type(out).__name__}, not (q, k): see shapes_and_dtypes"
    for name, given, got in (("q", q, out[0]), ("k", k, out[1])):
        if not isinstance(got, torch.Tensor):
            return f"rotate returned {name} as {type(got).__name__}, not a tensor: see shapes_and_dtypes"
        if got.shape != given.shape:
            return (
                f"rotate returned {name} of shape {tuple(got.shape)}, the input's is "
                f"{tuple(given.shape)}: see shapes_and_dtypes"
            )
        if got.is_floating_point() and bool(torch.isnan(got.detach()).any()):
            return f"NaN in what rotate returned ({name}): nothing compared through it holds"
    return None


def _watching(make: Callable[[], PositionalEncoding]) -> Callable[[], PositionalEncoding]:
    """``make``, with each rotary instance's ``rotate`` checked on every call (:func:`_rotate_fault`).

    The properties that see rotate only through attention need it: a wrong shape there ends in a
    torch error from inside attention, and NaN may not reach the output at all (PyTorch's fused
    CPU attention returns 0 for a row of NaN scores when the values are finite, and only q and k
    are rotated). The other kinds' outputs reach attention's output, NaN included."""

    def make_watched() -> PositionalEncoding:
        enc = make()
        if enc.kind != "rotary":
            return enc
        rotate = cast(RotaryEncoding, enc).rotate

        def watched(q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            out = rotate(q, k, *args, **kwargs)
            fault = _rotate_fault(q, k, out)
            if fault is not None:
                raise _HookFault(fault)
            return out

        setattr(enc, "rotate", watched)  # noqa: B010  (an instance attribute: this instance only)
        return enc

    return make_watched


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return math.inf
    return float((a - b).abs()[finite].max()) if finite.any() else 0.0


def _nan_in(got: torch.Tensor, want: torch.Tensor | None = None) -> str | None:
    """Which side has NaN (``"the output"``, ``"the expected output"``, ``"both outputs"``), or None:
    NaN compares as nothing, so a property never passes, nor reads differences, through it."""
    bad_got = got.is_floating_point() and bool(torch.isnan(got.detach()).any())
    bad_want = want is not None and want.is_floating_point() and bool(torch.isnan(want.detach()).any())
    if bad_got and bad_want:
        return "both outputs"
    return "the output" if bad_got else "the expected output" if bad_want else None


def _close(name: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> PropertyResult:
    """PASS when ``got`` equals ``want`` on the full tensors within the dtype's tolerance; a
    different shape or a NaN on either side fails, saying so."""
    atol, rtol = TOLERANCES[dtype]
    if got.shape != want.shape:
        return PropertyResult(name, False, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    nan = _nan_in(got, want)
    if nan is not None:
        return PropertyResult(name, False, f"{what}: NaN in {nan}")
    got, want = got.detach(), want.detach()
    diff = _diff(got, want)
    finite = want[torch.isfinite(want)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    limit = atol + rtol * scale
    return PropertyResult(name, diff <= limit, what, {"max_abs_diff": diff, "tolerance": limit})


def _perturb(enc: PositionalEncoding) -> None:
    """Stand in for trained parameters (some start at zero): add small seeded noise, in place."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for param in enc.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=g, dtype=param.dtype))


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


def _shapes_and_dtypes(s: _Subject) -> PropertyResult:
    for dtype in (torch.float32, torch.float64):
        problem = _hook_problem(s.make().to(dtype), s.dims, dtype)
        if problem is not None:
            return PropertyResult("shapes_and_dtypes", False, f"{dtype}: {problem}")
    return PropertyResult(
        "shapes_and_dtypes", True,
        f"float32 and float64 kept; {_I} queries and {_J} keys in, every output shape exactly as the input's; no NaN",
    )  # fmt: skip


def _layout(s: _Subject) -> PropertyResult:
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
        result = _close(
            "layout", out, ref.transpose(1, 2), torch.float64,
            f"rotate(layout='bshd') vs rotate(layout='bhsd'), {name} transposed",
        )  # fmt: skip
        if not result.passed:
            return dataclasses.replace(result, detail=result.detail + ": rotate must honour layout")
    return PropertyResult(
        "layout", True, "rotate(layout='bshd') on (b, n, h, d) == rotate(layout='bhsd') transposed",
        {"max_abs_diff": result.numbers["max_abs_diff"]},
    )  # fmt: skip


def _default_positions(s: _Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    want = apply_hook(enc, b, n, tensors, torch.arange(n).expand(b, n))
    result = _close(
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
    again = _close("default_positions", given, want, torch.float32, "a Positions vs the tensor it holds")
    if not again.passed:
        return again
    return dataclasses.replace(result, detail="positions=None, a tensor arange and a Positions agree")


def _offsets(s: _Subject) -> PropertyResult:
    b, n = 3, 7
    enc = s.make()
    tensors = hook_inputs(enc, b, n, dims=s.dims)
    positions = torch.stack([torch.arange(n) + 5 * r for r in range(b)])  # row r starts at 5r
    full = apply_hook(enc, b, n, tensors, positions)
    if _nan_in(full) is not None:
        return PropertyResult("offsets", False, "rows at offsets 0, 5, 10: NaN in the output")
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
    _perturb(enc)
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
    result = _close(
        "kv_cache",
        torch.cat(steps, dim=1),
        torch.cat(want, dim=1),
        torch.float64,
        f"prefill {prefill}, then {n - prefill} single-token steps vs recomputing each prefix",
    )
    if result.passed:
        return result
    declared = "declares supports_kv_cache = True"
    if enc.kind == "rotary" and not getattr(enc, "cache_unrotated_keys", False):
        declared += " and cache_unrotated_keys = False"
    return dataclasses.replace(result, detail=f"{declared}, but {result.detail}")


def _hook_scores(enc: Any, dims: tuple[int, int, int], positions: torch.Tensor):
    """What the hook makes of ``positions`` that attention scores see (None: its hook takes none):
    a bias, rotated q.k, a relative encoding's score terms (and its values term)."""
    _, heads, head_dim = dims
    b, n = positions.shape
    g = torch.Generator().manual_seed(6)
    q = torch.randn(b, heads, n, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(b, heads, n, head_dim, generator=g, dtype=torch.float64)
    if enc.kind == "bias":
        return enc.bias(n, n, q_positions=positions, k_positions=positions).double()
    if enc.kind == "rotary":
        rq, rk = enc.rotate(q, k, q_positions=positions, k_positions=positions)
        return rq @ rk.transpose(-1, -2)
    if enc.kind == "relative":
        scores = enc.scores(q, k, q_positions=positions, k_positions=positions)
        if not getattr(enc, "has_values", False):
            return scores
        probs = torch.softmax(torch.randn(b, heads, n, n, generator=g, dtype=torch.float64), dim=-1)
        values = enc.values(probs, q_positions=positions, k_positions=positions)
        return torch.cat([scores, values], dim=-1)
    return None


def _relative_invariance(s: _Subject) -> PropertyResult:
    enc = s.make().double()
    if not enc.translation_invariant:
        return PropertyResult("relative_invariance", None, "not declared (translation_invariant is False)")
    n, shift = 7, 11
    positions = torch.stack([torch.arange(n), torch.arange(n) + 3])  # rows at offsets 0 and 3
    _perturb(enc)
    with torch.no_grad():
        checks = []  # (what, shifted, as given)
        want = _hook_scores(enc, s.dims, positions)
        if want is not None:
            what = {"bias": "the bias", "rotary": "rotated q.k", "relative": "the score terms"}[enc.kind]
            checks.append((what, _hook_scores(enc, s.dims, positions + shift), want))
        layer, x = _layer(s), _tokens(s, 2, n)
        checks.append(("attention", layer(x, positions=positions + shift), layer(x, positions=positions)))
    for what, got, given in checks:
        result = _close("relative_invariance", got, given, torch.float64, what)
        if not result.passed:
            why = (
                result.detail.removeprefix(what).lstrip(": ")
                or f"changes when every position shifts by {shift}"
            )
            return dataclasses.replace(
                result, detail=f"declares translation_invariant = True, but {what}: {why}"
            )
    where = " and ".join(what for what, _, _ in checks)
    return dataclasses.replace(
        result,
        detail=f"declared translation_invariant: {where} unchanged when every position shifts by {shift}",
    )


def _grouped_kv(s: _Subject) -> PropertyResult:
    enc = s.make()
    if enc.kind in ("additive", "none"):
        return PropertyResult("grouped_kv", None, f"kind {enc.kind!r} does not act inside attention")
    if not enc.supports_grouped_kv:
        return PropertyResult("grouped_kv", None, "declares supports_grouped_kv = False")
    if s.num_heads < 2:
        return PropertyResult("grouped_kv", None, "one head: nothing to group")
    heads = s.num_heads
    grouped = MultiHeadAttention(s.d_model, heads, num_kv_heads=1, encoding=enc, causal=True).double().eval()
    full = MultiHeadAttention(s.d_model, heads, encoding=enc, causal=True).double().eval()
    _perturb(enc)
    with torch.no_grad():  # every query head reads the one key/value head: its copy per head
        full.q_proj.weight.copy_(grouped.q_proj.weight)
        full.out_proj.weight.copy_(grouped.out_proj.weight)
        for name in ("k_proj", "v_proj"):
            weight = getattr(grouped, name).weight  # (head_dim, d_model)
            getattr(full, name).weight.copy_(weight.repeat(heads, 1))
        x, positions = _tokens(s, 2, 7), torch.stack([torch.arange(7), torch.arange(7) + 3])
        got, want = grouped(x, positions=positions), full(x, positions=positions)
    result = _close(
        "grouped_kv", got, want, torch.float64,
        f"1 key/value head for {heads} query heads vs each query head with its own copy",
    )  # fmt: skip
    if result.passed:
        return result
    return dataclasses.replace(result, detail=f"declares supports_grouped_kv = True, but {result.detail}")


def _capabilities(s: _Subject) -> PropertyResult:  # noqa: C901  (one branch per declaration)
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
            _perturb(enc)
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
        result = _close(
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
    result = _close("capabilities", got, want, torch.float64, "")
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
    result = _close("capabilities", back, plain, torch.float64, "")
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
    with torch.no_grad():
        if _nan_in(fn(*args)) is not None:
            return PropertyResult("gradients", False, "NaN in the output: no gradient to check")
    try:
        torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, fast_mode=True)
    except GradcheckError as exc:
        return PropertyResult("gradients", False, f"gradcheck: {str(exc).splitlines()[0]}")
    return PropertyResult(
        "gradients", True, f"gradcheck (float64) through {len(keys)} inputs and {len(pkeys)} parameters"
    )


def _numpy_reference_agrees(s: _Subject) -> PropertyResult:
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
    "layout": _layout,
    "default_positions": _default_positions,
    "offsets": _offsets,
    "padding": _padding,
    "packing": _packing,
    "kv_cache": _kv_cache,
    "grouped_kv": _grouped_kv,
    "relative_invariance": _relative_invariance,
    "capabilities": _capabilities,
    "gradients": _gradients,
    "numpy_reference": _numpy_reference_agrees,
    "compile": _compile,
}

#: The properties that get rotary instances whose ``rotate`` is watched (:func:`_watching`):
#: those after the two that check its outputs themselves, but ``compile`` (a graph of its own).
_WATCHED = frozenset(PROPERTIES) - {"declares", "shapes_and_dtypes", "layout", "compile"}

#: The properties ``posenc compare`` checks an outside encoding against before training it
#: (every one but ``compile``, which takes seconds per encoding).
FAST_PROPERTIES: tuple[str, ...] = tuple(name for name in PROPERTIES if name != "compile")


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
    watched = dataclasses.replace(subject, make=_watching(subject.make))
    results = []
    for name in names:
        try:
            results.append(PROPERTIES[name](watched if name in _WATCHED else subject))
        except _HookFault as fault:
            results.append(PropertyResult(name, False, str(fault)))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001  (a user's class may fail in any way, sys.exit too)
            results.append(PropertyResult(name, False, f"raised {type(exc).__name__}: {exc}"))
    return CheckReport(label, cls.kind, tuple(results))


def assert_encoding(
    encoding: str | type[PositionalEncoding] | PositionalEncoding, **kwargs: Any
) -> CheckReport:
    """:func:`check_encoding`, raising AssertionError with the failed properties (for pytest)."""
    report = check_encoding(encoding, **kwargs)
    report.raise_for_failures()
    return report


__all__ = [
    "FAST_PROPERTIES",
    "PROPERTIES",
    "TOLERANCES",
    "apply_hook",
    "assert_encoding",
    "check_encoding",
    "hook_inputs",
]
