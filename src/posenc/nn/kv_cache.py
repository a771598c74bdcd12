"""The KV cache of one attention layer, and the positions of each step checked once.

Axis legend: b batch, g key/value heads, j cached key positions, n new tokens, d head_dim.

Keys are cached *after* rotation, so each decode step rotates only the new token. Encodings
that set ``cache_unrotated_keys = True`` (dynamic RoPE scalings, whose frequencies depend on the
current length) get raw keys cached instead, next to the same keys rotated under the encoding's
current ``rotation_key``, which attention re-rotates only when the frequencies change.
"""

from __future__ import annotations

from typing import cast

import torch

from posenc.core.axes import AxisPositions, diagonal_tensor, is_axis_positions, to_sequence_or_axes
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.core.positions import Positions, as_positions, from_attention_mask


def _append(buffer: torch.Tensor | None, length: int, chunk: torch.Tensor, dim: int, *, functional: bool):
    """``buffer`` (first ``length`` entries along ``dim`` valid) with ``chunk`` appended.

    Storage grows by doubling and the chunk is copied in place, so a one-token step copies one
    token, not the whole cache. ``functional`` (autograd is recording): a fresh ``cat`` instead,
    so no tensor saved for backward is ever written to.
    """
    if buffer is None:
        return chunk
    valid = buffer.narrow(dim, 0, length)
    if functional:
        return torch.cat([valid, chunk], dim=dim)
    need = length + chunk.shape[dim]
    if buffer.shape[dim] < need:
        shape = list(chunk.shape)
        shape[dim] = max(need, 2 * length, 16)
        grown = chunk.new_empty(shape)
        grown.narrow(dim, 0, length).copy_(valid)
        buffer = grown
    buffer.narrow(dim, length, chunk.shape[dim]).copy_(chunk)
    return buffer


