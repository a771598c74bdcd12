"""Additive encodings of positions with several axes: image patches, video patches.

Axis legend: b batch, n tokens, a position axes (``(h, w)`` or ``(t, h, w)``), d d_model,
k features per axis (``d / a``).

Two members (the rotary ones are in :mod:`posenc.encoding.rotary.rope_axial`):

* :class:`SinCosAxial` -- MAE's fixed 2-D sin-cos table (He et al. 2022), one 1-D sin-cos
  block per axis; ``axes=3`` extends it to video.
* :class:`LearnedAxial` -- factorized learned embeddings, one trained table per axis with
  the rows concatenated (ViT, Dosovitskiy et al. 2021, appendix D.4), and
  :meth:`LearnedAxial.interpolated` to move them to a larger grid as ViT fine-tuning at a
  higher resolution does (ViT sec. 3.2).

Both take coordinates ``(b, n, a)``, or sequence positions ``(b, n)`` on the diagonal (see
:mod:`posenc.core.axes`); a token with coordinate ``-1`` on every axis (a class token) gets a zero
vector, as MAE's class token does. Values are computed in float64 from the integer
coordinates and cast to float32 last. The float64 NumPy references are in
:mod:`posenc.reference.absolute`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.core.axes import AXES, AxisPositions, as_axis_positions, check_axes
from posenc.core.checks import check_float, check_int, check_tensor, compute_dtype
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.core.positions import Positions
from posenc.core.sincos import SinCosCache
from posenc.encoding.base import AdditiveEncoding


def axis_positions(positions: Positions | AxisPositions, axis: int) -> Positions:
    """One axis of checked coordinates as 1-D :class:`~posenc.core.positions.Positions` (``-1`` read as 0),
    the diagonal's own positions when every axis is equal (a view of a table, no gather)."""
    if isinstance(positions, Positions):
        return positions
    if positions.diagonal is not None:
        return positions.diagonal
    return Positions(positions.clamped()[..., axis], positions.bound, None, 0)


class _AxialAdditive(AdditiveEncoding):
    """Shared by the additive multi-axis encodings: coordinates in, ``(b, n, d)`` out."""

    position_axes = 2  # (h, w) by default; an instance with a time axis says 3

    def __init__(self, config: EncodingConfig) -> None:
        super().__init__(config)
        self.position_axes = config.axes  # type: ignore[attr-defined]

    def embed(
        self, x: torch.Tensor, *, positions: torch.Tensor | Positions | AxisPositions | None = None
    ) -> torch.Tensor:
        """``x (b, n, d)`` -> ``(b, n, d)``; positions ``(b|1, n, a)``, ``(b|1, n)`` or None."""
        x = check_tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.config.dim:
            raise PosencError(f"x has feature size {x.shape[-1]} but the encoding has dim={self.config.dim}")
        coords = as_axis_positions(
            positions, x.shape[1], self.position_axes, batch=x.shape[0], device=x.device
        )
        return x + self.encode(coords, compute_dtype(x.dtype)).to(x.dtype)

    def encode(
        self, positions: torch.Tensor | Positions | AxisPositions, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """The position vectors alone: ``(b, n, a)`` or ``(b, n)`` -> ``(b, n, d)`` in ``dtype``
        (float32 by default; the values are computed in float64 and cast last)."""
        if not isinstance(positions, AxisPositions):
            seq = positions.tensor if isinstance(positions, Positions) else positions
            check_tensor("positions", seq, ndim=(1, 2, 3))
            positions = as_axis_positions(positions, seq.shape[1 if seq.ndim > 1 else 0], self.position_axes)
        values = self._vectors(positions, dtype)  # (b|1, n, d)
        if positions.has_none:
            values = values * positions.present()[..., None].to(values.dtype)
        return values

    def _vectors(self, positions: AxisPositions, dtype: torch.dtype) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


# ---------------------------------------------------------------------------
# 2-D (3-D) sin-cos: MAE.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SinCosAxialConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; divisible by 2 * axes
    axes: int = 2  # position axes: 2 for (h, w) images, 3 for (t, h, w) video
    base: float = 10000.0  # w_i = base^(-i / k), k = dim / (2 axes) frequencies per axis

    def validate(self) -> None:
        axes = check_axes(self.axes)
        dim = check_int("dim", self.dim, minimum=2 * axes)
        if dim % (2 * axes):
            raise PosencError(
                f"dim must be divisible by 2 * axes = {2 * axes} (a sin and a cos block per axis), got {dim}"
            )
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)


