"""T5's relative position buckets: equal to transformers' own, monotone in distance, saturating far out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc.encoding import bias as B
from posenc.reference import bias as R


def build(name: str, num_heads: int = 3, **config) -> B._BiasFamily:
    torch.manual_seed(0)
    enc = posenc.build(name, num_heads=num_heads, **config)
    if name == "fire":  # make the MLP's output visibly depend on its input
        with torch.no_grad():
            for p in enc.parameters():
                if p.ndim:
                    p.normal_(0.0, 1.0)
    return enc


@pytest.fixture(scope="module")
def hf_bucket():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    return t5.T5Attention._relative_position_bucket


@given(
    bidirectional=st.booleans(),
    num_buckets=st.integers(4, 64),
    extra_distance=st.integers(1, 400),
)
def test_t5_buckets_match_transformers(hf_bucket, bidirectional, num_buckets, extra_distance):
    n = num_buckets // 2 if bidirectional else num_buckets
    max_distance = n // 2 + extra_distance  # the valid range: > max_exact
    rel = torch.arange(-3000, 3001)
    ours = B.t5_relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = hf_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(ours, theirs)
    np.testing.assert_array_equal(
        R.t5_relative_position_bucket(rel.numpy(), bidirectional, num_buckets, max_distance), ours.numpy()
    )


@given(bidirectional=st.booleans(), num_buckets=st.integers(4, 64), max_distance=st.integers(40, 1000))
def test_t5_buckets_monotone_in_distance_and_saturate(bidirectional, num_buckets, max_distance):
    kwargs = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    distance = torch.arange(0, 3 * max_distance)
    before = B.t5_relative_position_bucket(-distance, **kwargs)  # keys before the query
    assert bool((before.diff() >= 0).all()) and before[0] == 0
    half = num_buckets // 2 if bidirectional else num_buckets
    assert before.max() <= half - 1
    assert bool((before[max_distance:] == half - 1).all())  # far beyond max_distance: last bucket
    if bidirectional:
        after = B.t5_relative_position_bucket(distance[1:], **kwargs)
        assert bool((after.diff() >= 0).all()) and bool((after >= half).all())
        assert bool((after[max_distance:] == 2 * half - 1).all())


def test_t5_far_positions_fall_in_the_last_bucket():
    enc = build("t5", bidirectional=True)
    got = enc.bias(1, 2, q_positions=torch.tensor([[10**6]]), k_positions=torch.tensor([[0, 2 * 10**6]]))
    table = enc.table.detach()
    torch.testing.assert_close(got[0, :, 0, 0], table[15])  # keys long before: last "before" bucket
    torch.testing.assert_close(got[0, :, 0, 1], table[31])  # keys long after: last bucket
    assert B.T5RelativeBias.share_across_layers is True
