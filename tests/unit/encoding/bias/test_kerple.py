"""KERPLE (log and power): 0 at distance 0, non-increasing with distance, initialised as the official code."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
@given(r1=st.floats(-1, 5), r2=st.floats(-1, 5), bidirectional=st.booleans())
def test_kerple_zero_at_zero_and_non_increasing(name, r1, r2, bidirectional):
    enc = build(name, num_heads=1, bidirectional=bidirectional)
    with torch.no_grad():  # raw values outside the range exercise the clamps
        enc.r1.fill_(r1)
        enc.r2.fill_(r2)
    row = enc.bias_fn(torch.tensor(400), torch.arange(400, -1, -1), torch.tensor(0))  # distance 0..400
    assert row[0] == 0
    assert bool((row.diff() <= 0).all())
    p = enc._prepare(torch.device("cpu"))
    assert p["r1"].item() >= 0.01 and p["r2"].item() >= 0.01
    if name == "kerple_power":
        assert p["r2"].item() <= 2.0


def test_kerple_init_follows_the_official_code():
    """Official code: log r1 ~ 2 U(0,1), r2 ~ U(0,1); power r1 ~ U(0,1), r2 ~ 2 U(0,1)."""
    log, power = build("kerple_log", 256), build("kerple_power", 256)
    assert 0 <= log.r1.min() and log.r1.max() <= 2 and log.r1.max() > 1
    assert 0 <= log.r2.min() and log.r2.max() <= 1
    assert 0 <= power.r1.min() and power.r1.max() <= 1
    assert 0 <= power.r2.min() and power.r2.max() <= 2 and power.r2.max() > 1
