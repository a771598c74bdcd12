"""Rotary encodings of positions with several axes: axial RoPE, RoPE-Mixed, M-RoPE.

Axis legend: b batch, h heads, n tokens (i queries, j keys), a position axes (``(h, w)`` or
``(t, h, w)``), d head_dim, r/2 rotary pairs.

Every member rotates pair ``i`` of a query or key by an angle that is linear in the token's
coordinates, so ``<f(q, p), f(k, p')>`` depends on ``p - p'`` only, axis by axis:

* :class:`AxialRoPE` (EVA-02, Fang et al. 2023; RoPE-Axial, Heo et al. 2024): axis ``k`` owns a
  block of consecutive pairs with its own 1-D RoPE ladder; ``axes=3`` for video.
* :class:`MRoPE` (Qwen2-VL, Wang et al. 2024): the 1-D RoPE frequencies, each pair reading the
  ``t``, ``h`` or ``w`` coordinate by ``mrope_section``; text tokens on the diagonal turn
  exactly as in 1-D RoPE (Qwen3-VL's interleaved sections: ``mrope_interleaved``).
* :class:`RoPEMixed` (Heo et al. 2024): learned per-head frequencies over both axes,
  ``angle_i = y f_y[i] + x f_x[i]``, so pairs can turn along diagonals.

Positions are ``(b, n, a)`` coordinates or ``(b, n)`` sequence positions on the diagonal
(:mod:`posenc.core.axes`); a coordinate of -1 on every axis leaves the token unrotated (a ViT class
token). Angles are float64 from integer coordinates, cast last; the rotation is the fused kernel
of :mod:`posenc.kernels.fused_rope` (the plain :func:`posenc.kernels.rotation.apply_rotary` where RoPE-Mixed's
frequencies need gradients). ``cos_sin(positions, dtype)`` gives the tables, as RoPE's does.
The float64 NumPy references are in :mod:`posenc.reference.rotary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.axes import AxisPositions, as_axis_positions, axis_name, check_axes
from posenc.core.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_tensor,
    compute_dtype,
    to_layout,
)
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, model_field
from posenc.core.positions import Positions
from posenc.core.sincos import SinCosCache, inverse_frequencies
from posenc.encoding.base import RotaryEncoding
from posenc.encoding.rotary.hook import check_qk, rotary_hook, rotate_by_table, same_positions
from posenc.kernels.fused_rope import rotate_trusted, table_dtype
from posenc.kernels.rotation import LAYOUTS, apply_rotary

# ---------------------------------------------------------------------------
# Checking q, k and their coordinates.
# ---------------------------------------------------------------------------


def check_qk_axes(
    q, k, q_positions, k_positions, head_dim: int, axes: int, layout: str
) -> tuple[torch.Tensor, torch.Tensor, AxisPositions, AxisPositions]:
    """Validate q/k (4-d in ``layout``, ``head_dim`` features) and their coordinates (``axes`` per
    token, or sequence positions on the diagonal); a trusted :class:`AxisPositions` passes as is.
    The rotary members' one check (:func:`posenc.encoding.rotary.hook.check_qk`) with axes."""
    return check_qk(q, k, q_positions, k_positions, head_dim, layout, axes=axes)  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# Pairs that each read one axis: axial RoPE and M-RoPE.
# ---------------------------------------------------------------------------


