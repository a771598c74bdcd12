"""ALiBi (Press et al.): its slopes as the paper constructs them and its causal and bidirectional forms."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.encoding import bias as B
from posenc.reference import bias as R

F64 = tol(torch.float64)


def build(name: str, num_heads: int = 3, **config) -> B._BiasFamily:
    torch.manual_seed(0)
    enc = posenc.build(name, num_heads=num_heads, **config)
    if name == "fire":  # make the MLP's output visibly depend on its input
        with torch.no_grad():
            for p in enc.parameters():
                if p.ndim:
                    p.normal_(0.0, 1.0)
    return enc


@given(num_heads=st.integers(1, 64))
def test_alibi_slopes_follow_the_construction(num_heads):
    slopes = B.alibi_slopes(num_heads)
    assert slopes.dtype == torch.float64 and slopes.shape == (num_heads,)
    torch.testing.assert_close(slopes, torch.from_numpy(R.alibi_slopes(num_heads)), rtol=0, atol=0)
    p = 2 ** int(math.log2(num_heads))
    ratio = 2.0 ** (-8.0 / p)
    torch.testing.assert_close(slopes[:p], ratio ** torch.arange(1, p + 1, dtype=torch.float64), **F64)
    if p == num_heads:  # a power of two: geometric, from 2^(-8/n) down to 2^-8
        torch.testing.assert_close(slopes[1:] / slopes[:-1], torch.full((p - 1,), ratio, dtype=torch.float64))
        assert slopes[-1] == 2.0**-8
    else:  # every other slope of the doubled set (2^(-4/p), 2^(-12/p), ...)
        odd = 2.0 ** (-4.0 * torch.arange(1, 2 * (num_heads - p), 2, dtype=torch.float64) / p)
        torch.testing.assert_close(slopes[p:], odd, **F64)
    assert bool(((slopes > 0) & (slopes < 1)).all()) and len(set(slopes.tolist())) == num_heads


def test_alibi_published_slopes_for_8_heads():
    """Press et al. sec. 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256."""
    torch.testing.assert_close(B.alibi_slopes(8), 0.5 ** torch.arange(1, 9, dtype=torch.float64))


def test_alibi_causal_and_bidirectional_forms():
    causal, both = build("alibi", 4).bias(6, 6)[0], build("alibi", 4, bidirectional=True).bias(6, 6)[0]
    lower = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(causal[:, lower], both[:, lower], rtol=0, atol=0)  # same for j <= i
    torch.testing.assert_close(both, both.transpose(-1, -2), rtol=0, atol=0)  # symmetric
    assert causal[:, 5, 0].tolist() == (-5 * B.alibi_slopes(4)).float().tolist()
