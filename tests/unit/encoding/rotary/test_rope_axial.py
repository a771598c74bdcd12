"""Multi-axis encodings against their float64 NumPy references, full tensors; the properties their
papers state (relative angles axis by axis, M-RoPE = RoPE on text); the errors their inputs earn."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.core import axes
from posenc.core.axes import NO_POSITION, grid_positions, multimodal_positions
from posenc.core.errors import PosencError, PosencTypeError
from posenc.nn.transformer import Transformer, TransformerConfig

MULTI = [
    name
    for name in posenc.ENCODINGS
    if posenc.build_for_model(name, d_model=24, num_heads=2).position_axes > 1
]
F64, F32 = tol(torch.float64), tol(torch.float32)


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


def qk(heads: int, n: int, d: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, n, d, generator=g, dtype=dtype) for _ in range(2))


# ---------------------------------------------------------------------------
# Positions with axes.
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Additive: against the references.
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Rotary: against the references.
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Through attention and the model: coordinates, the KV cache, errors.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", MULTI)
def test_model_takes_coordinates_and_decodes_with_cache(name):
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=2, encoding=name)
    )
    model = model.double().eval()
    a = model.encodings().__next__().position_axes
    pos = multimodal_positions([2, (1, 2, 3), 2]) if a == 3 else coords(*([3] * a))[:, :10]
    n = pos.shape[1]
    tokens = torch.randint(0, 20, (2, n), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens, positions=pos)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], positions=pos[:, :4], cache=cache)]
        steps += [model(tokens[:, t : t + 1], positions=pos[:, t : t + 1], cache=cache) for t in range(4, n)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, **F64)
        # positions=None after coordinates: text continues on the diagonal past the largest one
        nxt = model(tokens[:, :1], cache=cache)
        top = int(pos.max()) + 1
        explicit = model(torch.cat([tokens, tokens[:, :1]], 1),
                         positions=torch.cat([pos, torch.full((1, 1, a), top)], 1))[:, -1:]  # fmt: skip
        torch.testing.assert_close(nxt, explicit, **F64)
        coordinates_differ = model(tokens, positions=pos * 2)
    assert float((coordinates_differ - full).abs().max()) > 1e-9  # the coordinates are used


def test_one_dimensional_encodings_refuse_coordinates_by_name():
    model = Transformer(
        TransformerConfig(vocab_size=10, d_model=16, num_heads=2, num_layers=1, encoding="rope")
    )
    with pytest.raises(
        PosencError,
        match=r"positions have 2 coordinates per token \(h, w\) but encoding RoPE takes sequence positions",
    ):
        model(torch.zeros(1, 4, dtype=torch.long), positions=coords(2, 2))
    additive = Transformer(
        TransformerConfig(vocab_size=10, d_model=16, num_heads=2, num_layers=1, encoding="sinusoidal")
    )
    with pytest.raises(PosencError, match="encoding Sinusoidal takes sequence positions"):
        additive(torch.zeros(1, 4, dtype=torch.long), positions=coords(2, 2))
    mrope = Transformer(
        TransformerConfig(vocab_size=10, d_model=24, num_heads=2, num_layers=1, encoding="mrope")
    )
    with pytest.raises(PosencError, match=r"encoding MRoPE takes 3 \(t, h, w\)"):
        mrope(torch.zeros(1, 4, dtype=torch.long), positions=coords(2, 2))


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


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["alibi_2d", "rope_mixed", "sincos_axial"])
def test_attention_paths_agree_with_coordinates(name, causal):
    from posenc.nn.attention import MultiHeadAttention

    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    plain = MultiHeadAttention(
        16, 2, encoding=None if enc.kind == "additive" else enc, causal=causal, path="plain"
    )
    sdpa = MultiHeadAttention(
        16, 2, encoding=None if enc.kind == "additive" else enc, causal=causal, path="sdpa"
    )
    sdpa.load_state_dict(plain.state_dict())
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    pos = coords(3, 3, prefix=1)
    plain, sdpa = plain.double(), sdpa.double()
    torch.testing.assert_close(plain(x, positions=pos), sdpa(x, positions=pos), **F64)
