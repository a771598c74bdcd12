"""The one interface every positional encoding implements.

A positional encoding acts at exactly one place in a Transformer (its *kind*);
attention calls that kind's hook and never asks which encoding it holds.

Axis legend (used in every module of posenc):
    b  batch            h  heads
    n  sequence         i  query positions     j  key positions
    d  feature dim (d_model for additive encodings, head_dim inside attention)

| kind         | hook                                                        |
|--------------|-------------------------------------------------------------|
| ``additive`` | ``embed(x (b,n,d), *, positions (b,n)) -> (b,n,d)``          |
| ``rotary``   | ``rotate(q (b,h,i,d), k (b,h,j,d), *, q_positions, k_positions, layout) -> q, k`` |
| ``bias``     | ``bias_fn(q_pos, k_pos, head)`` elementwise; ``bias(...) -> (b|1,h,i,j)``; ``score_mod(...)`` |
| ``relative`` | ``scores(q, k, *, q_positions, k_positions) -> (b,h,i,j)`` (unscaled, added to q.k); optional ``values(probs, *, q_positions, k_positions) -> (b,h,i,d)`` |
| ``contextual`` | ``scores(q, k, logits) -> logits`` (logits scaled and masked with -inf) |
| ``none``     | nothing                                                     |

Positions are data: every hook takes explicit integer positions ``(b, n)`` (or
``(1, n)``, broadcast over the batch); ``None`` means ``arange(n)``.

Tensor layouts: the rotary hook also takes q/k as ``(b, n, h, d)`` with ``layout="bshd"``
(flash-attn, torchtune); ``"bhsd"`` (the default) is ``(b, h, n, d)``, what attention uses.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Callable
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc.errors import PosencError, PosencTypeError

Kind = Literal["additive", "rotary", "bias", "relative", "contextual", "none"]
KINDS: tuple[str, ...] = ("additive", "rotary", "bias", "relative", "contextual", "none")


# ---------------------------------------------------------------------------
# Validation helpers: every error names the parameter and the valid range.
# ---------------------------------------------------------------------------


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
                raise PosencTypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
            value = int(value.item())
        elif hasattr(value, "__index__") and not isinstance(value, (float, bool)):
            value = int(value.__index__())
        else:
            raise PosencTypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
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
        raise PosencTypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    low = "" if minimum is None else (f"> {minimum}" if exclusive_minimum else f">= {minimum}")
    high = "" if maximum is None else f"<= {maximum}"
    valid = " and ".join(t for t in (low, high) if t) or "finite"
    if not math.isfinite(value):
        raise PosencError(f"{name} must be a finite number ({valid}), got {value}")
    if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
        raise PosencError(f"{name} must be {valid}, got {value}")
    if maximum is not None and value > maximum:
        raise PosencError(f"{name} must be {valid}, got {value}")
    return value


def did_you_mean(value: Any, choices: Any, *, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to ``value``, or ``""`` when none is close."""
    hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=cutoff)
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
        raise PosencTypeError(f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}")
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


def grown_table(
    cache: dict[torch.device, Any],
    device: torch.device,
    length: int,
    build: Callable[[torch.Tensor], Any],
    *,
    limit: int | None = None,
) -> Any:
    """A per-device table of at least ``length`` rows, grown by doubling.

    Returns ``cache[device]`` when it already has ``length`` rows (a tuple counts the rows
    of its first tensor); otherwise stores and returns ``build(arange(size))`` (float64
    positions) for ``size`` the next power of two ``>= max(length, 64)``, capped at ``limit``.
    """
    table = cache.get(device)
    first = table[0] if isinstance(table, tuple) else table
    if first is None or first.shape[0] < length:
        size = max(64, 1 << max(length - 1, 0).bit_length())
        size = size if limit is None else min(limit, size)
        table = cache[device] = build(torch.arange(size, dtype=torch.float64, device=device))
    return table


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
    if device is not None and torch.device(device).type == "meta":
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
    check_not_meta(name, value.device)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if not any(value.ndim == a for a in allowed):  # (no `in`: dynamo with dynamic shapes)
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


