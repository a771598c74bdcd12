"""A RoPE scaling's function checked as an encoding's class is: its signature when the scaling
enters the registry (:func:`check_signature`), and what it returns wherever it runs
(:func:`checked_output`): ``(inv_freq, attention_scaling)`` with ``inv_freq`` castable to float64,
of shape ``(dim/2,)``, finite and > 0, and ``attention_scaling`` a finite number > 0.

posenc's own scalings are tested formula by formula; a frequency of theirs out of range can only
be float64 overflow (a factor, base or attention factor too large), and is said so. A scaling from
outside posenc (``posenc.register_scaling``, an entry point of ``posenc.rope_scalings``) is told
exactly what it returned and what was expected, in one line naming it: NaN is "returns NaN", a
missing key it reads names the keys it declares, an exception it raises is named with the setting
it was called with. :meth:`posenc.encoding.rotary.scaling.Scaling.probe` runs it at a representative
setting when it is named (``RoPE.set_scaling``, ``posenc.hf.apply(...).set_scaling``, a profile's
``scalings``, ``posenc extend --scalings``), before any run.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from posenc.core.checks import shown
from posenc.core.errors import PosencError, PosencTypeError

#: How posenc calls a scaling's function.
SIGNATURE = "fn(*, dim, base, seq_len, params) -> (inv_freq float64 (dim/2,), attention_scaling)"
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
MAX_MESSAGE = 300  # characters of what a scaling's function raised, in its one line


def check_signature(compute: Callable[..., Any], source: str) -> None:
    """Refuse a ``compute`` that cannot be called as posenc calls it (:data:`SIGNATURE`), naming
    ``source`` and the signature it has; a callable without an inspectable signature passes."""
    if not callable(compute):
        raise PosencTypeError(f"{source}: its compute is {shown(compute)}, not a function {SIGNATURE}")
    try:
        signature = inspect.signature(compute)
    except (TypeError, ValueError):  # a builtin or C function: nothing to read
        return
    try:
        signature.bind(dim=2, base=10000.0, seq_len=None, params={})
    except TypeError:
        name = getattr(compute, "__qualname__", type(compute).__name__)
        raise PosencTypeError(
            f"{source}: its compute function {name}{signature} cannot be called as posenc calls it, {SIGNATURE}"
        ) from None


def setting(*, dim: int, base: float, seq_len: int | None, params: dict[str, Any]) -> str:
    """The call's arguments, as a message names them."""
    length = "" if seq_len is None else f", seq_len={seq_len}"
    return f"dim={dim}, base={base:g}{length} and keys {params}"


def raised(name: str, exc: Exception, declared: tuple[str, ...], where: str) -> PosencError:
    """The one-line error of an outside scaling whose function raised ``exc`` when called with ``where``."""
    message = " ".join(str(exc).split())  # one line, however many the exception has
    said = f"{type(exc).__name__}: {message[:MAX_MESSAGE]}" + ("..." if len(message) > MAX_MESSAGE else "")
    if isinstance(exc, KeyError):
        keys = ", ".join(declared) if declared else "none"
        said += f" (it reads a key it does not declare; the keys it declares: {keys})"
    elif isinstance(exc, TypeError) and "argument" in str(exc):
        said += f" (posenc calls a scaling's function as {SIGNATURE})"
    return PosencError(f"rope scaling {name!r} called with {where} raised {said}")


def checked_output(
    result: Any,
    *,
    name: str,
    dim: int,
    base: float,
    seq_len: int | None,
    params: dict[str, Any],
    builtin: bool,
) -> tuple[torch.Tensor, float]:
    """``result`` of scaling ``name``'s function called with ``dim``, ``base``, ``seq_len`` and
    ``params``, checked: ``(inv_freq float64 (dim/2,), attention_scaling float)``, else one
    PosencError saying what it returned (``builtin``: posenc's own, whose only way out of range is
    float overflow)."""

    def head() -> str:
        return (
            f"rope scaling {name!r} called with {setting(dim=dim, base=base, seq_len=seq_len, params=params)}"
        )

    if not isinstance(result, tuple) or len(result) != 2:
        raise PosencError(f"{head()} returned {shown(result)}, not a pair {SIGNATURE}")
    inv_freq, attention = result
    try:
        inv = torch.as_tensor(inv_freq, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise PosencError(f"{head()} returned inv_freq {shown(inv_freq)}, not float numbers") from None
    if tuple(inv.shape) != (dim // 2,):
        raise PosencError(
            f"{head()} returned inv_freq of shape {tuple(inv.shape)}; expected ({dim // 2},), one frequency "
            f"per rotated pair of the rotated dimension {dim}"
        )
    if isinstance(attention, torch.Tensor) and attention.numel() == 1:
        attention = float(attention)
    elif isinstance(attention, numbers.Real) and not isinstance(attention, bool):
        attention = float(attention)
    else:
        raise PosencError(f"{head()} returned attention_scaling {shown(attention)}, not a number")
    positive = bool((torch.isfinite(inv) & (inv > 0)).all())
    if positive and 0 < attention <= FLOAT32_MAX:
        return inv, attention
    if builtin:  # posenc's formulas: only float overflow takes them out of range
        raise PosencError(
            f"{head()} overflows float64/float32 (frequencies or attention_factor out of range); use a smaller "
            "factor, base or attention_factor"
        )
    if bool(torch.isnan(inv).any()):
        raise PosencError(f"{head()} returns NaN frequencies (inv_freq)")
    if not positive:
        raise PosencError(
            f"{head()} returns frequencies that are not finite numbers > 0 (smallest {float(inv.min()):g}, "
            f"largest {float(inv.max()):g})"
        )
    what = "NaN" if math.isnan(attention) else f"{attention:g}"
    raise PosencError(
        f"{head()} returns attention_scaling {what}; it must be a number > 0 and at most float32's largest, "
        f"{FLOAT32_MAX:.4g} (it multiplies the float32 sin and cos)"
    )


__all__ = ["FLOAT32_MAX", "SIGNATURE", "check_signature", "checked_output", "raised", "setting"]
