"""The multi-axis rotary members (rope_axial, rope_mixed, mrope) against their float64 NumPy references,
full tensors; the properties their papers state (relative angles axis by axis, M-RoPE = RoPE on text); the
errors their configs earn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.core import axes
from posenc.core.axes import grid_positions, multimodal_positions
from posenc.core.errors import PosencError

F64, F32 = tol(torch.float64), tol(torch.float32)


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


def qk(heads: int, n: int, d: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, n, d, generator=g, dtype=dtype) for _ in range(2))


@pytest.mark.parametrize(("num_axes", "sections", "layout"), [(2, None, "interleaved"), (3, [2, 3, 3], "half"),
                                                             (2, [3, 5], "half")])  # fmt: skip
def test_rope_axial_equals_reference(num_axes, sections, layout):
    d = 16
    enc = posenc.build("rope_axial", head_dim=d, axes=num_axes, base=100.0, layout=layout, sections=sections)
    pos = coords(*([3] * num_axes), prefix=1, start=1)
    n = pos.shape[1]
    q, k = qk(2, n, d)
    got_q, got_k = enc.rotate(q, k, q_positions=pos, k_positions=pos)
    inv_freq, axis = reference.axial_rope_frequencies(sections or [d // 2 // num_axes] * num_axes, 100.0)
    for got, x in ((got_q, q), (got_k, k)):
        want = reference.pair_rope(x[0].numpy(), pos[0].numpy(), inv_freq, axis, layout=layout)
        torch.testing.assert_close(got[0], torch.from_numpy(want), **F64)
    torch.testing.assert_close(got_q[:, :, 0], q[:, :, 0], rtol=0, atol=0)  # class token: not rotated


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_equals_reference(interleaved):
    d, section = 24, [4, 4, 4]
    enc = posenc.build("mrope", head_dim=d, mrope_section=section, mrope_interleaved=interleaved, base=500.0)
    pos = multimodal_positions([2, (2, 2, 3), 3])
    q, k = qk(3, pos.shape[1], d, seed=3)
    got_q, _ = enc.rotate(q, k, q_positions=pos, k_positions=pos)
    inv_freq, axis = reference.mrope_frequencies(d, 500.0, section, interleaved=interleaved)
    want = reference.pair_rope(q[0].numpy(), pos[0].numpy(), inv_freq, axis, layout="half")
    torch.testing.assert_close(got_q[0], torch.from_numpy(want), **F64)
    assert enc.axis_of_pair.tolist() == axis.tolist()
    cos, sin = enc.cos_sin(pos, torch.float64)
    angles = pos[0].numpy()[:, axis] * inv_freq
    torch.testing.assert_close(cos[0], torch.from_numpy(np.cos(angles)), **F64)
    torch.testing.assert_close(sin[0], torch.from_numpy(np.sin(angles)), **F64)


def test_mrope_interleaved_axes_are_qwen3_vl_layout():
    # Qwen3-VL (head_dim 128, mrope_section [24, 20, 20]): h at 1, 4, ..., 58; w at 2, 5, ..., 59.
    axis = posenc.build(
        "mrope", head_dim=128, mrope_section=[24, 20, 20], mrope_interleaved=True
    ).axis_of_pair
    assert (axis == 1).nonzero().flatten().tolist() == list(range(1, 60, 3))
    assert (axis == 2).nonzero().flatten().tolist() == list(range(2, 60, 3))
    assert int((axis == 0).sum()) == 24


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_mrope_on_text_is_rope_bit_for_bit(dtype):
    """Text tokens (t = h = w) under M-RoPE are 1-D RoPE exactly: same tables, same rotation."""
    d = 32
    mrope = posenc.build("mrope", head_dim=d, mrope_section=[4, 6, 6], base=1e6)
    rope = posenc.build("rope", head_dim=d, base=1e6)
    q, k = (x.to(dtype) for x in qk(2, 9, d, seed=5))
    cases = [None, torch.arange(4, 13)[None], torch.tensor([[0, 3, 3, 7, 100, 5, 9, 2, 4000]])]
    for seq in cases:
        diag = None if seq is None else seq[..., None].expand(1, 9, 3)
        for got, want in zip(mrope.rotate(q, k, q_positions=diag, k_positions=diag),
                             rope.rotate(q, k, q_positions=seq, k_positions=seq)):  # fmt: skip
            assert torch.equal(got, want)
        if seq is not None:
            for got, want in zip(mrope.cos_sin(diag, dtype), rope.cos_sin(seq, dtype)):
                assert torch.equal(got, want)
    # Coordinates given as a tensor (no diagonal shortcut): still equal to RoPE to float64 rounding.
    seq = torch.tensor([[1, 2, 50, 7]])
    explicit = torch.cat([seq[..., None]] * 3, dim=-1).contiguous()
    got = mrope.cos_sin(axes.as_axis_positions(explicit, 4, 3)._replace(diagonal=None), torch.float64)
    for a, b in zip(got, rope.cos_sin(seq, torch.float64)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_rope_mixed_init_and_rotation_equal_reference():
    torch.manual_seed(7)
    directions = torch.rand(3, dtype=torch.float64) * 2 * math.pi  # what the constructor draws
    torch.manual_seed(7)
    enc = posenc.build("rope_mixed", head_dim=8, num_heads=3, base=10.0)
    want_freqs = reference.rope_mixed_frequencies(8, directions.numpy(), base=10.0)
    torch.testing.assert_close(enc.freqs.detach().double(), torch.from_numpy(want_freqs), **F32)
    pos = coords(3, 3, prefix=1)
    q, k = qk(3, pos.shape[1], 8, seed=2)
    enc = enc.double()
    with torch.no_grad():  # the fused kernel
        got_q, got_k = enc.rotate(q, k, q_positions=pos, k_positions=pos)
    freqs = enc.freqs.detach().numpy()
    torch.testing.assert_close(
        got_q[0], torch.from_numpy(reference.rope_mixed(q[0].numpy(), pos[0].numpy(), freqs)), **F64
    )
    torch.testing.assert_close(
        got_k[0], torch.from_numpy(reference.rope_mixed(k[0].numpy(), pos[0].numpy(), freqs)), **F64
    )
    grad_q, _ = enc.rotate(q, k, q_positions=pos, k_positions=pos)  # the differentiable path
    torch.testing.assert_close(grad_q, got_q, **F64)
    grad_q.sum().backward()
    assert enc.freqs.grad is not None and enc.freqs.grad.abs().sum() > 0


def test_rope_mixed_reduces_to_axial_with_axis_aligned_frequencies():
    """Frequencies with phi = 0 and the axial ladder: RoPE-Mixed is RoPE-Axial (columns first)."""
    mixed = posenc.build("rope_mixed", head_dim=8, num_heads=1, base=100.0).double()
    with torch.no_grad():
        mixed.freqs.copy_(torch.from_numpy(reference.rope_mixed_frequencies(8, np.zeros(1), 100.0)))
    axial = posenc.build("rope_axial", head_dim=8, base=100.0).double()
    pos = coords(3, 4)
    q, k = qk(1, 12, 8, seed=4)
    with torch.no_grad():
        got = mixed.rotate(q, k, q_positions=pos, k_positions=pos)
    swapped = pos.flip(-1)  # phi = 0: the first pairs turn with the column x
    want = axial.rotate(q, k, q_positions=swapped, k_positions=swapped)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", ["rope_axial", "rope_mixed", "mrope"])
def test_rotary_scores_depend_on_coordinate_differences_only(name):
    enc = posenc.build_for_model(name, d_model=16, num_heads=2).double()
    pos = coords(*([3] * enc.position_axes))
    shift = torch.tensor([2, 5, 1][: enc.position_axes])
    q, k = qk(2, pos.shape[1], 8, seed=9)
    with torch.no_grad():
        a_q, a_k = enc.rotate(q, k, q_positions=pos, k_positions=pos)
        b_q, b_k = enc.rotate(q, k, q_positions=pos + shift, k_positions=pos + shift)
    torch.testing.assert_close(a_q @ a_k.transpose(-1, -2), b_q @ b_k.transpose(-1, -2), **F64)
    # and they do depend on the difference along every axis
    other = pos.clone()
    other[..., -1] = other[..., -1].flip(-1)
    with torch.no_grad():
        c_q, c_k = enc.rotate(q, k, q_positions=other, k_positions=pos)
    assert not torch.allclose(a_q @ a_k.transpose(-1, -2), c_q @ c_k.transpose(-1, -2))


@pytest.mark.parametrize("name", ["rope_axial", "rope_mixed", "mrope"])
def test_rotary_bshd_layout_equals_bhsd(name):
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    pos = coords(*([2] * enc.position_axes))
    q, k = qk(2, pos.shape[1], 8, dtype=torch.float32)
    want = enc.rotate(q, k, q_positions=pos, k_positions=pos)
    got = enc.rotate(q.transpose(1, 2), k.transpose(1, 2), q_positions=pos, k_positions=pos, layout="bshd")
    for a, b in zip(got, want):
        torch.testing.assert_close(a.transpose(1, 2), b, rtol=0, atol=0)


def test_sections_given_as_tuples_or_numpy_ints_are_kept_as_lists_of_ints():
    """The configs' normal form (EncodingConfig): what compares, hashes and round-trips to JSON."""
    axial = posenc.build("rope_axial", head_dim=16, sections=(np.int64(3), 5)).config
    assert axial.sections == [3, 5] and type(axial.sections[0]) is int
    assert axial == posenc.build("rope_axial", head_dim=16, sections=[3, 5]).config
    mrope = posenc.build("mrope", head_dim=24, mrope_section=(4, 4, 4)).config
    assert mrope.mrope_section == [4, 4, 4] and mrope.to_dict()["mrope_section"] == [4, 4, 4]