# ---------------------------------------------------------------------------
# Configs: frozen dataclasses that validate themselves and round-trip to JSON.
# ---------------------------------------------------------------------------


MAX_CONFIG_INT = 2**53  # no size or count past this can be allocated (nor is a float64 integer)


def plain_value(value: Any) -> Any:
    """NumPy scalars and 0-d integer tensors as the Python bool/int/float they hold (inside
    dicts, lists and tuples too), so that configs compare, hash and round-trip to JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and value.device.type != "meta"
        and is_integer_dtype(value.dtype)
    ):
        return int(value.item())
    if isinstance(value, dict):
        return {plain_value(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    return value


def _annotated(field: dataclasses.Field, name: str) -> bool:
    """Whether the field's annotation (a string under ``from __future__ import annotations``)
    is ``name`` or ``name | None`` (``float`` fields accept ints and keep them as floats)."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return text.replace(" ", "") in (name, f"{name}|None", f"None|{name}", f"Optional[{name}]")


class EncodingConfig:
    """Mixin for every encoding's ``@dataclass(frozen=True)`` config.

    Subclasses override :meth:`validate` and raise ValueError/TypeError naming the
    field. ``from_dict`` rejects unknown keys, suggesting the closest field.
    """

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = plain_value(getattr(self, f.name))
            if isinstance(value, int) and not isinstance(value, bool):
                if _annotated(f, "float"):  # base=10**30 given as an int: keep the float
                    value = float(value) if abs(value) < 2**1023 else value
                elif abs(value) > MAX_CONFIG_INT:  # sizes past 2**53 only overflow inside torch
                    raise PosencError(f"{f.name} must be an integer with |{f.name}| <= 2**53, got {value}")
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:  # pragma: no cover - overridden
        """Check every field; raise ValueError/TypeError naming the field."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def meanings(cls, key: str) -> dict[str, str]:
        """Field name -> meaning, for the fields whose metadata has ``key`` (``"model"`` or ``"length"``)."""
        return {f.name: f.metadata[key] for f in dataclasses.fields(cls) if key in f.metadata}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, owner: str | None = None):
        names = cls.field_names()
        for key in data:
            if key not in names:
                where = f" for encoding {owner!r}" if owner else ""
                raise PosencError(
                    f"unknown config key {key!r}{where}; valid keys: {names}{did_you_mean(key, names)}"
                )
        missing = [
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            where = f" for encoding {owner!r}" if owner else ""
            raise PosencError(f"missing required config key(s) {missing}{where}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))

    @classmethod
    def parameters(cls) -> dict[str, Any]:
        """Field name -> default (``"<required>"`` when there is none)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = "<required>"
        return out


# What a field means, carried as dataclass field metadata (read with EncodingConfig.meanings):
MODEL_VALUES = ("d_model", "head_dim", "num_heads", "bidirectional")  # filled by the model / attention
LENGTH_MEANINGS = (
    "trained_rows",  # rows of a table meant to be trained (positions 0 .. value-1)
    "extra_rows",  # opt-in untrained rows past the trained ones
    "context",  # the training context length (read by RoPE scalings)
    "paper_length",  # a length whose paper default assumes long training (T5 max_distance, ...)
)


def model_field(value: str, **kwargs: Any) -> Any:
    """A Config field the model fills in: ``"d_model"``, ``"head_dim"``, ``"num_heads"`` or
    ``"bidirectional"`` (``not causal``); see :func:`posenc.build_for_model`."""
    check_choice("model value", value, MODEL_VALUES)
    return dataclasses.field(metadata={"model": value}, **kwargs)


def length_field(meaning: str, **kwargs: Any) -> Any:
    """A Config field that is a length in positions, with its meaning (:data:`LENGTH_MEANINGS`);
    the benchmark sizes these to its training length."""
    check_choice("length meaning", meaning, LENGTH_MEANINGS)
    return dataclasses.field(metadata={"length": meaning}, **kwargs)


