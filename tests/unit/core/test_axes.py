"""Positions with axes (``posenc.core.axes``): grids and multimodal sequences, their checks, and tokens
without a position, which multi-axis encodings leave alone."""

from __future__ import annotations

import doctest

import pytest
import torch

import posenc
from posenc.core import axes
from posenc.core.axes import NO_POSITION, grid_positions, multimodal_positions
from posenc.core.errors import PosencError, PosencTypeError


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


def qk(heads: int, n: int, d: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, n, d, generator=g, dtype=dtype) for _ in range(2))


def test_axes_docstring_examples_run():
    result = doctest.testmod(axes)
    assert result.attempted >= 3 and result.failed == 0


def test_grid_positions_are_row_major_with_prefix_tokens():
    got = coords(2, 3, prefix=2)[0]
    assert got.shape == (8, 2)
    assert got[:2].tolist() == [[-1, -1], [-1, -1]]
    assert got[2:].tolist() == [[r, c] for r in range(2) for c in range(3)]
    video = coords(2, 2, 2, start=5)[0]
    assert video.tolist()[:3] == [[5, 5, 5], [5, 5, 6], [5, 6, 5]]
    assert axes.flatten_grid(coords(3, 4), (3, 4))[0].tolist() == list(range(12))
    assert axes.grid_shape(coords(3, 4, prefix=1)) == (3, 4)


def test_flatten_grid_refuses_positions_outside_the_grid():
    """Found: flatten_grid(grid_positions((4, 4)), (3, 3)) returned duplicate indices (cell (1, 0)
    and cell (0, 3) both became 3)."""
    with pytest.raises(PosencError, match=r"coordinate 3 on axis 1 is outside the grid of sizes \(3, 3\)"):
        axes.flatten_grid(coords(4, 4), (3, 3))
    with pytest.raises(PosencError, match="coordinate -1 on axis 0"):  # -1 on some axes only
        axes.flatten_grid(torch.tensor([[[-1, 2]]]), (3, 3))
    flat = axes.flatten_grid(coords(3, 3, prefix=2), (3, 3))[0]  # tokens without a position: 0
    assert flat.tolist() == [0, 0, *range(9)]


def test_multimodal_positions_follow_qwen2_vl_rule():
    pos = multimodal_positions([3, (2, 2, 3), 2, (1, 1, 2)])[0]  # text, video, text, image
    assert pos[:3].tolist() == [[0, 0, 0], [1, 1, 1], [2, 2, 2]]
    video = pos[3:15]
    assert video[0].tolist() == [3, 3, 3] and video[-1].tolist() == [4, 4, 5]
    assert pos[15:17].tolist() == [[6, 6, 6], [7, 7, 7]]  # after the video's largest coordinate, 5
    assert pos[17:].tolist() == [[8, 8, 8], [8, 8, 9]]
    spaced = multimodal_positions([(3, 1, 1)], time_interval=2.5)[0]
    assert spaced[:, 0].tolist() == [0, 2, 5]  # floor(i * 2.5)
    with pytest.raises(PosencError, match=r"segments\[1\]"):
        multimodal_positions([2, (1, 2)])
    with pytest.raises(PosencError, match="time_interval"):
        multimodal_positions([2], time_interval=0)


def test_with_time_and_fits():
    two = coords(1, 2, prefix=1)
    assert axes.with_time(two, 4)[0].tolist() == [[-1, -1, -1], [4, 0, 0], [4, 0, 1]]
    axes.fits((14, 14), 197, prefix=1)
    with pytest.raises(
        PosencError, match=r"a 14 x 14 grid plus 1 prefix tokens has 197 tokens but the sequence has 196"
    ):
        axes.fits((14, 14), 196, prefix=1)
    assert axes.grid_side(196) == 14
    with pytest.raises(PosencError, match="square"):
        axes.grid_side(195)


def test_axis_positions_check_values_and_shapes():
    with pytest.raises(PosencError, match=r"-1 on every axis"):
        axes.as_axis_positions(torch.tensor([[[0, -1]]]), 1, 2)
    with pytest.raises(PosencError, match=r"has 3 coordinates per token .* takes 2 \(h, w\)"):
        axes.as_axis_positions(torch.zeros(1, 4, 3, dtype=torch.long), 4, 2)
    with pytest.raises(PosencError, match="4 positions per row but the input has seq length 5"):
        axes.as_axis_positions(torch.zeros(1, 4, 2, dtype=torch.long), 5, 2)
    with pytest.raises(PosencTypeError, match="integer dtype"):
        axes.as_axis_positions(torch.zeros(1, 4, 2), 4, 2)
    checked = axes.as_axis_positions(coords(2, 2, prefix=1), 5, 2)
    assert checked.bound == 2 and checked.has_none and checked.diagonal is None
    diagonal = axes.as_axis_positions(None, 4, 3)
    assert diagonal.diagonal is not None and diagonal.tensor[0, 2].tolist() == [2, 2, 2]


def test_no_position_tokens_get_nothing():
    pos = torch.tensor([[[NO_POSITION] * 2, [1, 2]]])
    for name in ("sincos_axial", "learned_axial"):
        enc = posenc.build(name, dim=8)
        assert not enc.encode(pos)[0, 0].any() and enc.encode(pos)[0, 1].any()
    for name in ("rope_axial", "rope_mixed"):
        enc = posenc.build_for_model(name, d_model=16, num_heads=2)
        q, k = qk(2, 2, 8, dtype=torch.float32)
        rq, _ = enc.rotate(q, k, q_positions=pos, k_positions=pos)
        torch.testing.assert_close(rq[:, :, 0], q[:, :, 0], rtol=0, atol=0)
        assert not torch.allclose(rq[:, :, 1], q[:, :, 1])
