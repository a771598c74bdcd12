"""The rotary hook, written once for every rotary member: check q, k and their positions, take
either tensor layout, rotate.

Axis legend: b batch, h heads, i queries, j keys, n tokens, a position axes, d head_dim, r/2
rotary pairs.

- :func:`check_qk`: q and k 4-d floating tensors with ``head_dim`` features in ``layout``, and
  their positions: sequence positions (``axes=None``: ``(b|1, n)``, their length checked against
  the layout's sequence axis) or coordinates with ``axes`` axes (``(b|1, n, a)``, or sequence
  positions on the diagonal). Checked positions (:class:`~posenc.core.positions.Positions`,
  :class:`~posenc.core.axes.AxisPositions`: what attention passes) are trusted.
- :func:`rotary_hook`: :func:`check_qk`, then the member's ``rotate_bhsd(q, k, qp, kp)`` on
  ``(b, h, n, d)`` tensors; a ``"bshd"`` input is viewed as that (strides, no copy) and
  returned in its own layout.
- :func:`rotate_by_table`: contiguous positions shared by q and k (a training step, a decode
  step) rotate by rows of the member's float64 table, by pointer; any other positions look their
  ``(cos, sin)`` up per token; both go through the fused kernel of :mod:`posenc.kernels.fused_rope`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from posenc.core.axes import AxisPositions, as_axis_positions
from posenc.core.checks import SEQ_AXIS, check_tensor, check_tensor_layout
from posenc.core.errors import PosencError
from posenc.core.positions import Positions, as_positions
from posenc.core.sincos import SinCosCache
from posenc.kernels.fused_rope import rotate_rows, rotate_trusted, table_dtype

P = TypeVar("P", Positions, AxisPositions)
Pair = tuple[torch.Tensor, torch.Tensor]

_AXES = {"bhsd": "(batch, heads, seq, dim)", "bshd": "(batch, seq, heads, dim)"}


def check_qk(
    q, k, q_positions, k_positions, head_dim: int, layout: str = "bhsd", *, axes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, Positions | AxisPositions, Positions | AxisPositions]:
    """Validate q/k (4-d in ``layout``, ``head_dim`` features) and their positions: sequence
    positions when ``axes`` is None, else coordinates with ``axes`` axes per token (or sequence
    positions on the diagonal). One tensor passed for both is checked once.

    Sequence positions whose length is not the layout's sequence axis are refused, naming the
    parameter, the layout and both shapes: a (b, n, h, d) tensor passed as the default
    ``"bhsd"`` would otherwise rotate heads as if they were positions.
    """
    layout = check_tensor_layout(layout)
    q = check_tensor("q", q, ndim=4, floating=True)
    k = check_tensor("k", k, ndim=4, floating=True)
    for name, x in (("q", q), ("k", k)):
        if x.shape[-1] != head_dim:
            raise PosencError(
                f"{name} has head_dim {x.shape[-1]} (shape {tuple(x.shape)}) but the encoding has "
                f"head_dim={head_dim}"
            )
    axis = SEQ_AXIS[layout]
    if q_positions is None and k_positions is None and axes is None:  # arange: the common call
        same = Positions.arange(q.shape[axis], device=q.device)
        if k.shape[axis] == q.shape[axis] and k.device == q.device:
            return q, k, same, same
        return q, k, same, Positions.arange(k.shape[axis], device=k.device)

    def positions_of(name: str, x: torch.Tensor, positions) -> Positions | AxisPositions:
        pos_name = f"{name}_positions"
        if axes is not None:
            return as_axis_positions(
                positions, x.shape[axis], axes, batch=x.shape[0], device=x.device, name=pos_name
            )
        _check_seq_axis(name, x, pos_name, positions, layout, axis)
        return as_positions(positions, x.shape[axis], batch=x.shape[0], device=x.device, name=pos_name)

    qp = positions_of("q", q, q_positions)
    if k_positions is q_positions and k.shape[0] == q.shape[0] and k.shape[axis] == q.shape[axis]:
        return q, k, qp, qp  # one tensor for both: check it once
    return q, k, qp, positions_of("k", k, k_positions)


def _check_seq_axis(name: str, x: torch.Tensor, pos_name: str, positions, layout: str, axis: int) -> None:
    """Raise unless ``positions`` (if given) has one entry per step of ``x``'s sequence axis."""
    tensor = positions.tensor if isinstance(positions, Positions) else positions
    if not isinstance(tensor, torch.Tensor) or tensor.ndim not in (1, 2) or tensor.shape[-1] == x.shape[axis]:
        return  # None, or not a tensor / wrong rank: as_positions names the problem
    other = "bshd" if layout == "bhsd" else "bhsd"
    hint = (
        f"; if {name} is {_AXES[other]}, pass layout={other!r}"
        if tensor.shape[-1] == x.shape[SEQ_AXIS[other]]
        else ""
    )
    raise PosencError(
        f"{pos_name} has shape {tuple(tensor.shape)} ({tensor.shape[-1]} positions per row) but {name} "
        f"has shape {tuple(x.shape)}, whose sequence axis in layout={layout!r} {_AXES[layout]} is axis "
        f"{axis} of length {x.shape[axis]}{hint}"
    )


