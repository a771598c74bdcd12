"""Positions with more than one axis: patches of an image, frames of a video, text between them.

Axis legend: b batch, n sequence, a position axes (``(h, w)`` for images, ``(t, h, w)`` for
video and multimodal sequences), in that order everywhere.

A sequence position is one integer per token, ``(b, n)``. A vision model's token sits on a
grid and has one integer per axis, ``(b, n, a)``: patch ``(row, column)`` of a ViT, ``(t, h, w)``
of a video patch or of Qwen2-VL's multimodal positions. The multi-axis encodings of posenc
(:mod:`posenc.encoding.absolute.axial`, :mod:`posenc.encoding.rotary.rope_axial`) take either:

* ``(b, n, a)`` integer coordinates, ``a`` equal to the encoding's ``position_axes`` (anything
  else is refused by name);
* ``(b, n)`` sequence positions, or None (``arange``): every axis gets the same value, the
  *diagonal* ``(p, p, ..., p)``. That is how Qwen2-VL places text tokens, so M-RoPE on text is
  plain RoPE, and it lets every 1-D tool (KV cache, the contract suite, the benchmark) drive a
  multi-axis encoding unchanged.

A coordinate of ``-1`` on *every* axis (:data:`NO_POSITION`) marks a token without a grid position
(a class or register token of a ViT): rotary encodings leave it unrotated (as EVA-02 and
RoPE-ViT do), additive ones add nothing to it (as MAE's class token gets a zero vector).

Helpers build the coordinates:

>>> grid_positions((2, 3))[0].tolist()             # row-major patches of a 2 x 3 grid
[[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
>>> grid_positions((1, 2), prefix=1)[0].tolist()   # a class token first
[[-1, -1], [0, 0], [0, 1]]
>>> multimodal_positions([2, (1, 2, 2), 1])[0].tolist()   # Qwen2-VL: text, an image, text
[[0, 0, 0], [1, 1, 1], [2, 2, 2], [2, 2, 3], [2, 3, 2], [2, 3, 3], [4, 4, 4]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from posenc.core.checks import check_float, check_int, check_not_meta, is_integer_dtype
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.positions import MAX_POSITION, Positions, as_positions

#: The coordinate (on every axis) of a token without a grid position (class / register tokens).
NO_POSITION = -1
#: Names of the axes, by count, for messages.
AXIS_NAMES = {1: "(p)", 2: "(h, w)", 3: "(t, h, w)"}


class AxisPositions(NamedTuple):
    """Integer coordinates ``(b|1, n, a)`` checked where they entered (the multi-axis
    counterpart of :class:`posenc.core.positions.Positions`); hooks trust it.

    Fields:
        tensor: int64 ``(b|1, n, a)``; ``-1`` on every axis marks a token without a position.
        bound: every coordinate is ``< bound``; None when unknown (inside ``torch.compile``).
        diagonal: when every token's coordinates are equal (sequence positions, text tokens):
            those positions as a 1-D :class:`~posenc.core.positions.Positions`, so encodings can take
            RoPE's own table path; None otherwise.
        has_none: some token may carry :data:`NO_POSITION` (False only when known not to).
    """

    tensor: torch.Tensor
    bound: int | None
    diagonal: Positions | None = None
    has_none: bool = True

    @property
    def axes(self) -> int:
        return self.tensor.shape[-1]

    @property
    def length(self) -> int:
        return self.tensor.shape[1]

    @classmethod
    def from_sequence(cls, positions: Positions, axes: int) -> AxisPositions:
        """Sequence positions on the diagonal: ``(b|1, n) -> (b|1, n, axes)`` (a view)."""
        tensor = positions.tensor.unsqueeze(-1).expand(*positions.tensor.shape, axes)
        return cls(tensor, positions.bound, positions, False)

    def present(self) -> torch.Tensor:
        """``(b|1, n)`` bool: True where the token has a position (not :data:`NO_POSITION`)."""
        return self.tensor[..., 0] >= 0

    def clamped(self) -> torch.Tensor:
        """The coordinates with :data:`NO_POSITION` read as 0 (what table lookups index)."""
        return self.tensor.clamp_min(0) if self.has_none else self.tensor


def axis_name(axes: int) -> str:
    return AXIS_NAMES.get(axes, f"{axes} coordinates")


def check_axis_values(tensor: torch.Tensor, name: str) -> tuple[int | None, bool]:
    """Check coordinates ``(b, n, a)``: each in ``[0, 2**53]``, or ``-1`` on every axis of a token.

    Returns ``(bound, has_none)``; ``bound`` is None inside ``torch.compile`` (device-side asserts).
    """
    if torch.compiler.is_compiling():
        ok = ((tensor >= 0) | (tensor == NO_POSITION).all(-1, keepdim=True)).all()
        torch._assert_async(ok, f"{name} must be >= 0 (or -1 on every axis of a token)")
        return None, True
    if not tensor.numel():
        return 0, False
    none = (tensor == NO_POSITION).all(-1)  # (b, n)
    has_none = bool(none.any())
    values = tensor[~none] if has_none else tensor
    if not values.numel():
        return 0, True
    low, high = (int(v) for v in torch.aminmax(values))
    if low < 0:
        raise PosencError(
            f"{name} must be >= 0 on every axis, or {NO_POSITION} on every axis of a token without a "
            f"grid position; got minimum {low}"
        )
    if high > MAX_POSITION:
        raise PosencError(f"{name} must be <= 2**53 = {MAX_POSITION}, got maximum {high}")
    return high + 1, has_none


def as_axis_positions(
    positions: torch.Tensor | Positions | AxisPositions | None,
    seq_len: int,
    axes: int,
    *,
    batch: int | None = None,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> AxisPositions:
    """Check positions once for an encoding with ``axes`` position axes; returns :class:`AxisPositions`.

    Takes ``(b|1, n, axes)`` integer coordinates, sequence positions ``(b|1, n)`` / ``(n,)`` /
    :class:`~posenc.core.positions.Positions` (put on the diagonal), None (``arange(seq_len)`` on the
    diagonal) or a trusted :class:`AxisPositions`. Coordinates with another number of axes,
    another length or batch are refused, naming ``name`` and the shapes.
    """
    check_not_meta("device" if positions is None else name, device)
    if isinstance(positions, AxisPositions):
        _check_axis_shape(positions.tensor, seq_len, axes, batch, name)
        if device is not None and positions.tensor.device != torch.device(device):
            diagonal = positions.diagonal
            if diagonal is not None:
                diagonal = diagonal._replace(tensor=diagonal.tensor.to(device))
            positions = positions._replace(tensor=positions.tensor.to(device), diagonal=diagonal)
        return positions
    if positions is None or isinstance(positions, Positions):
        return AxisPositions.from_sequence(
            as_positions(positions, seq_len, batch=batch, device=device, name=name), axes
        )
    if not isinstance(positions, torch.Tensor):
        raise PosencTypeError(
            f"{name} must be an integer torch.Tensor of shape (batch, seq, {axes}) or (batch, seq), "
            f"or None; got {type(positions).__name__}"
        )
    if positions.ndim != 3:
        return AxisPositions.from_sequence(
            as_positions(positions, seq_len, batch=batch, device=device, name=name), axes
        )
    check_not_meta(name, positions.device)
    if not is_integer_dtype(positions.dtype):
        raise PosencTypeError(f"{name} must have an integer dtype (int32/int64), got {positions.dtype}")
    _check_axis_shape(positions, seq_len, axes, batch, name)
    bound, has_none = check_axis_values(positions, name)
    tensor = positions.to(dtype=torch.long, device=device if device is not None else positions.device)
    return AxisPositions(tensor, bound, None, has_none)


def _check_axis_shape(tensor: torch.Tensor, seq_len: int, axes: int, batch: int | None, name: str) -> None:
    if tensor.shape[-1] != axes:
        raise PosencError(
            f"{name} has {tensor.shape[-1]} coordinates per token (shape {tuple(tensor.shape)}) but the "
            f"encoding takes {axes} {axis_name(axes)}: pass (batch, seq, {axes}) coordinates, or "
            "(batch, seq) positions to put every token on the diagonal"
        )
    if tensor.shape[1] != seq_len:
        raise PosencError(
            f"{name} has {tensor.shape[1]} positions per row but the input has seq length {seq_len}"
        )
    if batch is not None and tensor.shape[0] not in (1, batch):
        raise PosencError(f"{name} has batch size {tensor.shape[0]}; expected 1 or {batch}")


def is_axis_positions(positions: object) -> bool:
    """True for coordinates with an axis dimension: an :class:`AxisPositions` or a 3-d tensor."""
    return isinstance(positions, AxisPositions) or (
        isinstance(positions, torch.Tensor) and positions.ndim == 3
    )


def to_sequence_or_axes(
    positions: torch.Tensor | Positions | AxisPositions | None,
    seq_len: int,
    *,
    batch: int | None = None,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> Positions | AxisPositions:
    """Check positions of either kind once (attention's and the model's entry point): 3-d tensors
    and :class:`AxisPositions` as coordinates with their own number of axes, the rest as sequence
    positions (:func:`posenc.core.positions.as_positions`)."""
    if isinstance(positions, AxisPositions):
        return as_axis_positions(positions, seq_len, positions.axes, batch=batch, device=device, name=name)
    if isinstance(positions, torch.Tensor) and positions.ndim == 3:
        return as_axis_positions(
            positions, seq_len, positions.shape[-1], batch=batch, device=device, name=name
        )
    return as_positions(positions, seq_len, batch=batch, device=device, name=name)


# ---------------------------------------------------------------------------
# Builders.
# ---------------------------------------------------------------------------


def _sizes(name: str, sizes: Sequence[int], *, minimum: int = 1) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not len(sizes):
        raise PosencTypeError(f"{name} must be a non-empty sequence of ints, e.g. (14, 14), got {sizes!r}")
    return tuple(check_int(f"{name}[{k}]", v, minimum=minimum) for k, v in enumerate(sizes))


def grid_positions(
    sizes: Sequence[int],
    *,
    prefix: int = 0,
    start: int | Sequence[int] = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Coordinates of a grid's cells in row-major order (the order ViT patches are flattened in).

    Args:
        sizes: cells per axis, e.g. ``(h, w)`` or ``(t, h, w)``.
        prefix: tokens before the grid without a grid position (class / register tokens), which
            get :data:`NO_POSITION` on every axis.
        start: added to every coordinate: one int for all axes, or one per axis.

    Returns:
        ``(1, prefix + prod(sizes), len(sizes))`` int64.
    """
    sizes = _sizes("sizes", sizes)
    prefix = check_int("prefix", prefix, minimum=0)
    offset = _start(start, len(sizes))
    axes = [torch.arange(s, dtype=torch.long, device=device) for s in sizes]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(sizes))  # (n, a)
    coords = coords + torch.tensor(offset, dtype=torch.long, device=device)
    none = torch.full((prefix, len(sizes)), NO_POSITION, dtype=torch.long, device=device)
    return torch.cat([none, coords]).unsqueeze(0)


