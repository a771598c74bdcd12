"""Drive any encoding through its kind's hook, so contract tests never branch on names
(the driver is posenc.testing's, which users run on their own classes)."""

from __future__ import annotations

import torch

import posenc
from posenc.testing import apply_hook, hook_inputs

D_MODEL, NUM_HEADS = 16, 2
HEAD_DIM = D_MODEL // NUM_HEADS


def make(name: str, **config) -> posenc.PositionalEncoding:
    torch.manual_seed(0)
    return posenc.build_for_model(name, d_model=D_MODEL, num_heads=NUM_HEADS, **config)


def inputs(enc, batch: int, seq: int, dtype=torch.float32, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random inputs for the encoding's hook (the tensors gradcheck differentiates)."""
    return hook_inputs(enc, batch, seq, dims=(D_MODEL, NUM_HEADS, HEAD_DIM), dtype=dtype, seed=seed)


def apply(enc, batch: int, seq: int, tensors: dict, positions: torch.Tensor | None) -> torch.Tensor:
    """Call the kind's hook; return one tensor summarising every output."""
    return apply_hook(enc, batch, seq, tensors, positions)