def test_config_errors_name_the_parameter():
    with pytest.raises(PosencError, match=r"mrope_section \[16, 24, 20\] sums to 60 but head_dim / 2 = 64"):
        posenc.build("mrope", head_dim=128, mrope_section=[16, 24, 20])
    with pytest.raises(PosencError, match=r"mrope_section must list the rotary pairs of each of the 3 axes"):
        posenc.build("mrope", head_dim=128, mrope_section=[32, 32])
    with pytest.raises(PosencError, match=r"sections \[3, 3\] sums to 6 but head_dim / 2 = 8"):
        posenc.build("rope_axial", head_dim=16, sections=[3, 3])
    with pytest.raises(PosencError, match="do not split evenly over 3 axes; pass sections"):
        posenc.build("rope_axial", head_dim=16, axes=3)
    with pytest.raises(PosencError, match=r"axes must be an integer in \[2, 3\], got 4"):
        posenc.build("sincos_axial", dim=48, axes=4)
    with pytest.raises(PosencError, match=r"dim must be divisible by 2 \* axes = 6"):
        posenc.build("sincos_axial", dim=16, axes=3)
    with pytest.raises(PosencError, match="head_dim must be divisible by 4"):
        posenc.build("rope_mixed", head_dim=6, num_heads=2)
    assert posenc.build("mrope", head_dim=128).config.resolved_section() == [16, 24, 24]  # Qwen2-VL