class KVCache:
    """Keys and values of ONE attention layer, grown by each decode step.

    Holds ``keys``/``values`` ``(b, g, j, d)`` (``g`` key/value heads: ``num_kv_heads``), their ``positions`` ``(b|1, j)`` and the
    key padding mask ``(b, j)`` (None = all real). Storage grows by doubling, so a decode
    step copies only its own token (under autograd, chunks are concatenated instead). A
    cache belongs to the first layer that writes to it; handing it to a second layer raises
    ValueError.

    For encodings with ``cache_unrotated_keys`` (dynamic RoPE scalings) ``keys`` are the raw
    keys; ``rotated`` holds them rotated under ``rotated_with`` (the encoding's
    ``rotation_key``), which attention extends token by token while the frequencies stay the
    same and recomputes when they change.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self._keys: torch.Tensor | None = None  # (b, h, capacity, d)
        self._values: torch.Tensor | None = None
        self._positions: torch.Tensor | None = None  # (b|1, capacity)
        self._rotated: torch.Tensor | None = None  # (b, h, capacity, d), unrotated-key encodings
        self.rotated_with: object = None
        self._rotated_length = 0
        self.key_mask: torch.Tensor | None = None
        self._length = 0
        self.bound: int | None = 0  # every cached position is < bound (None: unknown, under compile)
        self._start: int | None = 0  # cached positions are start + arange(length) (None: not known)
        self.owner: int | None = None

    @property
    def length(self) -> int:
        """Number of cached key positions ``j``."""
        return self._length

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._keys is None else self._keys[:, :, : self._length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._values is None else self._values[:, :, : self._length]

    @property
    def positions(self) -> torch.Tensor | None:
        return None if self._positions is None else self._positions[:, : self._length]

    @property
    def rotated(self) -> torch.Tensor | None:
        """The cached keys rotated under :attr:`rotated_with` (unrotated-key encodings), or None."""
        if self._rotated is None or self._rotated_length != self._length:
            return None
        return self._rotated[:, :, : self._length]

    def next_start(self) -> int | None:
        """The next position when every cached row is ``start + arange(j)`` with no padding."""
        if self._start is None or self.key_mask is not None:
            return None
        return self._start + self._length

    def next_positions(self) -> torch.Tensor | None:
        """``(b|1, 1)``: one past the last real cached position per row (0 for rows with none)."""
        if self._positions is None:
            return None
        pos = self.positions
        assert pos is not None
        if pos.ndim == 3:  # coordinates: continue after the largest on any axis (Qwen2-VL's text rule)
            pos = pos.amax(dim=-1)
        if self.key_mask is not None:
            pos = torch.where(self.key_mask, pos, torch.full_like(pos, -1))
        return pos.max(dim=-1, keepdim=True).values + 1

    def append(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        positions: torch.Tensor | Positions,
        key_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, Positions, torch.Tensor | None]:
        """Add a chunk ``(b, h, n, d)`` and return everything cached so far (positions as
        :class:`~posenc.core.positions.Positions`, or :class:`~posenc.core.axes.AxisPositions` once coordinates
        with axes were cached)."""
        n = keys.shape[2]
        pos = to_sequence_or_axes(positions, n, batch=keys.shape[0], device=keys.device)
        if self._keys is not None and (keys.dtype != self._keys.dtype or keys.device != self._keys.device):
            raise PosencError(
                f"cache holds keys of dtype {self._keys.dtype} on {self._keys.device} but the new chunk is "
                f"{keys.dtype} on {keys.device}; a cache keeps one dtype and device (call cache.reset() "
                "after model.to(...), or convert before the first step)"
            )
        if self._keys is not None and (
            keys.shape[0] != self._keys.shape[0] or keys.shape[1::2] != self._keys.shape[1::2]
        ):
            raise PosencError(
                f"cache holds keys of shape (b, h, j, d) = {tuple(self.keys.shape)} but the new "  # type: ignore[union-attr]
                f"chunk has shape {tuple(keys.shape)}; use one cache per layer and per batch "
                "(call cache.reset() to start a new sequence)"
            )
        batch, length = keys.shape[0], self._length
        functional = torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad)
        if self.key_mask is not None or key_mask is not None:
            old_mask = self._full_mask(self.key_mask, batch, length, keys.device)
            new_mask = self._full_mask(key_mask, batch, n, keys.device)
            self.key_mask = torch.cat([old_mask, new_mask], dim=1)
        stored = self._positions
        new_pos = pos.tensor
        if stored is not None and stored.ndim != new_pos.ndim:  # coordinates and sequence positions:
            axes = (stored if stored.ndim == 3 else new_pos).shape[-1]  # both on (b, j, a)
            stored = stored if stored.ndim == 3 else diagonal_tensor(stored[:, :length], axes)
            new_pos = new_pos if new_pos.ndim == 3 else diagonal_tensor(new_pos, axes)
        if stored is not None and stored.shape[0] != new_pos.shape[0]:  # (1, j) -> (b, j)
            rest = [-1] * (stored.ndim - 1)
            stored = stored[:, :length].expand(batch, *rest).contiguous()
            new_pos = new_pos.expand(batch, *rest)
        self._keys = _append(self._keys, length, keys, 2, functional=functional)
        self._values = _append(self._values, length, values, 2, functional=functional)
        self._positions = _append(stored, length, new_pos, 1, functional=False)
        start = pos.start if isinstance(pos, Positions) else None  # coordinates: not one arange
        if length == 0:
            self._start = start
        elif self._start is None or start != self._start + length:
            self._start = None  # no longer one arange
        self.bound = None if pos.bound is None or self.bound is None else max(self.bound, pos.bound)
        self._length = length + n
        assert self.keys is not None and self.values is not None and self.positions is not None
        start = self._start if self.key_mask is None else None
        low = start if start is not None else 0
        if self.positions.ndim == 3:  # coordinates with axes (posenc.core.axes)
            coords = AxisPositions(self.positions, self.bound)
            return self.keys, self.values, cast(Positions, coords), self.key_mask  # see step_positions
        return self.keys, self.values, Positions(self.positions, self.bound, start, low), self.key_mask

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` cached positions (e.g. to roll back a draft).

        Storage is kept, so the next steps write in place again; the position bound is exact
        again for contiguous positions, a (now loose) upper bound otherwise.
        """
        length = check_int("length", length, minimum=0, maximum=self._length)
        self._length = length
        self._rotated_length = min(self._rotated_length, length)
        if self.key_mask is not None:
            self.key_mask = self.key_mask[:, :length]
        elif self._start is not None:  # contiguous: the bound is exact again
            self.bound = self._start + length

    def store_rotated(self, rotated: torch.Tensor, key: object) -> None:
        """Replace the rotated keys (all ``length`` of them) and what they were rotated under."""
        self._rotated, self._rotated_length, self.rotated_with = rotated, rotated.shape[2], key

    def append_rotated(self, chunk: torch.Tensor) -> torch.Tensor:
        """Add the newest chunk's rotated keys; returns all rotated keys."""
        functional = torch.is_grad_enabled() and chunk.requires_grad
        self._rotated = _append(self._rotated, self._rotated_length, chunk, 2, functional=functional)
        self._rotated_length += chunk.shape[2]
        return self._rotated[:, :, : self._rotated_length]

    @staticmethod
    def _full_mask(mask, batch, length, device) -> torch.Tensor:
        return torch.ones(batch, length, dtype=torch.bool, device=device) if mask is None else mask

    def __repr__(self) -> str:
        return f"KVCache(length={self.length})"


def step_positions(
    seq_len: int,
    *,
    batch: int,
    positions: torch.Tensor | Positions | None,
    padding_mask: torch.Tensor | None,
    cache: KVCache | None,
    device=None,
) -> Positions:
    """Positions of the current chunk, checked once: a :class:`~posenc.core.positions.Positions`.

    Explicit ``positions`` win (checked, or trusted when already a ``Positions``). Otherwise:
    ``arange`` (or counted over real tokens when a ``padding_mask`` is given, see
    :func:`posenc.core.positions.from_attention_mask`), shifted to continue after the cache's last
    real position. The largest position comes from shapes and the cache's bookkeeping, never
    from reading the tensors.
    """
    if positions is not None:
        if is_axis_positions(positions):  # (b, n, a) coordinates (posenc.core.axes)
            # AxisPositions travel where Positions are declared: only encodings with as many
            # position axes receive them (check_encoding_axes), and those accept both
            return cast(Positions, to_sequence_or_axes(positions, seq_len, batch=batch, device=device))
        return as_positions(positions, seq_len, batch=batch, device=device)
    start = 0 if cache is None else cache.next_start()
    if padding_mask is None and start is not None:
        return Positions.arange(seq_len, start=start, device=device)
    if padding_mask is not None:
        counted = from_attention_mask(padding_mask).to(device)
    else:
        counted = torch.arange(seq_len, device=device, dtype=torch.long).unsqueeze(0)
    offset = None if cache is None or cache.length == 0 else cache.next_positions()
    if offset is not None:
        counted = counted + offset.to(counted.device)
    previous = 0 if cache is None else cache.bound
    return Positions(counted, None if previous is None else previous + seq_len)
