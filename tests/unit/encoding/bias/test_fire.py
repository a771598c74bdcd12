"""FIRE: its initial parameters and the heads that tell the two directions apart."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encoding import bias as B


def build(name: str, num_heads: int = 3, **config) -> B._BiasFamily:
    torch.manual_seed(0)
    enc = posenc.build(name, num_heads=num_heads, **config)
    if name == "fire":  # make the MLP's output visibly depend on its input
        with torch.no_grad():
            for p in enc.parameters():
                if p.ndim:
                    p.normal_(0.0, 1.0)
    return enc


def test_fire_init_and_bidirectional_heads():
    enc = posenc.build("fire", num_heads=4)
    assert enc.c.item() == pytest.approx(0.1) and enc.threshold_multiplier.item() == 1.0
    assert enc.mlp_in.out_features == 32 and enc.mlp_out.out_features == 4
    both = build("fire", 4, bidirectional=True)
    assert both.mlp_out.out_features == 8
    dense = both.bias(6, 6)[0]
    assert not torch.allclose(dense, dense.transpose(-1, -2))  # directions told apart