# ---------------------------------------------------------------------------
# Positions.
# ---------------------------------------------------------------------------


# Largest position whose float64 angle/bias tables are exact: every integer up to 2**53 is a float64.
MAX_POSITION = 2**53


class Positions(NamedTuple):
    """Integer positions ``(b|1, n)`` checked where they entered, with what is known about them
    without reading their values.

    Attention and the model build one per forward (from shapes, cache offsets, or explicit
    positions checked once) and hand it to the hooks, which trust it: no value checks, no
    ``.item()``, nothing that waits on the device. Every hook also takes a plain integer
    tensor (checked) or None (``arange``).

    Fields:
        tensor: int64 ``(b|1, n)``.
        bound: every position is ``< bound``; None when unknown without reading the tensor
            (explicit positions inside ``torch.compile``): tables are then computed on the fly.
        start: every row is ``start + arange(n)``; a table lookup is then a slice (a view).
        low: every position is ``>= low`` (the minimum when the positions were checked).
    """

    tensor: torch.Tensor
    bound: int | None
    start: int | None = None
    low: int = 0

    @property
    def length(self) -> int:
        """Positions per row, ``n``."""
        return self.tensor.shape[-1]

    @classmethod
    def arange(cls, n: int, *, start: int = 0, device: torch.device | str | None = None) -> Positions:
        """``start + arange(n)`` as ``(1, n)``."""
        tensor = torch.arange(start, start + n, device=device, dtype=torch.long).unsqueeze(0)
        if not (isinstance(n, int) and isinstance(start, int)):  # symbolic (torch.compile, dynamic
            return cls(tensor, None, start, 0)  # shapes): tables cannot be sized by it
        return cls(tensor, start + n, start, start)


def joint_bound(first: Positions, *others: Positions) -> int | None:
    """The largest ``bound`` of the positions (None if any is unknown)."""
    bound = first.bound
    for other in others:
        if bound is None or other.bound is None:
            return None
        bound = max(bound, other.bound)
    return bound


def check_position_values(positions: torch.Tensor, name: str) -> tuple[int, int | None]:
    """Raise unless every value is in ``[0, 2**53]``; return ``(min, max + 1)`` (``(0, 0)`` when empty).

    Eager: one read of the minimum and maximum (PosencError naming ``name``). Inside
    ``torch.compile``: device-side asserts (a RuntimeError with the same text) and
    ``(0, None)``, because a traced graph cannot read values.
    """
    if torch.compiler.is_compiling():
        torch._assert_async((positions >= 0).all(), f"{name} must be >= 0")
        torch._assert_async((positions <= MAX_POSITION).all(), f"{name} must be <= 2**53")
        return 0, None
    count = positions.numel()
    if not count:
        return 0, 0
    if count <= 16 and positions.ndim == 2:  # a decode step: reading a few values beats two reductions
        rows = positions.tolist()
        low, high = min(map(min, rows)), max(map(max, rows))
    else:
        low, high = (int(v) for v in torch.aminmax(positions))
    if low < 0:
        raise PosencError(f"{name} must be >= 0, got minimum {low}")
    if high > MAX_POSITION:  # float64 tables would round them
        raise PosencError(f"{name} must be <= 2**53 = {MAX_POSITION}, got maximum {high}")
    return low, high + 1