class SinCosAxial(_AxialAdditive):
    r"""MAE's fixed 2-D sin-cos table (He et al. 2022), one 1-D sin-cos block per axis.

    A patch at row ``h``, column ``w`` gets ``[s(w) | s(h)]`` with the 1-D block of ``k = d/4``
    frequencies :math:`s(p) = [\sin(p\,\omega_0..\omega_{k-1}),\ \cos(p\,\omega_0..\omega_{k-1})]`,
    :math:`\omega_i = base^{-i/k}`: the last axis first, exactly MAE's
    ``get_2d_sincos_pos_embed``. ``axes=3`` gives ``[s(w) | s(h) | s(t)]`` for video, ``d/6``
    frequencies per axis. A class token (coordinate -1) gets zeros, as in MAE.
    """

    Config = SinCosAxialConfig
    config: SinCosAxialConfig
    paper = (
        "He et al. 2022, Masked Autoencoders Are Scalable Vision Learners (2-D sin-cos table), "
        "https://arxiv.org/abs/2111.06377"
    )
    equation = "PE(h, w) = [s(w) | s(h)], s(p) = [sin(p w_i) | cos(p w_i)], w_i = base^(-i / (d/4))"
    share_across_layers = True

    def __init__(self, config: SinCosAxialConfig) -> None:
        super().__init__(config)
        k = config.dim // (2 * config.axes)
        omega = config.base ** (-torch.arange(k, dtype=torch.float64) / k)  # (k,)
        self._table = SinCosCache(omega)  # float64 rows, cast last; not a buffer

    def _vectors(self, positions: AxisPositions, dtype: torch.dtype) -> torch.Tensor:
        blocks = []
        for axis in reversed(range(self.config.axes)):  # MAE: the last axis (w) first
            cos, sin = self._table.lookup(axis_positions(positions, axis), dtype)  # (b|1, n, k)
            blocks += [sin, cos]
        return torch.cat(blocks, dim=-1)  # (b|1, n, d)


# ---------------------------------------------------------------------------
# Factorized learned tables: ViT appendix D.4.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnedAxialConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; divisible by axes
    axes: int = 2  # position axes: 2 for (h, w) images, 3 for (t, h, w) video
    max_len: int = length_field(
        "trained_rows", default=1024
    )  # rows per axis meant to be trained: coordinates 0 .. max_len-1 (ViT-B/16 at 224 px: 14)
    extra_rows: int = length_field(
        "extra_rows", default=0
    )  # opt-in rows per axis past max_len (stay untrained if training stays inside max_len)
    init_std: float = 0.02  # tables ~ N(0, init_std^2), as ViT / BERT

    def validate(self) -> None:
        axes = check_axes(self.axes)
        dim = check_int("dim", self.dim, minimum=axes)
        if dim % axes:
            raise PosencError(f"dim must be divisible by axes = {axes} (one table slice per axis), got {dim}")
        check_int("max_len", self.max_len, minimum=1)
        check_int("extra_rows", self.extra_rows, minimum=0)
        check_float("init_std", self.init_std, minimum=0.0, maximum=1e6)