class _PairAxisRotary(RotaryEncoding):
    """Pair ``i`` turns by ``coords[axis_of_pair[i]] * inv_freq[i]``; subclasses set both."""

    position_axes = 2  # (h, w) by default; an instance with a time axis says 3

    share_across_layers = True
    layout: str

    def _setup(self, inv_freq: torch.Tensor, axis_of_pair: torch.Tensor, axes: int, layout: str) -> None:
        self.position_axes = axes
        self.layout = layout
        self.rotary_dim = 2 * inv_freq.shape[0]
        self.inv_freq = inv_freq.to(torch.float64)  # (r/2,) a plain attribute: never cast by .to()
        self.axis_of_pair = axis_of_pair.to(torch.long)  # (r/2,)
        self._sincos = SinCosCache(self.inv_freq)

    def _tables(self, positions: AxisPositions, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(b|1, n, r/2)`` in ``dtype``."""
        if positions.diagonal is not None:  # every axis equal: the 1-D table itself
            return self._sincos.lookup(positions.diagonal, dtype)
        coords = positions.clamped()  # -1 (no position) turns by 0
        per_axis = [
            self._sincos.lookup(Positions(coords[..., a], positions.bound, None, 0), dtype)
            for a in range(self.position_axes)
        ]  # a x (cos, sin), each (b|1, n, r/2)
        index = self.axis_of_pair.to(coords.device)
        cos = torch.stack([c for c, _ in per_axis])  # (a, b|1, n, r/2)
        sin = torch.stack([s for _, s in per_axis])
        shape = (1, *cos.shape[1:])
        pick = index.view(1, 1, 1, -1).expand(shape)
        return cos.gather(0, pick)[0], sin.gather(0, pick)[0]

    def cos_sin(
        self,
        positions: torch.Tensor | Positions | AxisPositions,
        dtype: torch.dtype,
        *,
        layout: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(b|1, n, r/2)`` in ``dtype`` for coordinates ``(b|1, n, a)`` or
        sequence positions ``(b|1, n)``; with a tensor ``layout`` shaped to broadcast against q/k
        (``(b|1, 1, n, r/2)`` for ``"bhsd"``, ``(b|1, n, 1, r/2)`` for ``"bshd"``)."""
        pos = _coerce(positions, self.position_axes)
        cos, sin = self._tables(pos, dtype)
        if layout is not None:
            return to_layout(cos, layout), to_layout(sin, layout)
        return cos, sin

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        """Rotate ``q (b, h, i, d)`` and ``k (b, g, j, d)`` (``layout="bshd"``: ``(b, n, h, d)``);
        positions ``(b|1, n, a)`` coordinates or ``(b|1, n)`` on the diagonal."""
        return rotary_hook(
            self._rotate_bhsd, q, k, q_positions, k_positions,
            head_dim=self.config.head_dim, layout=layout, axes=self.position_axes,
        )  # fmt: skip

    def _head_tables(self, positions: AxisPositions, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(b|1, 1, n, r/2)``: :meth:`_tables` with a heads axis."""
        cos, sin = self._tables(positions, dtype)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    def _rotate_bhsd(self, q, k, qp: AxisPositions, kp: AxisPositions):
        diagonal = qp.diagonal
        bound = None if qp.bound is None or kp.bound is None else max(qp.bound, kp.bound)
        return rotate_by_table(
            q, k, qp, kp, table=self._sincos, start=None if diagonal is None else diagonal.start,
            bound=bound, same=same_positions(qp, kp),
            lookup=self._head_tables,
            layout=self.layout, rotary_dim=self.rotary_dim,
        )  # fmt: skip


def _coerce(positions, axes: int) -> AxisPositions:
    if isinstance(positions, AxisPositions):
        return positions
    tensor = positions.tensor if isinstance(positions, Positions) else positions
    check_tensor("positions", tensor, ndim=(1, 2, 3))
    return as_axis_positions(positions, tensor.shape[1 if tensor.ndim > 1 else 0], axes)


def even_sections(pairs: int, axes: int, name: str = "sections") -> list[int]:
    """``pairs`` split evenly over ``axes``, or a PosencError saying to pass them."""
    if pairs % axes:
        raise PosencError(
            f"head_dim / 2 = {pairs} rotary pairs do not split evenly over {axes} axes; pass {name} "
            f"(pairs per axis, summing to {pairs})"
        )
    return [pairs // axes] * axes


def check_sections(name: str, sections, pairs: int, axes: int, *, minimum: int = 1) -> list[int]:
    """``sections``: one int ``>= minimum`` per axis, summing to the ``pairs`` rotary pairs."""
    if not isinstance(sections, (list, tuple)) or len(sections) != axes:
        raise PosencError(
            f"{name} must list the rotary pairs of each of the {axes} axes {axis_name(axes)}, got {sections!r}"
        )
    values = [check_int(f"{name}[{k}]", v, minimum=minimum) for k, v in enumerate(sections)]
    if sum(values) != pairs:
        raise PosencError(
            f"{name} {values} sums to {sum(values)} but head_dim / 2 = {pairs} rotary pairs must be split"
        )
    return values


@dataclass(frozen=True)
class AxialRoPEConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    axes: int = 2  # position axes: 2 for (h, w) images, 3 for (t, h, w) video
    base: float = 100.0  # each axis' ladder base^(-j / s); RoPE-ViT uses 100, EVA-02 10000
    layout: str = "interleaved"  # pair layout: "interleaved" (EVA-02, RoPE-ViT, timm) or "half"
    sections: list[int] | None = None  # rotary pairs per axis (sum head_dim / 2); None = even split

    def validate(self) -> None:
        d = check_int("head_dim", self.head_dim, minimum=2, even=True)
        axes = check_axes(self.axes)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_choice("layout", self.layout, LAYOUTS)
        if self.sections is None:
            even_sections(d // 2, axes)
        else:  # a tuple is a list by now (EncodingConfig's normal form)
            check_sections("sections", self.sections, d // 2, axes)

    def resolved_sections(self) -> list[int]:
        return (
            list(self.sections) if self.sections is not None else even_sections(self.head_dim // 2, self.axes)
        )


class AxialRoPE(_PairAxisRotary):
    r"""Axial 2-D/3-D RoPE (EVA-02, Fang et al. 2023; RoPE-Axial of Heo et al. 2024).

    Axis ``k`` owns ``s_k`` consecutive pairs (``sections``; default ``d/2`` split evenly), turned
    by a 1-D RoPE of its own coordinate: pair ``j`` of axis ``k`` at coordinate ``p_k`` by
    :math:`p_k\, base^{-j/s_k}`. For a patch at ``(h, w)`` the first ``d/4`` pairs turn with the
    row, the last ``d/4`` with the column (EVA-02's order); ``<f(q, p), f(k, p')>`` depends on
    ``(h - h', w - w')`` only. A class token (coordinate -1) is not rotated, as in EVA-02 and RoPE-ViT.
    """

    Config = AxialRoPEConfig
    config: AxialRoPEConfig
    paper = (
        "Heo et al. 2024, Rotary Position Embedding for Vision Transformer (RoPE-Axial), "
        "https://arxiv.org/abs/2403.13298; Fang et al. 2023, EVA-02, https://arxiv.org/abs/2303.11331"
    )
    equation = "pair j of axis k at coordinate p_k turns by p_k * base^(-j / s_k); q.k depends on p - p'"

    def __init__(self, config: AxialRoPEConfig) -> None:
        super().__init__(config)
        sections = config.resolved_sections()
        inv_freq = torch.cat([inverse_frequencies(2 * s, config.base) for s in sections])  # (r/2,)
        axis = torch.cat([torch.full((s,), k) for k, s in enumerate(sections)])
        self._setup(inv_freq, axis, config.axes, config.layout)


@dataclass(frozen=True)
class MRoPEConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    base: float = 10000.0  # rope_theta: theta_i = base^(-2i / head_dim) (Qwen2-VL checkpoints: 1e6)
    mrope_section: list[int] | None = (
        None  # pairs reading (t, h, w), sum head_dim / 2; None: Qwen2-VL's 1/4, 3/8, 3/8
    )
    mrope_interleaved: bool = False  # Qwen3-VL: sections interleaved t, h, w, t, h, w, ...
    layout: str = "half"  # pair layout: "half" (transformers' Qwen2-VL) or "interleaved"

    def validate(self) -> None:
        d = check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_bool("mrope_interleaved", self.mrope_interleaved)
        check_choice("layout", self.layout, LAYOUTS)
        if self.mrope_section is not None:  # a tuple is a list by now (EncodingConfig's normal form)
            check_sections("mrope_section", self.mrope_section, d // 2, 3, minimum=0)

    def resolved_section(self) -> list[int]:
        """``mrope_section``, or Qwen2-VL's proportions for this head_dim: 3/8 of the pairs for h and
        for w each (at least one when there are two pairs), the rest for t (16, 24, 24 of 64)."""
        if self.mrope_section is not None:
            return list(self.mrope_section)
        pairs = self.head_dim // 2
        spatial = min(pairs // 2, max(1, (3 * pairs) // 8))
        return [pairs - 2 * spatial, spatial, spatial]


def mrope_axes(section: list[int], interleaved: bool) -> torch.Tensor:
    """The axis (0 t, 1 h, 2 w) each pair reads: contiguous sections (Qwen2-VL, Qwen2.5-VL) or
    the interleave ``t, h, w, t, h, w, ...`` of Qwen3-VL, h and w limited to ``3 section[k]``."""
    pairs = sum(section)
    if not interleaved:
        return torch.cat([torch.full((s,), k) for k, s in enumerate(section)])
    index = torch.arange(pairs)
    axis = torch.zeros(pairs, dtype=torch.long)
    axis[(index % 3 == 1) & (index < 3 * section[1])] = 1
    axis[(index % 3 == 2) & (index < 3 * section[2])] = 2
    return axis


class MRoPE(_PairAxisRotary):
    r"""Multimodal RoPE (M-RoPE) of Qwen2-VL (Wang et al. 2024), with ``mrope_section``.

    Pair ``i`` keeps RoPE's frequency :math:`\theta_i = base^{-2i/d}` but turns by the token's
    ``t``, ``h`` or ``w`` coordinate: the first ``mrope_section[0]`` pairs by ``t``, the next
    ``mrope_section[1]`` by ``h``, the rest by ``w`` (Qwen2-VL: 16, 24, 24 of 64). Text tokens sit
    on the diagonal ``t = h = w = p``, where M-RoPE is exactly 1-D RoPE; image and video patches
    get ``(start + t, start + h, start + w)`` (:func:`posenc.core.axes.multimodal_positions`).
    ``mrope_interleaved`` is Qwen3-VL's layout of the sections.
    """

    Config = MRoPEConfig
    config: MRoPEConfig
    paper = (
        "Wang et al. 2024, Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any "
        "Resolution (M-RoPE), https://arxiv.org/abs/2409.12191"
    )
    equation = (
        "pair i turns by p_{axis(i)} * base^(-2i/d), axis(i) in (t, h, w) by mrope_section; t=h=w: RoPE"
    )

    def __init__(self, config: MRoPEConfig) -> None:
        super().__init__(config)
        section = config.resolved_section()
        axis = mrope_axes(section, config.mrope_interleaved)
        self._setup(inverse_frequencies(config.head_dim, config.base), axis, 3, config.layout)


# ---------------------------------------------------------------------------
# RoPE-Mixed: learned frequencies per head over both axes.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoPEMixedConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; divisible by 4
    num_heads: int = model_field("num_heads")  # one set of learned frequencies per head
    base: float = 10.0  # initial magnitudes base^(-4k / head_dim) (the paper uses 10)
    layout: str = "interleaved"  # pair layout: "interleaved" (RoPE-ViT, timm) or "half"

    def validate(self) -> None:
        d = check_int("head_dim", self.head_dim, minimum=4)
        if d % 4:
            raise PosencError(f"head_dim must be divisible by 4 (half the pairs per direction), got {d}")
        check_int("num_heads", self.num_heads, minimum=1)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_choice("layout", self.layout, LAYOUTS)


def mixed_frequencies(head_dim: int, directions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies ``(heads, 2, d/2)`` (row, column) for per-head directions
    ``phi``: magnitudes ``base^(-4k/d)``, the first ``d/4`` pairs along ``phi``, the rest along
    ``phi + pi/2`` (f_y = m sin, f_x = m cos)."""
    magnitude = base ** (-torch.arange(0, head_dim, 4, dtype=torch.float64)[: head_dim // 4] / head_dim)
    phi = torch.stack([directions, directions + math.pi / 2], dim=-1).to(torch.float64)  # (h, 2)
    angle = phi.repeat_interleave(head_dim // 4, dim=-1)  # (h, d/2)
    m = magnitude.repeat(2)  # (d/2,)
    return torch.stack([m * torch.sin(angle), m * torch.cos(angle)], dim=1)  # (h, 2, d/2)


class RoPEMixed(RotaryEncoding):
    r"""RoPE-Mixed (Heo et al. 2024): learned frequencies per head over both axes.

    Pair ``i`` of head ``h`` at row ``y``, column ``x`` turns by
    :math:`y\, f^h_y[i] + x\, f^h_x[i]` with ``f`` trained (eq. 8 of the paper), so a pair can
    turn along any direction of the image, diagonals included. Initialised as in the paper: per
    head a random direction ``phi``, magnitudes :math:`base^{-4k/d}`, half the pairs along ``phi``
    and half along ``phi + pi/2``. Each layer learns its own (``share_across_layers = False``).
    Frequencies differ per query head, so keys cannot be shared by several query heads
    (no grouped-query attention).
    """

    position_axes = 2  # (h, w): RoPE-Mixed mixes the two image axes

    Config = RoPEMixedConfig
    config: RoPEMixedConfig
    paper = (
        "Heo et al. 2024, Rotary Position Embedding for Vision Transformer (RoPE-Mixed), "
        "https://arxiv.org/abs/2403.13298"
    )
    equation = "pair i of head h turns by y f_y[h, i] + x f_x[h, i], f learned per head"
    supports_grouped_kv = False

    def __init__(self, config: RoPEMixedConfig) -> None:
        super().__init__(config)
        self.layout = config.layout
        self.rotary_dim = config.head_dim
        directions = torch.rand(config.num_heads, dtype=torch.float64) * 2 * math.pi
        init = mixed_frequencies(config.head_dim, directions, config.base)  # (h, 2, d/2)
        self.freqs = nn.Parameter(init.to(torch.get_default_dtype()))

    def _angles(self, positions: AxisPositions) -> torch.Tensor:
        """``(b|1, h, n, r/2)`` float64: ``coords . f`` per head (differentiable in ``f``)."""
        coords = positions.clamped().to(torch.float64)  # (b|1, n, 2); -1 (no position) -> 0
        freqs = self.freqs.to(torch.float64)  # (h, 2, d/2)
        return torch.einsum("bna,hai->bhni", coords, freqs)

    def cos_sin(
        self, positions: torch.Tensor | Positions | AxisPositions, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(b|1, h, n, d/2)`` in ``dtype`` (one table per head)."""
        angles = self._angles(_coerce(positions, 2))
        return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        """Rotate ``q`` and ``k`` ``(b, h, n, d)`` (``layout="bshd"``: ``(b, n, h, d)``) by each
        head's frequencies; positions ``(b|1, n, 2)`` or ``(b|1, n)`` on the diagonal."""
        return rotary_hook(
            self._rotate_bhsd, q, k, q_positions, k_positions,
            head_dim=self.config.head_dim, layout=layout, axes=2, check=self._check_heads,
        )  # fmt: skip

    def _check_heads(self, q: torch.Tensor, k: torch.Tensor, layout: str) -> None:
        """Per-head rotations: q and k have the ``num_heads`` heads the frequencies were learned for."""
        axis = 1 if layout == "bhsd" else 2
        heads = (q.shape[axis], k.shape[axis])
        if heads != (self.config.num_heads, self.config.num_heads):
            raise PosencError(
                f"RoPE-Mixed learns frequencies for num_heads={self.config.num_heads} heads, but q has "
                f"{heads[0]} and k {heads[1]}; keys shared by several query heads (grouped-query "
                "attention) cannot take per-head rotations"
            )

    def _rotate_bhsd(self, q, k, qp: AxisPositions, kp: AxisPositions):
        grad = torch.is_grad_enabled() and self.freqs.requires_grad
        wide = compute_dtype(q.dtype)
        q_angles = self._angles(qp)
        k_angles = q_angles if same_positions(qp, kp) else self._angles(kp)
        if grad:  # the plain rotation, differentiable in cos/sin (hence in the frequencies)
            out = []
            for x, angles in ((q, q_angles), (k, k_angles)):
                cos, sin = torch.cos(angles).to(wide), torch.sin(angles).to(wide)
                out.append(
                    apply_rotary(x.to(wide), cos, sin, layout=self.layout, rotary_dim=self.rotary_dim).to(
                        x.dtype
                    )
                )
            return out[0], out[1]
        tables = [(torch.cos(a).to(table_dtype(x.dtype)), torch.sin(a).to(table_dtype(x.dtype)))
                  for x, a in ((q, q_angles), (k, k_angles))]  # fmt: skip
        q, k = rotate_trusted(
            ((q, *tables[0]), (k, *tables[1])), layout=self.layout, rotary_dim=self.rotary_dim
        )
        return q, k


# The multi-axis rotary members by registry name (posenc.registry lists them among its built-ins).
AXIAL_ROTARY_MEMBERS: dict[str, type[RotaryEncoding]] = {
    "rope_axial": AxialRoPE,
    "rope_mixed": RoPEMixed,
    "mrope": MRoPE,
}

__all__ = [
    "AXIAL_ROTARY_MEMBERS",
    "AxialRoPE",
    "MRoPE",
    "RoPEMixed",
    "check_qk_axes",
    "mixed_frequencies",
    "mrope_axes",
]
