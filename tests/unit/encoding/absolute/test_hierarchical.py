"""Hierarchical (segment, offset) positions against the NumPy reference, plus their properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.encoding.absolute.hierarchical import inner_choices, segment_positions

F64 = torch.float64


def pe(enc, positions) -> torch.Tensor:
    """PE(positions) in float64: embed zeros, so the result is the positional vector itself."""
    positions = torch.as_tensor(positions).reshape(1, -1)
    return enc.double().embed(
        torch.zeros(1, positions.shape[1], enc.config.dim, dtype=F64), positions=positions
    )[0]


@pytest.mark.parametrize("combine", ["concat", "sum"])
@pytest.mark.parametrize("segment_len", [1, 7, 64])
def test_sinusoidal_inner_matches_reference_on_full_tensors(combine, segment_len):
    enc = posenc.build("hierarchical", dim=16, segment_len=segment_len, combine=combine)
    g = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 10**6, (3, 50), generator=g)
    positions[0, :20] = torch.arange(20)
    x = torch.randn(3, 50, 16, generator=g, dtype=F64)
    got = enc.double().embed(x, positions=positions)
    want = x.numpy() + reference.hierarchical_sinusoidal(positions.numpy(), 16, segment_len, combine)
    torch.testing.assert_close(got, torch.from_numpy(want), **tol(F64))
    assert got.dtype == F64


def test_learned_inner_matches_reference_with_its_two_tables():
    enc = posenc.build(
        "hierarchical", dim=8, inner="learned", segment_len=16, inner_config={"max_len": 40}
    ).double()
    positions = torch.tensor([0, 1, 15, 16, 17, 300, 639])
    seg_table = enc.segment.table.detach().numpy()
    off_table = enc.offset.table.detach().numpy()
    assert not np.allclose(seg_table, off_table)  # two independent tables
    want = reference.hierarchical(
        positions.numpy(),
        segment_len=16,
        combine="concat",
        segment_encoding=lambda p: reference.learned(p, seg_table),
        offset_encoding=lambda p: reference.learned(p, off_table),
    )
    torch.testing.assert_close(pe(enc, positions), torch.from_numpy(want), **tol(F64))
    with pytest.raises(ValueError, match="max_len"):
        pe(enc, [640])  # segment 40 has no row in a 40-row segment table


@given(
    segment=st.integers(0, 5000),
    offsets=st.tuples(st.integers(0, 63), st.integers(0, 63)),
    combine=st.sampled_from(["concat", "sum"]),
)
def test_same_segment_differs_only_in_the_offset_part(segment, offsets, combine):
    enc = posenc.build("hierarchical", dim=16, segment_len=64, combine=combine)
    a, b = (segment * 64 + o for o in offsets)
    diff = pe(enc, [a]) - pe(enc, [b])  # (1, d)
    if combine == "concat":
        torch.testing.assert_close(diff[:, :8], torch.zeros(1, 8, dtype=F64), rtol=0, atol=0)
    off = enc.offset.double()
    want = off.embed(torch.zeros(1, 2, off.config.dim, dtype=F64), positions=torch.tensor([offsets]))[0]
    expected = (want[0] - want[1])[None]
    if combine == "concat":
        torch.testing.assert_close(diff[:, 8:], expected, **tol(F64))
    else:
        torch.testing.assert_close(diff, expected, **tol(F64))


@given(offset=st.integers(0, 31), segments=st.tuples(st.integers(0, 10**5), st.integers(0, 10**5)))
def test_same_offset_differs_only_in_the_segment_part(offset, segments):
    enc = posenc.build("hierarchical", dim=12, segment_len=32)
    a, b = (s * 32 + offset for s in segments)
    diff = pe(enc, [a]) - pe(enc, [b])
    torch.testing.assert_close(diff[:, 6:], torch.zeros(1, 6, dtype=F64), rtol=0, atol=0)


def test_concat_positions_are_unique_but_sum_of_one_fixed_inner_is_symmetric():
    enc = posenc.build("hierarchical", dim=16, segment_len=16)
    table = pe(enc, torch.arange(2048))
    dist = torch.cdist(table, table) + torch.eye(2048, dtype=F64) * 1e9
    assert float(dist.min()) > 1e-3
    # the documented caveat: with combine="sum" and a parameter-free inner, E_s == E_o,
    # so (segment 1, offset 2) and (segment 2, offset 1) get the same vector.
    summed = posenc.build("hierarchical", dim=16, segment_len=16, combine="sum")
    torch.testing.assert_close(pe(summed, [1 * 16 + 2]), pe(summed, [2 * 16 + 1]), **tol(F64))


def test_segment_positions_from_sentence_ids():
    ids = torch.tensor([[7, 7, 7, 2, 2, 9], [1, 1, 1, 1, 1, 1]])
    positions = segment_positions(ids, segment_len=8)
    assert positions.tolist() == [[0, 1, 2, 8, 9, 16], [0, 1, 2, 3, 4, 5]]
    enc = posenc.build("hierarchical", dim=8, segment_len=8)
    segment, offset = enc.split(positions)
    assert segment.tolist() == [[0, 0, 0, 1, 1, 2], [0] * 6]
    assert offset.tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]]
    with pytest.raises(ValueError, match="segment_len"):
        segment_positions(ids, segment_len=5)  # a 6-token segment does not fit
    with pytest.raises(TypeError, match="segment_ids"):
        segment_positions(ids.float(), segment_len=8)


@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_segment_positions_property(lengths):
    ids = torch.cat([torch.full((n,), k) for k, n in enumerate(lengths)])[None]
    positions = segment_positions(ids, segment_len=9)
    want = [s * 9 + o for s, n in enumerate(lengths) for o in range(n)]
    assert positions[0].tolist() == want


def test_inner_choices_are_content_free_absolute_encodings():
    choices = inner_choices()
    assert "sinusoidal" in choices and "learned" in choices
    assert "complex_order" not in choices and "hierarchical" not in choices
    for name in choices:
        assert posenc.ENCODINGS[name].kind == "additive"
        enc = posenc.build("hierarchical", dim=8, inner=name)
        assert enc.encode(torch.arange(5)[None]).shape == (1, 5, 8)


@pytest.mark.parametrize(
    "config,error,match",
    [
        ({"dim": 8, "inner": "rope"}, ValueError, "inner"),
        ({"dim": 8, "inner": "complex_order"}, ValueError, "inner"),
        ({"dim": 8, "inner": "sinusodal"}, ValueError, "did you mean 'sinusoidal'"),
        ({"dim": 9}, ValueError, "dim must be even"),
        ({"dim": 6}, ValueError, "dim=3"),  # each sinusoidal half would be odd
        ({"dim": 8, "segment_len": 0}, ValueError, "segment_len"),
        ({"dim": 8, "combine": "product"}, ValueError, "combine"),
        ({"dim": 8, "inner_config": {"dim": 4}}, ValueError, "inner_config"),
        ({"dim": 8, "inner_config": {"bse": 10.0}}, ValueError, "did you mean 'base'"),
        ({"dim": 8, "inner_config": [1]}, TypeError, "inner_config"),
    ],
)
def test_bad_config_names_the_parameter(config, error, match):
    with pytest.raises(error, match=match):
        posenc.build("hierarchical", **config)


def test_bfloat16_model_still_tells_neighbours_apart_far_out():
    enc = posenc.build("hierarchical", dim=16, segment_len=64)
    x = torch.zeros(1, 2, 16, dtype=torch.bfloat16)
    out = enc.embed(x, positions=torch.tensor([[10**6, 10**6 + 1]]))
    assert out.dtype == torch.bfloat16
    assert not torch.equal(out[0, 0], out[0, 1])