def as_positions(
    positions: torch.Tensor | Positions | None,
    seq_len: int,
    *,
    batch: int | None = None,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> Positions:
    """Check ``positions`` (or build ``arange(seq_len)``) once; returns :class:`Positions`.

    A :class:`Positions` is trusted (only its shape is checked against ``seq_len`` and
    ``batch``); a tensor must be integer ``(b|1, n)`` or ``(n,)`` with values in ``[0, 2**53]``.
    Raises PosencTypeError for non-integer dtypes and PosencError for the wrong shape or
    out-of-range values, naming ``name``.
    """
    check_not_meta("device" if positions is None else name, device)
    if positions is None:
        return Positions.arange(seq_len, device=device)
    if isinstance(positions, Positions):
        tensor = positions.tensor
        _check_position_shape(tensor, seq_len, batch, name)
        if device is not None and tensor.device != (
            device if isinstance(device, torch.device) else torch.device(device)
        ):
            positions = positions._replace(tensor=tensor.to(device))
        return positions
    if not isinstance(positions, torch.Tensor):
        raise PosencTypeError(f"{name} must be an integer torch.Tensor of shape (batch, seq) or None")
    check_not_meta(name, positions.device)
    if not is_integer_dtype(positions.dtype):
        raise PosencTypeError(f"{name} must have an integer dtype (int32/int64), got {positions.dtype}")
    if positions.ndim == 1:
        positions = positions.unsqueeze(0)
    _check_position_shape(positions, seq_len, batch, name)
    low, bound = check_position_values(positions, name)
    tensor = positions
    if positions.dtype != torch.long or (
        device is not None
        and positions.device != (device if isinstance(device, torch.device) else torch.device(device))
    ):
        tensor = positions.to(dtype=torch.long, device=device if device is not None else positions.device)
    # One position per row, the same in every row (a decode step): an arange of length 1.
    start = low if bound is not None and tensor.shape[1] == 1 and bound == low + 1 else None
    return Positions(tensor, bound, start, low)


def _check_position_shape(positions: torch.Tensor, seq_len: int, batch: int | None, name: str) -> None:
    if positions.ndim != 2:
        raise PosencError(f"{name} must have shape (batch, seq) or (seq,), got {tuple(positions.shape)}")
    if positions.shape[1] != seq_len:
        raise PosencError(
            f"{name} has {positions.shape[1]} positions per row but the input has seq length {seq_len}"
        )
    if batch is not None and positions.shape[0] not in (1, batch):
        raise PosencError(f"{name} has batch size {positions.shape[0]}; expected 1 or {batch}")


def resolve_positions(
    positions: torch.Tensor | Positions | None,
    seq_len: int,
    *,
    batch: int | None = None,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> torch.Tensor:
    """Validate ``positions`` or build ``arange(seq_len)``; returns int64 ``(b|1, n)``.

    The tensor of :func:`as_positions` (same checks and errors).
    """
    return as_positions(positions, seq_len, batch=batch, device=device, name=name).tensor


# ---------------------------------------------------------------------------
# Exact sin/cos tables from integer positions (shared by sinusoidal, RoPE, ...).
# ---------------------------------------------------------------------------


def inverse_frequencies(dim: int, base: float) -> torch.Tensor:
    """``theta_i = base^(-2i/dim)`` for ``i = 0 .. dim/2 - 1``: float64 ``(dim/2,)``.

    The frequencies of sinusoidal encodings, RoPE and its scalings, xPos and
    Transformer-XL's relative sinusoid.
    """
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


class SinCosCache:
    """cos/sin of ``position * inv_freq`` (times ``scale``) computed in float64 and cached.

    Rows for positions below ``max_cached`` are kept in a float64 table that grows by
    doubling, and cast once per dtype; positions past it are computed on the fly (still
    float64). ``scale`` (RoPE's attention scaling) multiplies the float64 values before the
    cast, which comes last. The cache is a plain attribute, not a buffer, so
    ``module.to(torch.bfloat16)`` can never degrade it.
    """

    def __init__(self, inv_freq: torch.Tensor, *, max_cached: int = 1 << 16, scale: float = 1.0) -> None:
        self.inv_freq = inv_freq.detach().to(device="cpu", dtype=torch.float64)
        self.max_cached = max_cached
        self.scale = float(scale)
        self._table: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._cast: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, ...]] = {}

    def _rows(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        def build(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            angles = n[:, None] * self.inv_freq.to(device)  # (size, d/2) float64
            if self.scale == 1.0:
                return torch.cos(angles), torch.sin(angles)
            return torch.cos(angles) * self.scale, torch.sin(angles) * self.scale

        return grown_table(self._table, device, length, build, limit=self.max_cached)

    def rows(self, bound: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` tables ``(size, d/2)`` in ``dtype`` with ``size >= bound`` rows
        (``bound <= max_cached``); row ``p`` is position ``p``."""
        cos, sin, _, _ = self._rows_cast(bound, device, dtype)
        return cos, sin

    def _rows_cast(self, bound: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """``(cos, sin, cos[None, None], sin[None, None])`` in ``dtype``, at least ``bound`` rows."""
        cast_ = self._cast.get((device, dtype))
        if cast_ is None or cast_[0].shape[0] < bound:
            cos, sin = self._rows(bound, device)
            cos, sin = cos.to(dtype), sin.to(dtype)
            cast_ = self._cast[(device, dtype)] = (cos, sin, cos[None, None], sin[None, None])
        return cast_

    def direct(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` computed from the positions, no table: ``positions.shape + (d/2,)``."""
        angles = positions.to(torch.float64)[..., None] * self.inv_freq.to(positions.device)
        cos, sin = torch.cos(angles), torch.sin(angles)
        if self.scale != 1.0:
            cos, sin = cos * self.scale, sin * self.scale
        return cos.to(dtype), sin.to(dtype)

    def lookup(
        self, positions: Positions, dtype: torch.dtype, *, head_axis: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(b|1, n, d/2)`` (``(b|1, 1, n, d/2)`` with ``head_axis``) in
        ``dtype`` for trusted ``positions``.

        Contiguous positions (``start`` known) get a slice of the table (a view); others an
        embedding-style gather; positions without a bound, or past ``max_cached``, are
        computed on the fly. Nothing here reads position values on the host.
        """
        bound = positions.bound
        if bound is None or bound > self.max_cached:
            cos, sin = self.direct(positions.tensor, dtype)
        else:
            cos, sin, cos4, sin4 = self._rows_cast(bound, positions.tensor.device, dtype)
            start = positions.start
            if start is not None:  # a view of the table (one slice: this runs every decode step)
                n = positions.length
                if head_axis:
                    return cos4.narrow(2, start, n), sin4.narrow(2, start, n)
                return cos4[0].narrow(1, start, n), sin4[0].narrow(1, start, n)
            cos, sin = F.embedding(positions.tensor, cos), F.embedding(positions.tensor, sin)
        return (cos[:, None], sin[:, None]) if head_axis else (cos, sin)

    def __call__(
        self, positions: torch.Tensor, dtype: torch.dtype = torch.float64
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(cos, sin)`` of shape ``positions.shape + (len(inv_freq),)`` in ``dtype``.

        ``positions`` is any integer tensor (checked: ``0 <= p <= 2**53``).
        """
        if positions.ndim == 2:
            return self.lookup(as_positions(positions, positions.shape[1]), dtype)
        low, bound = check_position_values(positions, "positions")
        flat = Positions(positions.reshape(1, -1).long(), bound, low=low)
        cos, sin = self.lookup(flat, dtype)
        return cos.view(*positions.shape, -1), sin.view(*positions.shape, -1)


# ---------------------------------------------------------------------------
# The base classes, one per kind.
# ---------------------------------------------------------------------------


class PositionalEncoding(nn.Module):
    """Base of every encoding. Subclasses set the class attributes below.

    Capabilities are declared here and on the kind's base class (``cache_unrotated_keys``,
    ``translation_invariant``, ``has_values``) and set per class; attention and the fast
    paths read them, never probe. Build one with ``posenc.build(name, **config)`` or
    ``Cls(Cls.Config(...))``.
    """

    kind: ClassVar[str]
    Config: ClassVar[type[EncodingConfig]]  # a frozen dataclass that also inherits EncodingConfig
    config: Any  # an instance of Config; every concrete class narrows the type to its Config
    paper: ClassVar[str] = ""  # "Author et al. YEAR, Title, https://arxiv.org/abs/..."
    equation: ClassVar[str] = ""  # the defining equation, plain text / LaTeX
    supports_kv_cache: ClassVar[bool] = True  # decode with a cache == full recompute
    # The model builds one instance for all layers by default (T5 shares its bias table;
    # parameter-free encodings share their caches). Per-layer learned ones set False.
    share_across_layers: ClassVar[bool] = False
    # Axes of a token's position: 1 for sequences; multi-axis encodings (posenc.multiaxis) set
    # 2 for (h, w) or 3 for (t, h, w) and also take (b, n) positions on the diagonal.
    position_axes: int = 1
    # Keys/values with fewer heads than queries (grouped-query attention); False where the
    # rotation differs per query head (RoPE-Mixed's learned per-head frequencies).
    supports_grouped_kv: ClassVar[bool] = True

    def __init__(self, config: EncodingConfig) -> None:
        super().__init__()
        if not isinstance(config, self.Config):
            raise PosencTypeError(
                f"{type(self).__name__} expects a {self.Config.__name__}, got {type(config).__name__}"
            )
        self.config = config

    @property
    def learnable(self) -> bool:
        return any(p.requires_grad for p in self.parameters())

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())


class AdditiveEncoding(PositionalEncoding):
    """Added to (combined with) token embeddings before the first layer."""

    kind = "additive"

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """The positional vectors alone: ``(b, n) -> (b, n, d)`` in float32.

        Content-dependent encodings (e.g. complex-valued) raise NotImplementedError.
        """
        raise NotImplementedError

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        """``x (b, n, d)`` -> ``(b, n, d)``: token embeddings with position added."""
        x = check_tensor("x", x, ndim=3, floating=True)
        tensor = resolve_positions(positions, x.shape[1], batch=x.shape[0], device=x.device)
        return x + self.encode(tensor).to(x.dtype)

    def forward(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        return self.embed(x, positions=positions)


class RotaryEncoding(PositionalEncoding):
    """Rotates queries and keys by position-dependent angles."""

    kind = "rotary"
    #: True when :meth:`set_scaling` swaps a context-extension scaling in place (RoPE).
    supports_scaling: ClassVar[bool] = False

    def set_scaling(self, scaling: dict | None) -> None:
        """Swap the context-extension scaling (a Hugging Face ``rope_scaling`` dict or None)."""
        raise NotImplementedError(f"{type(self).__name__} has no context-extension scalings")

    @property
    def cache_unrotated_keys(self) -> bool:
        """True when the frequencies depend on the current length (RoPE's dynamic scalings):
        attention then caches keys before rotation and re-rotates them every step."""
        return False

    def rotation_key(self, bound: int | None) -> object:
        """What identifies the rotation of positions ``< bound``: keys rotated under the same
        (``is``) key stay valid. Static encodings return themselves; RoPE's dynamic scalings
        return their current sin/cos cache, which changes only when the frequencies do."""
        return self

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        layout: str = "bhsd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k: ``(b, h, n, d)`` for ``layout="bhsd"``, ``(b, n, h, d)`` for ``"bshd"``."""
        raise NotImplementedError

    def forward(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        return self.rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)


class BiasEncoding(PositionalEncoding):
    """Adds a content-free bias ``bias_fn(q_pos, k_pos, head)`` to scaled scores."""

    kind = "bias"
    #: True when ``bias_fn(q, k, h)`` depends on ``q - k`` (and ``h``) only: a Toeplitz bias, which
    #: the fast path evaluates once per call on the distances (tests check declared == observed).
    translation_invariant: ClassVar[bool] = False

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    @property
    def bias_dtype(self) -> torch.dtype:
        """The dtype :meth:`bias` returns: float32, or float64 when the parameters are float64."""
        return torch.float32

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Elementwise, broadcasting definition of the bias (the single source of truth), checked."""
        raise NotImplementedError

    def evaluate(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """:meth:`bias_fn` without the checks, for callers whose positions are already checked
        (attention, the fast paths): int64 ``q_pos``, ``k_pos``, ``head`` on one device."""
        return self.bias_fn(q_pos, k_pos, head)

    def distance_bias(
        self, low: int, count: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``(h, count)`` float64: the bias at ``q_pos - k_pos = low + t``, ``t < count``.

        Only meaningful for encodings that declare ``translation_invariant``; the fast path
        evaluates it once per call instead of per score. Positions are shifted to be >= 0.
        """
        delta = torch.arange(low, low + count, device=device)
        shift = max(0, -low)  # keep both positions >= 0; the bias only sees the difference
        heads = torch.arange(self.num_heads, device=device)[:, None]
        k_pos = torch.full((1, 1), shift, dtype=torch.long, device=device)
        return self.evaluate((delta + shift)[None, :], k_pos, heads)

    def constant_beyond(self) -> int | None:
        """A distance from which on the bias is a single parameter per head (``q - k >= it``;
        T5's last bucket), or None (the default: it varies with every distance). With a
        causal mask the fast backward then forms the score gradient only on that band of
        diagonals: the far entries' gradient follows, since each softmax row's sums to zero."""
        return None

    def factored_mlp(
        self,
        q_start: int,
        k_start: int,
        num_queries: int,
        num_keys: int,
        *,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, ...] | None:
        """For a bias ``f(a[q - k] s[q])`` with ``f`` a one-hidden-layer ReLU MLP and ``a >= 0``
        (FIRE: a distance term over a per-query normaliser), float32 tensors
        ``(a, s, w1, b1, w2, b2)``: ``a`` over the ``i + j - 1`` distances as
        :meth:`distance_bias` lists them, ``s`` per query ``q_start .. q_start + i - 1``, and the MLP
        ``b2 + w2 relu(w1 x + b1)``, all differentiable in the parameters. None for every other
        bias (the default). The fast path builds and differentiates blocks from these."""
        return None

    def bias(
        self,
        num_queries: int,
        num_keys: int,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bias ``(b|1, h, i, j)`` in :attr:`bias_dtype`."""
        qp = as_positions(q_positions, num_queries, device=device, name="q_positions").tensor
        kp = as_positions(k_positions, num_keys, device=qp.device, name="k_positions").tensor
        if qp.shape[0] != kp.shape[0] and 1 not in (qp.shape[0], kp.shape[0]):
            raise PosencError(f"q_positions batch {qp.shape[0]} and k_positions batch {kp.shape[0]} differ")
        head = torch.arange(self.num_heads, device=qp.device)[None, :, None, None]
        return self.evaluate(qp[:, None, :, None], kp[:, None, None, :], head)

    def forward(self, num_queries, num_keys, *, q_positions=None, k_positions=None, device=None):
        return self.bias(
            num_queries, num_keys, q_positions=q_positions, k_positions=k_positions, device=device
        )


class RelativeEncoding(PositionalEncoding):
    """Content-dependent relative terms inside attention (Shaw, Transformer-XL)."""

    kind = "relative"
    has_values: bool = False  # adds ``values(probs)`` to the output; may be set per instance (Shaw)

    def scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor:
        """Extra *unscaled* score term ``(b, h, i, j)`` added to ``q @ k^T`` before scaling."""
        raise NotImplementedError

    def values(
        self,
        probs: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor | None:
        """Extra output term ``(b, h, i, d)`` added to ``probs @ v``; None if unused."""
        return None


class ContextualEncoding(PositionalEncoding):
    """Positions computed from content (CoPE)."""

    kind = "contextual"

    def scores(self, q: torch.Tensor, k: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``logits (b,h,i,j)`` (scaled, masked with -inf) -> new logits, same shape."""
        raise NotImplementedError


class NoEncoding(PositionalEncoding):
    """Marker base for the ``none`` kind."""

    kind = "none"
