"""The NumPy references of the absolute kind (``posenc.reference.absolute``) against the papers'
definitions worked by hand (the encodings against the references: tests/unit/encoding/absolute/)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.core.errors import PosencError
from posenc.reference import absolute as ref


def test_sinusoidal_is_vaswanis_table_by_hand():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): d = 4 at pos = 3."""
    want = [np.sin(3.0), np.cos(3.0), np.sin(3.0 / 100.0), np.cos(3.0 / 100.0)]
    np.testing.assert_allclose(ref.sinusoidal(np.array([3]), 4)[0], want, rtol=0, atol=1e-15)


def test_hierarchical_splits_positions_into_segment_and_offset():
    """pos 9 with L = 4: segment 2, offset 1; concat puts the segment's part first, sum adds them."""
    seg, off = ref.sinusoidal(np.array([2]), 4), ref.sinusoidal(np.array([1]), 4)
    got = ref.hierarchical_sinusoidal(np.array([9]), 8, segment_len=4, combine="concat")
    np.testing.assert_array_equal(got, np.concatenate([seg, off], axis=-1))
    summed = ref.hierarchical_sinusoidal(np.array([9]), 4, segment_len=4, combine="sum")
    np.testing.assert_array_equal(summed, seg + off)
    with pytest.raises(PosencError, match="combine"):
        ref.hierarchical(np.array([1]), segment_len=4, combine="mean", segment_encoding=np.sin,
                         offset_encoding=np.sin)  # fmt: skip


def test_sincos_axial_puts_the_column_first_and_gives_a_class_token_zeros():
    """MAE: a patch at row h, column w gets [1-D block of w | 1-D block of h]; (-1, -1): zeros."""
    got = ref.sincos_axial(np.array([[2, 5], [-1, -1]]), 8)
    np.testing.assert_array_equal(got[0], np.concatenate([ref.sincos_1d(5, 4), ref.sincos_1d(2, 4)]))
    assert not got[1].any()


def test_interpolate_table_keeps_a_table_of_its_own_size_and_a_constant_one():
    table = np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(ref.interpolate_table(table, 4), table)
    np.testing.assert_allclose(ref.interpolate_table(np.ones((3, 2)), 7), np.ones((7, 2)))