def _start(start: int | Sequence[int], axes: int) -> list[int]:
    if isinstance(start, Sequence) and not isinstance(start, (str, bytes)):
        if len(start) != axes:
            raise PosencError(f"start must have one entry per axis ({axes}), got {list(start)}")
        return [check_int(f"start[{k}]", v, minimum=0) for k, v in enumerate(start)]
    return [check_int("start", start, minimum=0)] * axes


def grid_shape(positions: torch.Tensor) -> tuple[int, ...]:
    """The extent of coordinates ``(..., a)`` per axis (max + 1 over tokens with a position)."""
    flat = positions.reshape(-1, positions.shape[-1])
    flat = flat[(flat >= 0).all(-1)]
    if not flat.numel():
        return (0,) * positions.shape[-1]
    return tuple(int(v) + 1 for v in flat.max(0).values)


def flatten_grid(positions: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Row-major index of each cell: ``(..., a) -> (...)`` (``r * w + c`` for ``(h, w)``), the
    sequence position a 1-D encoding gives a flattened grid. Tokens without a position
    (:data:`NO_POSITION` on every axis) get 0; a coordinate outside ``[0, size)`` on its axis is
    refused (two cells would share an index)."""
    sizes = _sizes("sizes", sizes)
    if positions.shape[-1] != len(sizes):
        raise PosencError(
            f"positions have {positions.shape[-1]} axes but sizes has {len(sizes)} entries: {sizes}"
        )
    limits = torch.tensor(sizes, dtype=positions.dtype, device=positions.device)
    none = (positions == NO_POSITION).all(-1, keepdim=True)  # (..., 1) tokens without a position
    outside = ((positions < 0) | (positions >= limits)) & ~none  # (..., a)
    if bool(outside.any()):
        where = outside.nonzero()[0].tolist()
        token, axis = tuple(where[:-1]), where[-1]
        raise PosencError(
            f"positions{list(token)} = {positions[token].tolist()}: coordinate {int(positions[token][axis])} on axis "
            f"{axis} is outside the grid of sizes {tuple(sizes)} (each coordinate in [0, size), or {NO_POSITION} "
            "on every axis for a token without a position)"
        )
    index = torch.zeros(positions.shape[:-1], dtype=torch.long, device=positions.device)
    for axis, size in enumerate(sizes):
        index = index * size + positions[..., axis]
    return index.clamp_min(0)


def with_time(positions: torch.Tensor, time: int = 0) -> torch.Tensor:
    """``(..., 2)`` image coordinates ``(h, w)`` -> ``(..., 3)`` ``(t, h, w)`` with one frame index
    (a single image for M-RoPE's three axes); tokens without a position keep -1 everywhere."""
    if positions.shape[-1] != 2:
        raise PosencError(f"with_time takes (h, w) coordinates, got {positions.shape[-1]} axes")
    time = check_int("time", time, minimum=0)
    t = torch.full_like(positions[..., :1], time)
    t = torch.where(positions[..., :1] < 0, positions[..., :1], t)
    return torch.cat([t, positions], dim=-1)


Segment = int | tuple[int, int, int]


def multimodal_positions(
    segments: Sequence[Segment],
    *,
    time_interval: float = 1.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(t, h, w)`` positions of text and images/videos interleaved, as Qwen2-VL's ``get_rope_index``.

    Text tokens sit on the diagonal ``t = h = w``, counting on from one past the largest
    coordinate before them; a vision segment with LLM grid ``(T, H, W)`` (after the vision
    encoder's spatial merge) has its cells ``(start + floor(i_t * time_interval), start + i_h,
    start + i_w)`` in row-major order, with ``start`` that same next value.

    Args:
        segments: in order, an int (that many text tokens) or a tuple ``(T, H, W)``.
        time_interval: spacing of the temporal index (Qwen2.5-VL: ``second_per_grid_t *
            tokens_per_second``; 1 for Qwen2-VL).

    Returns:
        ``(1, n, 3)`` int64.
    """
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence) or not len(segments):
        raise PosencTypeError("segments must be a non-empty list of text lengths (int) and (T, H, W) grids")
    interval = check_float("time_interval", time_interval, minimum=0.0, exclusive_minimum=True)
    pieces, next_start = [], 0
    for k, segment in enumerate(segments):
        if isinstance(segment, (tuple, list)):
            t, h, w = _sizes(f"segments[{k}]", segment) if len(segment) == 3 else _bad_segment(k, segment)
            steps = (torch.arange(t, dtype=torch.float64) * interval).floor().long()  # (t,)
            cells = grid_positions((t, h, w))[0]  # (t*h*w, 3)
            cells[:, 0] = steps[cells[:, 0]]
            cells = cells + next_start
        else:
            count = check_int(f"segments[{k}]", segment, minimum=1)
            cells = (torch.arange(count, dtype=torch.long) + next_start)[:, None].expand(count, 3)
        pieces.append(cells)
        next_start = int(cells.max()) + 1
    return torch.cat(pieces).unsqueeze(0).to(device)


def _bad_segment(k: int, segment: object) -> tuple[int, int, int]:
    raise PosencError(f"segments[{k}] must be a text length (int) or a (T, H, W) grid, got {segment!r}")


def grid_side(tokens: int, axes: int = 2) -> int:
    """The side of the square (cube) grid with ``tokens`` cells; refuses counts that are not one."""
    tokens = check_int("tokens", tokens, minimum=1)
    side = round(tokens ** (1 / axes))
    if side**axes != tokens:
        raise PosencError(
            f"{tokens} tokens do not form a square {'x'.join(['s'] * axes)} grid; pass the grid sizes"
        )
    return side


def fits(sizes: Sequence[int], seq_len: int, *, prefix: int = 0) -> None:
    """Raise unless a grid of ``sizes`` plus ``prefix`` tokens is exactly ``seq_len`` tokens."""
    sizes = _sizes("sizes", sizes)
    need = prefix + math.prod(sizes)
    if need != seq_len:
        raise PosencError(
            f"a {' x '.join(map(str, sizes))} grid{f' plus {prefix} prefix tokens' if prefix else ''} "
            f"has {need} tokens but the sequence has {seq_len}"
        )


#: How many axes a position may have: (h, w) or (t, h, w).
AXES = (2, 3)


def check_axes(axes: object) -> int:
    """``axes`` as an int in :data:`AXES` or a PosencError naming it."""
    return check_int("axes", axes, minimum=2, maximum=3)


__all__ = [
    "AXES",
    "check_axes",
    "NO_POSITION",
    "AxisPositions",
    "as_axis_positions",
    "check_axis_values",
    "check_encoding_axes",
    "diagonal_tensor",
    "fits",
    "flatten_grid",
    "grid_positions",
    "grid_shape",
    "grid_side",
    "is_axis_positions",
    "multimodal_positions",
    "to_sequence_or_axes",
    "with_time",
]


def check_encoding_axes(encoding: object, positions: object) -> None:
    """Raise unless ``encoding`` (a positional encoding or None) takes coordinates with as many
    axes as ``positions`` has (sequence positions and None fit every encoding: the diagonal)."""
    if encoding is None or not isinstance(positions, AxisPositions):
        return
    axes = getattr(encoding, "position_axes", 1)
    if axes == 1 or axes != positions.axes:  # a 1-D encoding takes no coordinates at all
        raise PosencError(
            f"positions have {positions.axes} coordinates per token {axis_name(positions.axes)} but "
            f"encoding {type(encoding).__name__} takes "
            + ("sequence positions (batch, seq)" if axes == 1 else f"{axes} {axis_name(axes)}")
        )


def diagonal_tensor(positions: torch.Tensor, axes: int) -> torch.Tensor:
    """Sequence positions ``(b, n)`` as coordinates ``(b, n, axes)`` on the diagonal (a copy)."""
    return positions.unsqueeze(-1).expand(*positions.shape, axes).clone()
