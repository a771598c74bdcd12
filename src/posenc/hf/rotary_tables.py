"""The rotation tables posenc gives a transformers model: :class:`RotaryTables` stands in the model's
rotary-embedding slot and computes each layer type's tables from posenc's encodings, in the
family's format (:func:`format_tables`); where the layers of one type take different tables, a
forward pre-hook on each attention layer picks its own (:func:`pick_hook`). Installed by
:func:`posenc.hf.model.apply`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from posenc.core.errors import PosencError
from posenc.encoding.base import RotaryEncoding

IDENTITY = -1  # the table source of layers that do not rotate (NoPE, bias encodings)


def format_tables(fmt: str, cos: torch.Tensor, sin: torch.Tensor) -> Any:
    """posenc's ``cos, sin (b, n, r/2)`` in a family's format (:mod:`posenc.hf.families`)."""
    if fmt == "cat":
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    if fmt == "repeat":
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if fmt == "sin_cos":
        return sin, cos
    return torch.complex(cos.float(), sin.float())  # "complex"


class RotaryTables(nn.Module):
    """Stands where the model's rotary embedding was: ``(x, position_ids[, layer_type]) -> tables``.

    ``sources`` are the distinct rotary encodings of the model's layers (submodules, so they
    move and train with the model); ``routes[layer_type]`` lists the sources the layers of
    that type take (:data:`IDENTITY` for no rotation). One source: its tables; several:
    stacked along a new first axis, for the layers' hooks to pick from.
    """

    def __init__(
        self,
        fmt: str,
        sources: Sequence[RotaryEncoding],
        routes: dict[str | None, tuple[int, ...]],
        pairs: dict[str | None, int],
        axes: int = 1,
    ) -> None:
        super().__init__()
        self.fmt = fmt
        self.axes = axes  # > 1: position ids (axes, b, n), as Qwen2-VL's (t, h, w)
        self.sources = nn.ModuleList(sources)
        self.routes = routes
        self.pairs = pairs  # r/2 per layer type: the identity tables' width

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
        if not isinstance(position_ids, torch.Tensor) or position_ids.is_floating_point():
            raise PosencError("posenc's rotary tables need integer position_ids from the model")
        if layer_type not in self.routes:
            raise PosencError(f"layer_type {layer_type!r} is not one of this model's {list(self.routes)}")
        dtype = torch.float32 if self.fmt == "complex" else x.dtype
        if self.axes > 1 and position_ids.ndim == 3:  # (axes, b, n) -> (b, n, axes) coordinates
            position_ids = position_ids.permute(1, 2, 0)
        tables = [self._tables(index, position_ids, dtype, layer_type) for index in self.routes[layer_type]]
        if len(tables) == 1:
            return tables[0]
        if isinstance(tables[0], torch.Tensor):
            return torch.stack(torch.broadcast_tensors(*tables))  # (e, b, n, r/2) complex
        return tuple(torch.stack(torch.broadcast_tensors(*parts)) for parts in zip(*tables))  # (e, b, n, r)

    def _tables(self, index: int, position_ids: torch.Tensor, dtype: torch.dtype, layer_type: str | None):
        if index == IDENTITY:
            shape = (*position_ids.shape[:2], self.pairs[layer_type])
            cos = torch.ones(shape, dtype=dtype, device=position_ids.device)
            sin = torch.zeros(shape, dtype=dtype, device=position_ids.device)
        else:
            source = cast(Any, self.sources[index])
            cos, sin = source.cos_sin(position_ids, dtype)
        return format_tables(self.fmt, cos, sin)


def pick_hook(index: int, family: str):
    """A forward pre-hook giving an attention layer entry ``index`` of the stacked tables."""

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        tables = kwargs.get("position_embeddings")
        if tables is None:
            raise PosencError(
                f"{family}'s attention layer got no position_embeddings keyword; posenc cannot give its "
                "layers different encodings"
            )
        if isinstance(tables, torch.Tensor):
            kwargs["position_embeddings"] = tables[index]
        else:
            kwargs["position_embeddings"] = tuple(part[index] for part in tables)
        return args, kwargs

    return hook
