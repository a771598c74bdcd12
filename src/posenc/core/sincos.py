"""Exact sin/cos tables from integer positions (shared by sinusoidal, RoPE, xPos, Transformer-XL).

Angles are computed in float64 from integer positions, cached in tables that grow by
doubling, and cast to the compute dtype last, so a bfloat16 model still tells position 8191
from 8190. A leaf module: the fast paths in :mod:`posenc.kernels` may import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from posenc.core.positions import Positions, as_positions, check_position_values


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
