"""The axial additive members (sincos_axial, learned_axial) against their float64 NumPy references, full tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.core.axes import grid_positions
from posenc.core.errors import PosencError

F64, F32 = tol(torch.float64), tol(torch.float32)


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


@pytest.mark.parametrize("num_axes", [2, 3])
def test_sincos_axial_equals_mae_reference(num_axes):
    dim = 24
    enc = posenc.build("sincos_axial", dim=dim, axes=num_axes, base=100.0)
    pos = coords(*([3] * num_axes), prefix=1, start=2)
    want = reference.sincos_axial(pos.numpy(), dim, base=100.0)
    got = enc.encode(pos)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), torch.from_numpy(want), **F32)
    assert not got[0, 0].any()  # the class token gets zeros, as in MAE


def test_sincos_axial_matches_mae_layout_by_hand():
    # MAE: a patch at row h, column w gets [sin(w w_i), cos(w w_i), sin(h w_i), cos(h w_i)].
    enc = posenc.build("sincos_axial", dim=8)
    got = enc.encode(torch.tensor([[[2, 5]]]))[0, 0].double()
    omega = 10000.0 ** (-np.arange(2) / 2)
    want = np.concatenate([np.sin(5 * omega), np.cos(5 * omega), np.sin(2 * omega), np.cos(2 * omega)])
    torch.testing.assert_close(got, torch.from_numpy(want), **F32)


def test_learned_axial_reference_interpolation_and_overflow():
    enc = posenc.build("learned_axial", dim=12, max_len=4)
    tables = [enc.table[a].detach().double().numpy() for a in range(2)]
    pos = coords(4, 4, prefix=1)
    torch.testing.assert_close(
        enc.encode(pos).double(), torch.from_numpy(reference.learned_axial(pos.numpy(), tables)), **F32
    )
    with pytest.raises(PosencError, match=r"coordinate 4 on axis 1 >= max_len=4.*interpolated"):
        enc.encode(torch.tensor([[[0, 4]]]))
    big = enc.interpolated(7)
    assert big.config.max_len == 7 and big.table.shape == (2, 7, 6)
    for a in range(2):
        want = reference.interpolate_table(tables[a], 7)
        torch.testing.assert_close(big.table[a].detach().double(), torch.from_numpy(want), **F32)
    torch.testing.assert_close(big.interpolated(7).table, big.table, **F32)  # same size: unchanged
    extra = posenc.build("learned_axial", dim=12, max_len=4, extra_rows=2)
    extra.encode(torch.tensor([[[5, 0]]]))
    with pytest.raises(PosencError, match=r"extra_rows=2 gives valid coordinates \[0, 5\]"):
        extra.encode(torch.tensor([[[6, 0]]]))


def test_learned_axial_gradients_reach_only_the_rows_used():
    enc = posenc.build("learned_axial", dim=8, max_len=6)
    enc.encode(coords(2, 3)).sum().backward()
    grad = enc.table.grad
    assert grad[0, :2].abs().sum() > 0 and grad[0, 2:].abs().sum() == 0  # rows 0, 1 of axis h
    assert grad[1, :3].abs().sum() > 0 and grad[1, 3:].abs().sum() == 0  # columns 0..2