class LearnedAxial(_AxialAdditive):
    r"""Factorized learned position embeddings: one trained table per axis, rows concatenated.

    .. math:: PE(h, w) = [E_h[h] \,|\, E_w[w]],\quad E_h, E_w \in \mathbb{R}^{(max\_len + extra\_rows) \times d/2}

    The "2-dimensional embedding" of ViT (Dosovitskiy et al. 2021, appendix D.4: X- and Y-tables of
    size D/2, concatenated), 3-D for video. Coordinates ``>= max_len`` raise ValueError unless
    ``extra_rows`` adds untrained rows (the honest failure at a larger grid);
    :meth:`interpolated` resamples the tables to a new grid instead, as ViT does before
    fine-tuning at a higher resolution (sec. 3.2).
    """

    Config = LearnedAxialConfig
    config: LearnedAxialConfig
    paper = (
        "Dosovitskiy et al. 2021, An Image is Worth 16x16 Words (ViT, appendix D.4: factorized "
        "X/Y embeddings), https://arxiv.org/abs/2010.11929"
    )
    equation = "PE(h, w) = [E_h[h] | E_w[w]], one trained (max_len, d/2) table per axis"

    def __init__(self, config: LearnedAxialConfig) -> None:
        super().__init__(config)
        rows = config.max_len + config.extra_rows
        self.table = nn.Parameter(torch.randn(config.axes, rows, config.dim // config.axes) * config.init_std)

    def _vectors(self, positions: AxisPositions, dtype: torch.dtype) -> torch.Tensor:
        rows = self.config.max_len + self.config.extra_rows
        bound = positions.bound
        if bound is None:  # torch.compile: a device-side check
            torch._assert_async((positions.tensor < rows).all(), f"positions must be < {rows} (max_len)")
        elif bound > rows:
            self._check_top(positions, rows)
        parts = []
        for axis in range(self.config.axes):
            pos = axis_positions(positions, axis)
            table = self.table[axis]  # (rows, k)
            if pos.start is not None:
                parts.append(table[None, pos.start : pos.start + pos.length])
            else:
                parts.append(F.embedding(pos.tensor.to(table.device), table))  # (b|1, n, k)
        if len({p.shape[0] for p in parts}) > 1:
            parts = [p.expand(max(q.shape[0] for q in parts), -1, -1) for p in parts]
        return torch.cat(parts, dim=-1)  # the table's dtype (a trained parameter)

    def _check_top(self, positions: AxisPositions, rows: int) -> None:
        tops = positions.tensor.reshape(-1, self.config.axes).amax(0).tolist()
        axis = max(range(self.config.axes), key=lambda a: tops[a])
        top = tops[axis]
        if top < rows:
            return
        if self.config.extra_rows:
            raise PosencError(
                f"positions: coordinate {top} on axis {axis} is past the tables: max_len={self.config.max_len} plus "
                f"extra_rows={self.config.extra_rows} gives valid coordinates [0, {rows - 1}] per axis"
            )
        raise PosencError(
            f"positions: coordinate {top} on axis {axis} >= max_len={self.config.max_len}: a learned table has no row "
            f"for it. Raise max_len, resample the tables to a larger grid with interpolated(max_len), or "
            f"opt in to untrained rows with extra_rows=N"
        )

    def interpolated(self, max_len: int) -> LearnedAxial:
        """A copy whose per-axis tables are resampled from ``max_len`` trained rows to ``max_len``
        new ones by linear interpolation over the cell centres (``F.interpolate``,
        ``align_corners=False``), as ViT resamples its table for a higher resolution; extra rows
        are dropped. The copy's gradients are its own."""
        max_len = check_int("max_len", max_len, minimum=1)
        trained = self.table.detach()[:, : self.config.max_len]  # (a, rows, k)
        resampled = F.interpolate(
            trained.transpose(1, 2).to(torch.float64), size=max_len, mode="linear", align_corners=False
        ).transpose(1, 2)  # (a, max_len, k)
        config = LearnedAxialConfig(
            dim=self.config.dim, axes=self.config.axes, max_len=max_len, extra_rows=0,
            init_std=self.config.init_std,
        )  # fmt: skip
        copy = LearnedAxial(config).to(self.table.device)
        with torch.no_grad():
            copy.table.copy_(resampled.to(self.table.dtype))
        return copy


# The axial members by registry name (posenc.registry lists them among its built-ins).
AXIAL_MEMBERS: dict[str, type[_AxialAdditive]] = {
    "sincos_axial": SinCosAxial,
    "learned_axial": LearnedAxial,
}

__all__ = ["AXES", "AXIAL_MEMBERS", "LearnedAxial", "SinCosAxial", "axis_positions", "check_axes"]
