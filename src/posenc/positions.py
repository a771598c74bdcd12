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

import torch

from posenc.base import check_int, check_tensor, is_integer_dtype, resolve_positions
from posenc.errors import PosencError, PosencTypeError

__all__ = [
    "document_ids_from_lengths",
    "document_ids_from_positions",
    "from_attention_mask",
    "from_document_ids",
    "from_document_lengths",
    "randomized",
    "segments",
    "with_offset",
]


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
