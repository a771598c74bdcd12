"""Hierarchical positions: a position is a (segment, offset-within-segment) pair.

Axis legend: b batch, n sequence, d d_model (d_s segment part, d_o offset part).

A widely shared interview answer on positional encodings lists *position saturation*
among the practical problems ("very long sequences may have similar position
encodings"; most concretely, a learned table runs out of rows) and suggests
hierarchical position encodings. This is the simplest one: split the position into
a coarse and a fine coordinate and encode each with an ordinary absolute encoding,
so a table of ``max_len`` rows covers ``max_len * segment_len`` positions::

    segment = pos // segment_len                  # which block of segment_len tokens
    offset  = pos %  segment_len                  # where inside that block
    PE(pos) = inner(segment) + inner(offset)      # combine="sum"    (d_s = d_o = d)
    PE(pos) = [inner(segment) | inner(offset)]    # combine="concat" (d_s = d_o = d/2)

Segments are FIXED-SIZE blocks of ``segment_len`` positions. To use real
sentence or document boundaries instead, give explicit positions built with
:func:`segment_positions` (``segment_index * segment_len + index_in_segment``):
the encoding then sees exactly the (sentence, word) pairs you mean, as long as
no segment is longer than ``segment_len``.

The float64 NumPy reference is :func:`posenc.reference.absolute.hierarchical`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posenc.core.checks import check_choice, check_int, check_tensor, is_integer_dtype
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.fields import EncodingConfig, model_field
from posenc.core.positions import Positions, segments
from posenc.encoding.absolute import sequence as absolute
from posenc.encoding.absolute.sequence import _Absolute
from posenc.encoding.base import PaperSetting

COMBINES = ("concat", "sum")


def inner_choices() -> list[str]:
    """Absolute encodings usable as ``inner``: the content-free ones (``encode`` works).

    ``complex_order`` depends on the token embedding, so it is excluded.
    """
    return [name for name, cls in absolute.SEQUENCE_MEMBERS.items() if cls.encode is _Absolute.encode]


@dataclass(frozen=True)
class HierarchicalConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; even when combine="concat" (each half gets dim/2)
    inner: str = "sinusoidal"  # registered absolute encoding used for both coordinates
    segment_len: int = 64  # positions per segment: segment = pos // segment_len
    combine: str = "concat"  # "concat": [segment | offset], "sum": segment + offset
    inner_config: dict | None = None  # extra config for both inner encodings, e.g. {"base": 100.0}

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=1)
        check_choice("inner", self.inner, inner_choices())
        check_int("segment_len", self.segment_len, minimum=1)
        check_choice("combine", self.combine, COMBINES)
        if self.combine == "concat" and self.dim % 2:
            raise PosencError(f"dim must be even with combine='concat' (dim/2 per part), got {self.dim}")
        if self.inner_config is not None:
            if not isinstance(self.inner_config, dict):
                raise PosencTypeError(
                    f"inner_config must be a dict or None, got {type(self.inner_config).__name__}"
                )
            if "dim" in self.inner_config:
                raise PosencError("inner_config must not set 'dim': it follows from dim and combine")
        self.inner_config_for_part()  # the inner Config validates its own fields now, not at build

    def inner_config_for_part(self) -> EncodingConfig:
        """The inner encoding's Config at ``dim = part_dim()``; errors name both levels."""
        data = {**(self.inner_config or {}), "dim": self.part_dim()}
        try:
            return absolute.SEQUENCE_MEMBERS[self.inner].Config.from_dict(data, owner=self.inner)
        except (TypeError, ValueError) as exc:
            raise type(exc)(
                f"inner={self.inner!r} cannot be built with dim={self.part_dim()} (dim={self.dim}, "
                f"combine={self.combine!r}) and inner_config={self.inner_config}: {exc}"
            ) from exc

    def part_dim(self) -> int:
        """Feature size of each part: ``dim`` for sum, ``dim // 2`` for concat."""
        return self.dim if self.combine == "sum" else self.dim // 2