def same_positions(a: Positions | AxisPositions, b: Positions | AxisPositions) -> bool:
    """True when ``a`` and ``b`` are known to be equal without reading them (the same tensor, or
    the same contiguous run; coordinates: on the diagonal, the same run)."""
    if a is b or a.tensor is b.tensor:
        return True
    da = a.diagonal if isinstance(a, AxisPositions) else a
    db = b.diagonal if isinstance(b, AxisPositions) else b
    if da is None or db is None:
        return False
    return da.start is not None and da.start == db.start and da.tensor.shape == db.tensor.shape


def rotary_hook(
    rotate_bhsd: Callable[[torch.Tensor, torch.Tensor, P, P], Pair],
    q,
    k,
    q_positions,
    k_positions,
    *,
    head_dim: int,
    layout: str,
    axes: int | None = None,
    check: Callable[[torch.Tensor, torch.Tensor, str], None] | None = None,
) -> Pair:
    """A rotary member's ``rotate``: q/k and positions checked (:func:`check_qk`; then ``check(q, k, layout)``,
    the member's own rule on the checked tensors), ``rotate_bhsd`` on ``(b, h, n, d)``; a
    ``"bshd"`` input is viewed as that (strides, no copy) and returned in its own layout."""
    q, k, qp, kp = check_qk(q, k, q_positions, k_positions, head_dim, layout, axes=axes)
    if check is not None:
        check(q, k, layout)
    if layout == "bshd":
        q, k = rotate_bhsd(q.transpose(1, 2), k.transpose(1, 2), qp, kp)  # type: ignore[arg-type]
        return q.transpose(1, 2), k.transpose(1, 2)
    return rotate_bhsd(q, k, qp, kp)  # type: ignore[arg-type]


def rotate_by_table(
    q: torch.Tensor,
    k: torch.Tensor,
    qp: P,
    kp: P,
    *,
    table: SinCosCache,
    start: int | None,
    bound: int | None,
    same: bool,
    lookup: Callable[[P, torch.dtype], Pair],
    layout: str,
    rotary_dim: int,
) -> Pair:
    """Rotate ``q (b, h, i, d)`` and ``k (b, g, j, d)`` by one member's angles.

    ``start`` (contiguous positions from there, or None), ``bound`` (one past the largest
    position of q and k, or None) and ``same`` (q and k known to share positions) say whether
    rows of ``table`` serve both; otherwise ``lookup(positions, dtype)`` gives the ``(cos, sin)``
    tables ``(b|1, 1, n, r/2)`` of q's positions, reused for k where they are the same.
    """
    if start is not None and same and q.dtype == k.dtype and bound is not None and bound <= table.max_cached:
        cos, sin = table.rows(bound, q.device, table_dtype(q.dtype))  # by pointer
        q, k = rotate_rows((q, k), cos, sin, start, layout=layout, rotary_dim=rotary_dim)
        return q, k
    q_cos, q_sin = lookup(qp, table_dtype(q.dtype))
    k_cos, k_sin = (q_cos, q_sin) if same and q.dtype == k.dtype else lookup(kp, table_dtype(k.dtype))
    q, k = rotate_trusted(((q, q_cos, q_sin), (k, k_cos, k_sin)), layout=layout, rotary_dim=rotary_dim)
    return q, k


__all__ = ["check_qk", "rotary_hook", "rotate_by_table", "same_positions"]
