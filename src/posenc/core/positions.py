"""Positions are data: helpers that build the integer ``(b, n)`` positions every hook takes.

Axis legend: b batch, n sequence.

Left padding, packed documents, KV-cache offsets and randomized training are all
"different positions" for the same encoding code path:

>>> from_attention_mask(torch.tensor([[0, 0, 1, 1, 1]]))       # left padding
tensor([[0, 0, 0, 1, 2]])
>>> from_document_lengths([3, 2])                                # packed documents
tensor([[0, 1, 2, 0, 1]])
>>> with_offset(3, 5)                                            # 5 tokens already cached
tensor([[5, 6, 7]])
>>> randomized(1, 4, 100, generator=torch.Generator().manual_seed(0)).shape
torch.Size([1, 4])

Every function returns int64 tensors and raises ValueError/TypeError naming the
argument on bad input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from posenc.core.checks import check_int, check_not_meta, check_tensor, is_integer_dtype
from posenc.core.errors import PosencError, PosencTypeError

__all__ = [
    "MAX_POSITION",
    "Positions",
    "as_positions",
    "check_position_values",
    "document_ids_from_lengths",
    "document_ids_from_positions",
    "from_attention_mask",
    "from_document_ids",
    "from_document_lengths",
    "randomized",
    "segments",
    "with_offset",
    "joint_bound",
    "resolve_positions",
]


# ---------------------------------------------------------------------------
# Checked positions: what hooks receive.
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
        """``start + arange(n)`` as ``(1, n)``.

        Eager calls with integer ``n`` and ``start`` share one tensor per ``(start, n, device)``
        (the last few are kept): a step of a model makes the same positions every call, and
        making them anew costs more than rotating a short sequence. Treat ``tensor`` as
        read-only, as every hook does.
        """
        # else symbolic (torch.compile, dynamic shapes)
        static = isinstance(n, int) and isinstance(start, int)
        # traced: a constant would be baked into the graph; inference mode: its tensors cannot be
        # saved for a backward pass later (a learned table's index)
        kept = static and not (torch.compiler.is_compiling() or torch.is_inference_mode_enabled())
        key = (start, n, device)
        if kept and (made := _ARANGES.get(key)) is not None:
            return made
        tensor = torch.arange(start, start + n, device=device, dtype=torch.long).unsqueeze(0)
        if not static:
            return cls(tensor, None, start, 0)  # tables cannot be sized by it
        made = cls(tensor, start + n, start, start)
        if kept:
            if len(_ARANGES) >= _ARANGES_KEPT:
                _ARANGES.pop(next(iter(_ARANGES)), None)  # the oldest
            _ARANGES[key] = made
        return made


#: Eager ``Positions.arange`` results by ``(start, n, device)``, oldest first (at most _ARANGES_KEPT).
_ARANGES: dict[tuple, Positions] = {}
_ARANGES_KEPT = 16


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
# Building positions: padding, packing, offsets, randomized training.
# ---------------------------------------------------------------------------


def from_attention_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions from a padding mask: real tokens count 0, 1, 2, ...; pads get 0.

    With left padding the first real token gets position 0, so a padded row
    sees the same positions as the unpadded sequence (as HF ``generate`` does).

    Args:
        mask: ``(b, n)`` bool or integer tensor, 1/True = real token, 0/False = pad.

    Returns:
        ``(b, n)`` int64 positions.
    """
    mask = check_tensor("mask", mask, ndim=2)
    if not (is_integer_dtype(mask.dtype) or mask.dtype == torch.bool):
        raise PosencTypeError(
            f"mask must be a bool or integer tensor (1 = token, 0 = pad), got dtype {mask.dtype}"
        )
    if mask.dtype != torch.bool:
        if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
            raise PosencError("mask must contain only 0 (pad) and 1 (token)")
        mask = mask.bool()
    real = mask.long()  # (b, n)
    return ((real.cumsum(dim=1) - 1) * real).clamp_min(0)  # (b, n), pads -> 0