class Hierarchical(_Absolute):
    r"""Two-level (segment, offset) positions, each encoded by an absolute encoding.

    .. math:: s = \lfloor pos / L \rfloor,\ o = pos \bmod L;\quad
              PE(pos) = [E_s(s) \,|\, E_o(o)] \ \text{(concat)}\ \text{or}\ E_s(s) + E_o(o) \ \text{(sum)}

    ``E_s`` and ``E_o`` are two instances of the registered encoding ``inner``
    (default ``sinusoidal``; a ``learned`` inner gets two independent tables, the
    segment table then covers ``max_len * segment_len`` positions). Segments are
    fixed blocks of ``L = segment_len`` positions; pass explicit positions from
    :func:`segment_positions` for sentence/document segments.

    Two positions in the same segment differ only in the offset part; positions
    ``L`` apart with the same offset differ only in the segment part. With
    ``combine="sum"`` and a parameter-free inner (sinusoidal), ``E_s = E_o``, so
    ``(s, o)`` and ``(o, s)`` collide when both are ``< L``: prefer ``concat``
    (the default), or a learned inner, for unique positions.

    Shapes: ``x (b, n, d)``, ``positions (b|1, n)`` -> ``(b, n, d)``.
    """

    Config = HierarchicalConfig
    config: HierarchicalConfig
    paper = (
        "Zhang et al. 2019, HIBERT (sentence- and word-level positions), https://arxiv.org/abs/1905.06566; "
        "a common remedy for position saturation, here with fixed-size segments"
    )
    equation = "s = pos // L, o = pos % L; PE(pos) = [E(s) | E(o)] (concat) or E(s) + E(o) (sum)"
    paper_setting = absolute.Sinusoidal.paper_setting  # the default inner's

    @classmethod
    def paper_setting_for(cls, config: dict[str, Any]) -> PaperSetting:
        """Its parts are ``inner`` encodings, trained as that encoding's paper trains it (the
        default, Vaswani et al.'s sinusoid: token embeddings x sqrt(d_model))."""
        inner = config.get("inner", cls.Config.parameters()["inner"])
        cls_inner = absolute.SEQUENCE_MEMBERS.get(inner)
        return cls.paper_setting if cls_inner is None else cls_inner.paper_setting

    def __init__(self, config: HierarchicalConfig) -> None:
        super().__init__(config)
        inner = absolute.SEQUENCE_MEMBERS[config.inner]
        self.segment = inner(config.inner_config_for_part())  # E_s
        self.offset = inner(config.inner_config_for_part())  # E_o, independent of E_s

    def split(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``positions (b|1, n)`` -> ``(segment, offset)``, both int64 ``(b|1, n)``."""
        length = self.config.segment_len
        return positions // length, positions % length

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        length, bound = self.config.segment_len, positions.bound
        seg_t, off_t = self.split(positions.tensor)
        segment = Positions(
            seg_t, None if bound is None else -(-bound // length), low=positions.low // length
        )
        offset = Positions(off_t, None if bound is None else min(bound, length))
        seg = self.segment._pe(segment, dtype).to(dtype)  # (b|1, n, d_s)
        off = self.offset._pe(offset, dtype).to(dtype)  # (b|1, n, d_o)
        if self.config.combine == "sum":
            return seg + off
        return torch.cat((seg, off), dim=-1)  # (b|1, n, d): segment half first


def segment_positions(segment_ids: torch.Tensor, *, segment_len: int) -> torch.Tensor:
    """Explicit positions for real segments (sentences, documents): ``id_index * L + index``.

    A new segment starts wherever ``segment_ids`` changes along the row, so
    ``[[7, 7, 7, 2, 2]]`` with ``segment_len=4`` gives ``[[0, 1, 2, 4, 5]]``:
    segment 0 offsets 0..2, segment 1 offsets 0..1. Pass the result as
    ``positions=`` to a ``hierarchical`` encoding with the same ``segment_len``.

    Args:
        segment_ids: integer ``(b, n)`` (or ``(n,)``) labels; only changes matter.
        segment_len: the encoding's ``segment_len``; every segment must fit in it.

    Returns:
        int64 ``(b, n)`` positions.

    Raises:
        ValueError: a segment is longer than ``segment_len`` (its offsets would spill
            into the next segment).
    """
    ids = check_tensor("segment_ids", segment_ids, ndim=(1, 2))
    if not (is_integer_dtype(ids.dtype) or ids.dtype == torch.bool):
        raise PosencTypeError(f"segment_ids must have an integer dtype, got {ids.dtype}")
    segment_len = check_int("segment_len", segment_len, minimum=1)
    ids = ids[None] if ids.ndim == 1 else ids  # (b, n)
    b, n = ids.shape
    if n == 0:
        return torch.zeros(b, 0, dtype=torch.long, device=ids.device)
    segment, offset = segments(ids)  # (b, n) 0-based segment index, offset inside it
    longest = int(offset.max()) + 1
    if longest > segment_len:
        raise PosencError(
            f"a segment has {longest} tokens but segment_len={segment_len}; raise segment_len to >= {longest}"
        )
    return segment * segment_len + offset


__all__ = ["COMBINES", "Hierarchical", "HierarchicalConfig", "inner_choices", "segment_positions"]
