"""positions.py: positions are data (padding, packing, KV-cache offsets, randomized)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.core.positions import (
    Positions,
    as_positions,
    from_attention_mask,
    from_document_lengths,
    randomized,
    with_offset,
)
from posenc.core.sincos import SinCosCache, inverse_frequencies

# ---------------------------------------------------------------------------
# from_attention_mask
# ---------------------------------------------------------------------------


def test_left_padding_starts_real_tokens_at_zero():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    want = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 0, 0, 0]])
    torch.testing.assert_close(from_attention_mask(mask), want, rtol=0, atol=0)
    torch.testing.assert_close(from_attention_mask(mask.bool()), want, rtol=0, atol=0)


@given(rows=st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=4))
def test_mask_positions_count_real_tokens(rows):
    mask = torch.tensor(rows)
    pos = from_attention_mask(mask)
    assert pos.shape == mask.shape and pos.dtype == torch.long
    for r in range(mask.shape[0]):
        real = pos[r][mask[r]]
        torch.testing.assert_close(real, torch.arange(int(mask[r].sum())), rtol=0, atol=0)
        assert (pos[r][~mask[r]] == 0).all()


def test_left_padded_row_embeds_like_the_unpadded_sequence():
    enc = posenc.build("sinusoidal", dim=8)
    x = torch.randn(1, 3, 8)
    padded = torch.cat([torch.zeros(1, 2, 8), x], dim=1)  # two pads on the left
    pos = from_attention_mask(torch.tensor([[0, 0, 1, 1, 1]]))
    torch.testing.assert_close(enc.embed(padded, positions=pos)[:, 2:], enc.embed(x), **tol(torch.float32))


@pytest.mark.parametrize(
    ("mask", "error", "word"),
    [
        ([[0, 1]], TypeError, "mask must be a torch.Tensor"),
        (torch.ones(4, dtype=torch.long), ValueError, "mask must have 2 dimensions"),
        (torch.ones(2, 3), TypeError, "mask must be a bool or integer"),
        (torch.tensor([[0, 2, 1]]), ValueError, "mask must contain only 0"),
    ],
)
def test_bad_masks(mask, error, word):
    with pytest.raises(error, match=word):
        from_attention_mask(mask)


# ---------------------------------------------------------------------------
# from_document_lengths
# ---------------------------------------------------------------------------


def test_packed_documents_restart_at_zero():
    torch.testing.assert_close(
        from_document_lengths([3, 1, 2]), torch.tensor([[0, 1, 2, 0, 0, 1]]), rtol=0, atol=0
    )
    torch.testing.assert_close(
        from_document_lengths(torch.tensor([2])), torch.tensor([[0, 1]]), rtol=0, atol=0
    )


@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=6))
def test_document_positions_property(lengths):
    pos = from_document_lengths(lengths)[0]
    assert pos.shape == (sum(lengths),)
    assert int((pos == 0).sum()) == len(lengths)  # one restart per document
    start = 0
    for n in lengths:
        torch.testing.assert_close(pos[start : start + n], torch.arange(n), rtol=0, atol=0)
        start += n


@pytest.mark.parametrize(
    ("lengths", "error", "word"),
    [
        ([], ValueError, "at least one"),
        ([3, 0], ValueError, r"lengths\[1\]"),
        ([2, -1], ValueError, r"lengths\[1\]"),
        ([2.5], TypeError, r"lengths\[0\]"),
        (torch.tensor([1.0, 2.0]), TypeError, "lengths must be integers"),
        (torch.tensor([[1, 2]]), ValueError, "lengths must be 1-D"),
        (torch.tensor([2, 0]), ValueError, r"lengths\[1\]"),
        ("3,2", TypeError, "lengths must be a list"),
    ],
)
def test_bad_lengths(lengths, error, word):
    with pytest.raises(error, match=word):
        from_document_lengths(lengths)


# ---------------------------------------------------------------------------
# with_offset (KV cache)
# ---------------------------------------------------------------------------


def test_offset_positions():
    torch.testing.assert_close(with_offset(3, 5), torch.tensor([[5, 6, 7]]), rtol=0, atol=0)
    torch.testing.assert_close(with_offset(2, 1, batch=2), torch.tensor([[1, 2], [1, 2]]), rtol=0, atol=0)
    torch.testing.assert_close(
        with_offset(2, torch.tensor([0, 4]), batch=2), torch.tensor([[0, 1], [4, 5]]), rtol=0, atol=0
    )
    assert with_offset(0, 3).shape == (1, 0)


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "scaled_sinusoidal", "hybrid", "integer_index"])
def test_decoding_with_an_offset_equals_the_full_sequence(name):
    enc = posenc.build(name, dim=8)
    x = torch.randn(2, 10, 8)
    full = enc.embed(x)
    step = enc.embed(x[:, 6:], positions=with_offset(4, 6, batch=2))
    torch.testing.assert_close(step, full[:, 6:], **tol(torch.float32))


@pytest.mark.parametrize(
    ("args", "error", "word"),
    [
        ((-1, 0), ValueError, "seq_len"),
        ((3, -2), ValueError, "offset"),
        ((3, 1.5), TypeError, "offset"),
        ((3, 0, 0), ValueError, "batch"),
        ((3, torch.tensor([1, 2, 3]), 2), ValueError, "offset has 3 entries"),
        ((3, torch.tensor([1, -2]), 2), ValueError, "offset must be >= 0"),
        ((3, torch.tensor([1.0, 2.0]), 2), TypeError, "offset must be integer"),
    ],
)
def test_bad_offsets(args, error, word):
    with pytest.raises(error, match=word):
        with_offset(*args)


# ---------------------------------------------------------------------------
# randomized (Ruoss et al. 2023)
# ---------------------------------------------------------------------------


@given(
    batch=st.integers(1, 4),
    seq_len=st.integers(0, 40),
    extra=st.integers(0, 200),
    seed=st.integers(0, 2**31 - 1),
)
def test_randomized_sorted_unique_in_range(batch, seq_len, extra, seed):
    max_len = max(1, seq_len + extra)
    pos = randomized(batch, seq_len, max_len, generator=torch.Generator().manual_seed(seed))
    assert pos.shape == (batch, seq_len) and pos.dtype == torch.long
    if seq_len:
        assert (pos[:, 1:] > pos[:, :-1]).all()  # strictly increasing: sorted and unique
        assert pos.min() >= 0 and pos.max() < max_len


def test_randomized_is_reproducible_and_covers_the_range():
    a = randomized(64, 8, 100, generator=torch.Generator().manual_seed(1))
    b = randomized(64, 8, 100, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a[0], a[1])  # rows are sampled independently
    assert a.max() > 90  # short rows still reach far positions (the point of the method)
    full = randomized(2, 5, 5)
    torch.testing.assert_close(full, torch.arange(5).expand(2, 5), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "word"),
    [
        ((1, 10, 5), {}, ValueError, "seq_len"),
        ((0, 3, 5), {}, ValueError, "batch"),
        ((1, 3, 0), {}, ValueError, "max_len"),
        ((1, 3, 5.0), {}, TypeError, "max_len"),
        ((1, 3, 5), {"generator": 7}, TypeError, "generator"),
    ],
)
def test_bad_randomized(args, kwargs, error, word):
    with pytest.raises(error, match=word):
        randomized(*args, **kwargs)


# ---------------------------------------------------------------------------
# Positions: checked once where they enter, trusted after.
# ---------------------------------------------------------------------------


def test_tensors_are_checked_and_positions_are_trusted():
    with pytest.raises(ValueError, match="p must be >= 0"):
        as_positions(torch.tensor([[0, -1]]), 2, name="p")
    with pytest.raises(ValueError, match="2\\*\\*53"):
        as_positions(torch.tensor([[0, 2**53 + 1]]), 2)
    checked = as_positions(torch.tensor([[4, 2, 9]]), 3)
    assert (checked.low, checked.bound, checked.start) == (2, 10, None)
    trusted = Positions(torch.tensor([[-5, 7]]), 8)  # attention's own: never read again
    assert as_positions(trusted, 2) is trusted
    with pytest.raises(ValueError, match="seq length"):  # shapes are still checked (free)
        as_positions(trusted, 3)
    arange = Positions.arange(4, start=6)
    assert arange.tensor.tolist() == [[6, 7, 8, 9]] and (arange.low, arange.bound, arange.start) == (6, 10, 6)


def test_eager_aranges_are_shared_and_the_oldest_make_way():
    """A model step makes the same positions every call: eager ``Positions.arange`` hands out one
    tensor per (start, n, device), keeping the last few; each is still exactly start + arange(n)."""
    from posenc.core import positions as module

    first = Positions.arange(7, start=2)
    assert Positions.arange(7, start=2) is first and as_positions(None, 7).tensor.tolist() == [list(range(7))]
    others = [Positions.arange(n, start=1000) for n in range(1, module._ARANGES_KEPT + 1)]
    assert len(module._ARANGES) == module._ARANGES_KEPT  # bounded
    again = Positions.arange(7, start=2)
    assert again is not first and again.tensor.tolist() == first.tensor.tolist() == [list(range(2, 9))]
    for n, made in enumerate(others, start=1):
        assert made.tensor.tolist() == [list(range(1000, 1000 + n))] and made.bound == 1000 + n
    with torch.inference_mode():  # never kept: an inference tensor cannot be saved for backward later
        inside = Positions.arange(3, start=50)
    assert (
        Positions.arange(3, start=50) is not inside
        and not Positions.arange(3, start=50).tensor.is_inference()
    )
    table = torch.nn.Parameter(torch.randn(64, 4))
    table[Positions.arange(3, start=50).tensor].sum().backward()  # an index saved for backward
    assert table.grad is not None and table.grad[50:53].abs().sum() > 0


def test_contiguous_positions_read_the_table_as_a_view_others_gather_or_compute():
    cache = SinCosCache(inverse_frequencies(8, 10000.0))
    cos, sin = cache.lookup(Positions.arange(5, start=3), torch.float32)
    table_cos, table_sin = cache.rows(8, torch.device("cpu"), torch.float32)
    assert cos.data_ptr() == table_cos[3].data_ptr() and sin.data_ptr() == table_sin[3].data_ptr()
    explicit = torch.tensor([[3, 4, 5, 6, 7]])
    for pos in (Positions(explicit, 8), Positions(explicit, None)):  # gathered; computed (no bound)
        other = cache.lookup(pos, torch.float32)
        torch.testing.assert_close(other[0], cos, rtol=0, atol=0)
        torch.testing.assert_close(other[1], sin, rtol=0, atol=0)