def from_document_lengths(lengths: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Positions for packed documents: each document restarts at 0.

    Args:
        lengths: positive document lengths ``(k,)`` (list or 1-D integer tensor).

    Returns:
        ``(1, sum(lengths))`` int64, e.g. ``[3, 2] -> [[0, 1, 2, 0, 1]]``.
    """
    if isinstance(lengths, torch.Tensor):
        if not is_integer_dtype(lengths.dtype):
            raise PosencTypeError(f"lengths must be integers, got dtype {lengths.dtype}")
        if lengths.ndim != 1:
            raise PosencError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
        values = [int(v) for v in lengths.tolist()]
    elif isinstance(lengths, (list, tuple)):
        values = [check_int(f"lengths[{k}]", v, minimum=1) for k, v in enumerate(lengths)]
    else:
        raise PosencTypeError(
            f"lengths must be a list/tuple of ints or a 1-D tensor, got {type(lengths).__name__}"
        )
    if not values:
        raise PosencError("lengths must name at least one document")
    for k, v in enumerate(values):
        if v < 1:
            raise PosencError(f"lengths[{k}] must be >= 1, got {v}")
    return from_document_ids(document_ids_from_lengths(values))  # (1, n)


def document_ids_from_lengths(
    lengths: Sequence[int], *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Document ids ``(1, sum(lengths))`` for documents packed into one row: ``[3, 2] -> [[0, 0, 0, 1, 1]]``."""
    sizes = torch.tensor([check_int(f"lengths[{k}]", v, minimum=1) for k, v in enumerate(lengths)])
    return torch.repeat_interleave(torch.arange(len(sizes)), sizes).unsqueeze(0).to(device)


def segments(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(segment index, offset inside the segment)``, both int64 ``(b, n)``, for labels ``(b, n)``.

    A new segment starts wherever the label changes along the row: ``[[7, 7, 7, 2, 2]]``
    gives segments ``[[0, 0, 0, 1, 1]]`` and offsets ``[[0, 1, 2, 0, 1]]``.
    """
    b, n = ids.shape
    starts = torch.ones_like(ids, dtype=torch.bool)  # (b, n): True where a segment starts
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    index = torch.arange(n, device=ids.device).expand(b, n)
    start = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # segment start
    return starts.long().cumsum(dim=1) - 1, index - start


def from_document_ids(document_ids: torch.Tensor) -> torch.Tensor:
    """``(b, n)`` document ids -> positions restarting at 0 at every new document."""
    ids = resolve_positions(document_ids, document_ids.shape[-1], name="document_ids")
    return segments(ids)[1]


def document_ids_from_positions(positions: torch.Tensor) -> torch.Tensor:
    """``(b, n)`` positions of packed documents -> document ids; a new document starts
    wherever the position does not increase (e.g. restarts at 0)."""
    positions = resolve_positions(positions, positions.shape[-1])
    starts = torch.zeros_like(positions)
    starts[:, 1:] = (positions[:, 1:] <= positions[:, :-1]).long()
    return starts.cumsum(-1)


def with_offset(
    seq_len: int, offset: int | torch.Tensor, batch: int = 1, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Positions ``offset, offset+1, ...`` for new tokens after ``offset`` cached ones.

    Args:
        seq_len: number of new tokens n (>= 0).
        offset: tokens already in the KV cache: an int >= 0, or a ``(b,)`` integer
            tensor with one offset per row.
        batch: rows b (>= 1); must match ``offset``'s length when it is a tensor.

    Returns:
        ``(b, n)`` int64.
    """
    seq_len = check_int("seq_len", seq_len, minimum=0)
    batch = check_int("batch", batch, minimum=1)
    steps = torch.arange(seq_len, dtype=torch.long, device=device)  # (n,)
    if isinstance(offset, torch.Tensor) and offset.ndim == 1:
        if not is_integer_dtype(offset.dtype):
            raise PosencTypeError(f"offset must be integer, got dtype {offset.dtype}")
        if offset.shape[0] != batch:
            raise PosencError(f"offset has {offset.shape[0]} entries but batch={batch}")
        if offset.numel() and int(offset.min()) < 0:
            raise PosencError(f"offset must be >= 0, got minimum {int(offset.min())}")
        return offset.to(dtype=torch.long, device=steps.device)[:, None] + steps[None, :]  # (b, n)
    offset = check_int("offset", offset, minimum=0)
    return (steps + offset).unsqueeze(0).expand(batch, seq_len).clone()  # (b, n)


def randomized(
    batch: int,
    seq_len: int,
    max_len: int,
    generator: torch.Generator | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Randomized positions (Ruoss et al. 2023, https://arxiv.org/abs/2305.16843).

    Each row is ``seq_len`` distinct positions drawn without replacement from
    ``[0, max_len)`` and sorted increasingly, so a model trained on short inputs
    has seen every position up to ``max_len`` (order is kept; spacing is random).

    Args:
        batch: rows b (>= 1), sampled independently.
        seq_len: positions per row n, ``0 <= n <= max_len``.
        max_len: the largest position plus one (L in the paper), >= 1.
        generator: optional ``torch.Generator`` for reproducibility (CPU).

    Returns:
        ``(b, n)`` int64, strictly increasing along each row.
    """
    batch = check_int("batch", batch, minimum=1)
    max_len = check_int("max_len", max_len, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=0, maximum=max_len)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise PosencTypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    keys = torch.rand(batch, max_len, generator=generator)  # (b, max_len) i.i.d. sort keys
    picks = keys.argsort(dim=1)[:, :seq_len]  # (b, n) a uniform subset without replacement
    return picks.sort(dim=1).values.to(device=device)  # (b, n) sorted
