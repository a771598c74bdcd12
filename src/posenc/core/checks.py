"""Validation helpers: every error names the parameter and the valid range.

A leaf module (it imports only :mod:`posenc.core.errors`, torch and the standard library), so the
fast paths in :mod:`posenc.kernels` can use it. Also the tensor layouts of the rotary hook:
``"bhsd"`` (batch, heads, seq, dim: attention's own) and ``"bshd"`` (batch, seq, heads, dim:
flash-attn, torchtune).
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import torch

from posenc.core.errors import PosencError, PosencTypeError

MAX_SHOWN = 80  # characters of a value an error message repeats


def shown(value: Any) -> str:
    """A value as an error message repeats it: its type and its repr cut to :data:`MAX_SHOWN`
    characters; a tensor or an array by its shape and dtype (never its whole contents)."""
    if (isinstance(value, torch.Tensor) or hasattr(value, "dtype")) and getattr(value, "shape", ()) != ():
        return f"{type(value).__name__} of shape {tuple(value.shape)} ({value.dtype})"
    text = repr(value)
    if len(text) > MAX_SHOWN:
        text = f"{text[: MAX_SHOWN - 20]}...{text[-15:]} ({len(text)} characters)"
    return f"{type(value).__name__} {text}"


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    even: bool = False,
) -> int:
    """Return ``value`` as int or raise TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int,)):
        if isinstance(value, torch.Tensor):
            if value.device.type == "meta":
                raise PosencTypeError(
                    f"{name} must be an integer, got a tensor on the meta device (it has no value)"
                )
            if value.numel() != 1 or value.is_floating_point() or value.dtype == torch.bool:
                raise PosencTypeError(f"{name} must be an integer, got {shown(value)}")
            value = int(value.item())
        elif hasattr(value, "__index__") and not isinstance(value, (float, bool)):
            value = int(value.__index__())
        else:
            raise PosencTypeError(f"{name} must be an integer, got {shown(value)}")
    kind = "an even integer" if even else "an integer"
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise PosencError(f"{name} must be {kind} {_range_text(minimum, maximum)}, got {value}")
    if even and value % 2:
        raise PosencError(f"{name} must be {kind} {_range_text(minimum, maximum)}, got {value}")
    return int(value)


def check_float(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    """Return ``value`` as a finite float or raise naming ``name`` and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PosencTypeError(f"{name} must be a number, got {shown(value)}")
    low = "" if minimum is None else (f"> {minimum}" if exclusive_minimum else f">= {minimum}")
    high = "" if maximum is None else f"<= {maximum}"
    valid = " and ".join(t for t in (low, high) if t) or "finite"
    try:
        value = float(value)
    except OverflowError:  # an int past the largest float
        raise PosencError(
            f"{name} must be a finite number ({valid}), got an integer too large for a float"
        ) from None
    if not math.isfinite(value):
        raise PosencError(f"{name} must be a finite number ({valid}), got {value}")
    if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
        raise PosencError(f"{name} must be {valid}, got {value}")
    if maximum is not None and value > maximum:
        raise PosencError(f"{name} must be {valid}, got {value}")
    return value


def did_you_mean(value: Any, choices: Any, *, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to ``value``, or ``""`` when none is close;
    never ``value`` itself (a name refused for another reason than being unknown is no typo)."""
    typed = str(value)
    others = [str(c) for c in choices if str(c) != typed]
    hint = difflib.get_close_matches(typed, others, n=1, cutoff=cutoff)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    """Raise PosencError unless ``value`` is one of ``choices`` (suggesting the closest)."""
    if value not in choices:
        raise PosencError(
            f"{name} must be one of {list(choices)}, got {value!r}{did_you_mean(value, choices)}"
        )
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool, else raise PosencTypeError naming ``name``."""
    if not isinstance(value, bool):
        raise PosencTypeError(f"{name} must be a bool (True or False), got {shown(value)}")
    return value


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """True for integer dtypes (int8 .. int64, uint8, ...), False for bool, floating and complex."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


_COMPUTE_DTYPES = {
    d: torch.promote_types(d, torch.float32)
    for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype position maths runs in: half precision in float32, float32/float64 in themselves."""
    wide = _COMPUTE_DTYPES.get(dtype)  # a dict hit: this runs on every decode step
    return torch.promote_types(dtype, torch.float32) if wide is None else wide


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"in [{minimum}, {maximum}]"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def check_not_meta(name: str, device: torch.device | str | None) -> None:
    """Meta tensors have shapes but no values; posenc checks values (positions, token ids)
    and builds tables from them, so it refuses them by name instead of failing in torch."""
    if device is None:
        return
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    if kind == "meta":
        raise PosencError(
            f"{name} is on the meta device (shapes without values); posenc needs real tensors: "
            "move the module and inputs to a real device (e.g. .to_empty(device='cpu')) first"
        )


def check_tensor(
    name: str,
    value: Any,
    *,
    ndim: int | tuple[int, ...] | None = None,
    floating: bool | None = None,
) -> torch.Tensor:
    """Check a tensor argument's type, rank and dtype family."""
    if not isinstance(value, torch.Tensor):
        raise PosencTypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.is_meta:
        check_not_meta(name, value.device)  # raises, naming it
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if not (value.ndim == ndim if isinstance(ndim, int) else any(value.ndim == a for a in allowed)):
            # (no `in`: dynamo with dynamic shapes)
            raise PosencError(
                f"{name} must have {' or '.join(map(str, allowed))} dimensions, "
                f"got shape {tuple(value.shape)}"
            )
    if floating is True and not value.is_floating_point():
        raise PosencTypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    return value


#: Tensor layouts of q/k for the rotary hook: (batch, heads, seq, dim) and (batch, seq, heads, dim).
TENSOR_LAYOUTS: tuple[str, ...] = ("bhsd", "bshd")
#: The sequence axis of a 4-d q/k in each layout.
SEQ_AXIS = {"bhsd": 2, "bshd": 1}


def check_tensor_layout(layout: Any) -> str:
    """Return ``layout`` if it is ``"bhsd"`` or ``"bshd"``, else raise PosencError naming it.

    A pair layout (``"half"``/``"interleaved"``) given here is explained: that one is the
    encoding's ``config.layout``, fixed when it is built.
    """
    if layout in TENSOR_LAYOUTS:
        return layout
    if layout in ("half", "interleaved"):
        raise PosencError(
            f"layout must be a tensor layout {list(TENSOR_LAYOUTS)} ((batch, heads, seq, dim) or "
            f"(batch, seq, heads, dim)), got {layout!r}; which features pair up ('half' or "
            "'interleaved') is the encoding's config.layout"
        )
    return check_choice("layout", layout, TENSOR_LAYOUTS)


def to_layout(table: torch.Tensor, layout: str | None) -> torch.Tensor:
    """A ``(b|1, n, k)`` per-position table shaped to broadcast against q/k in ``layout``:
    ``(b|1, 1, n, k)`` for ``"bhsd"``, ``(b|1, n, 1, k)`` for ``"bshd"``, unchanged for None."""
    if layout is None:
        return table
    return table.unsqueeze(1 if check_tensor_layout(layout) == "bhsd" else 2)
