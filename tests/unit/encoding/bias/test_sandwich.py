"""Sandwich: 0 at distance 0, negative elsewhere, decaying while every phase is in [0, pi], heads compressed as ALiBi's."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

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


@given(embed_dim=st.integers(1, 128).map(lambda x: 2 * x), num_heads=st.integers(1, 16))
def test_sandwich_zero_at_zero_negative_elsewhere(embed_dim, num_heads):
    enc = build("sandwich", num_heads=num_heads, embed_dim=embed_dim)
    distance = torch.arange(0, 1000)
    bias = enc.bias_fn(
        distance[None, :], torch.zeros(1, 1, dtype=torch.long), torch.arange(num_heads)[:, None]
    )
    assert bool((bias[:, 0] == 0).all())
    assert bool((bias[:, 1:] < 0).all())  # p_i . p_j < |p|^2 = d'/2 off the diagonal
    # Monotone while every frequency's phase is in [0, pi]: derivative -sum w sin(w d) <= 0.
    last = int(math.pi / enc.frequencies.max())
    assert bool((bias[:, : last + 1].diff(dim=-1) <= 0).all())
    # Head h (1-based) is head 1 divided by h: the ALiBi-like compression.
    torch.testing.assert_close(bias * torch.arange(1, num_heads + 1)[:, None], bias[:1].expand_as(bias))
