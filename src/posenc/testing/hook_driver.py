"""Driving any encoding through its kind's hook, and comparing what comes out: what every property
of the contract (:mod:`posenc.testing.encodings`) is built from. :func:`hook_inputs` and
:func:`apply_hook` are public (``posenc.testing``); the rest serves the properties."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from posenc.core.errors import PosencError
from posenc.core.positions import Positions
from posenc.encoding.base import KINDS, PositionalEncoding, RotaryEncoding
from posenc.testing.contract_report import PropertyResult

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


def numpy_output(
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


@dataclass(frozen=True)
class Subject:
    """What every property gets: a factory of freshly seeded instances, and the model's dims."""

    make: Callable[[], PositionalEncoding]
    d_model: int
    num_heads: int
    compile_backend: str

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.d_model, self.num_heads, self.d_model // self.num_heads


class HookFault(BaseException):
    """What a rotary's ``rotate`` returned inside a property makes every comparison through it
    meaningless (the message says why). A BaseException, so that no ``except Exception`` on the
    way (the encoding's, or a property's around a call it expects may fail) turns it into
    another reason."""


def rotate_fault(q: torch.Tensor, k: torch.Tensor, out: Any) -> str | None:
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


def watching(make: Callable[[], PositionalEncoding]) -> Callable[[], PositionalEncoding]:
    """``make``, with each rotary instance's ``rotate`` checked on every call (:func:`rotate_fault`).

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
            fault = rotate_fault(q, k, out)
            if fault is not None:
                raise HookFault(fault)
            return out

        setattr(enc, "rotate", watched)  # noqa: B010  (an instance attribute: this instance only)
        return enc

    return make_watched


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return math.inf
    return float((a - b).abs()[finite].max()) if finite.any() else 0.0


def nan_in(got: torch.Tensor, want: torch.Tensor | None = None) -> str | None:
    """Which side has NaN (``"the output"``, ``"the expected output"``, ``"both outputs"``), or None:
    NaN compares as nothing, so a property never passes, nor reads differences, through it."""
    bad_got = got.is_floating_point() and bool(torch.isnan(got.detach()).any())
    bad_want = want is not None and want.is_floating_point() and bool(torch.isnan(want.detach()).any())
    if bad_got and bad_want:
        return "both outputs"
    return "the output" if bad_got else "the expected output" if bad_want else None


def close(name: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> PropertyResult:
    """PASS when ``got`` equals ``want`` on the full tensors within the dtype's tolerance; a
    different shape or a NaN on either side fails, saying so."""
    atol, rtol = TOLERANCES[dtype]
    if got.shape != want.shape:
        return PropertyResult(name, False, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    nan = nan_in(got, want)
    if nan is not None:
        return PropertyResult(name, False, f"{what}: NaN in {nan}")
    got, want = got.detach(), want.detach()
    diff = max_diff(got, want)
    finite = want[torch.isfinite(want)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    limit = atol + rtol * scale
    return PropertyResult(name, diff <= limit, what, {"max_abs_diff": diff, "tolerance": limit})


def perturb(enc: PositionalEncoding) -> None:
    """Stand in for trained parameters (some start at zero): add small seeded noise, in place."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for param in enc.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=g, dtype=param.dtype))
