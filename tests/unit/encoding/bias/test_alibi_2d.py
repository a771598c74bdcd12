"""2-D ALiBi against its float64 NumPy reference; on the diagonal it is ALiBi times sqrt(2)."""

from __future__ import annotations

import math

import torch
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.core.axes import grid_positions

F64, F32 = tol(torch.float64), tol(torch.float32)


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


def test_alibi_2d_equals_reference_and_diagonal_is_alibi_times_sqrt2():
    enc = posenc.build("alibi_2d", num_heads=4)
    q_pos = coords(3, 3, prefix=1)
    k_pos = coords(2, 4, prefix=1, start=1)
    got = enc.bias(10, 9, q_positions=q_pos, k_positions=k_pos)
    want = reference.alibi_2d(q_pos[0].numpy(), k_pos[0].numpy(), 4)
    torch.testing.assert_close(got[0].double(), torch.from_numpy(want), **F32)
    assert not got[0, :, 0].any() and not got[0, :, :, 0].any()  # the class tokens: no bias
    alibi = posenc.build("alibi", num_heads=4, bidirectional=True)
    seq = torch.arange(6)[None]
    torch.testing.assert_close(enc.bias(6, 6, q_positions=seq, k_positions=seq),
                               alibi.bias(6, 6) * math.sqrt(2), rtol=1e-6, atol=1e-7)  # fmt: skip
    diag = seq[..., None].expand(1, 6, 2)
    torch.testing.assert_close(
        enc.bias(6, 6, q_positions=diag, k_positions=diag), enc.bias(6, 6), rtol=1e-6, atol=0
    )
