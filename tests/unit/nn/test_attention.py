"""MultiHeadAttention with every registered encoding: paths agree, masks behave, bad input is named."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc.core.axes import grid_positions
from posenc.core.checks import check_int
from posenc.core.fields import EncodingConfig
from posenc.core.positions import document_ids_from_lengths, document_ids_from_positions
from posenc.core.positions import from_attention_mask as positions_from_padding_mask
from posenc.core.positions import from_document_ids as positions_from_document_ids
from posenc.encoding.base import BiasEncoding
from posenc.nn.attention import (
    SDPA_KINDS,
    MultiHeadAttention,
    choose_path,
)

D_MODEL, NUM_HEADS = 16, 2


@dataclass(frozen=True)
class _DistanceBiasConfig(EncodingConfig):
    num_heads: int
    bidirectional: bool = False

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)


class _DistanceBias(BiasEncoding):
    """Test-only bias kind, ``-(h+1)/2 * |i - j|`` (ALiBi-like), so the bias path is exercised
    even before the bias family is registered."""

    Config = _DistanceBiasConfig

    def bias_fn(self, q_pos, k_pos, head):
        return -(head + 1).to(torch.float32) * 0.5 * (q_pos - k_pos).abs().to(torch.float32)


def make(name: str | None, causal: bool = True):
    """An encoding for the layer: None, a registry name, or the test-only ``"_distance_bias"``."""
    torch.manual_seed(0)
    if name is None:
        return None
    if name == "_distance_bias":
        return _DistanceBias(_DistanceBiasConfig(num_heads=NUM_HEADS, bidirectional=not causal))
    enc = posenc.build_for_model(name, d_model=D_MODEL, num_heads=NUM_HEADS, causal=causal)
    with torch.no_grad():  # stand in for a trained encoding (some start at zero, i.e. as NoPE)
        for param in enc.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return enc


ALL = [None, "_distance_bias", *posenc.ENCODINGS]
SDPA_NAMES = [None, "_distance_bias"] + [n for n, c in posenc.ENCODINGS.items() if c.kind in SDPA_KINDS]
PLAIN_ONLY = [n for n, c in posenc.ENCODINGS.items() if c.kind not in SDPA_KINDS]


def layer(name, *, causal=True, path="auto", dtype=torch.float64) -> MultiHeadAttention:
    enc = make(name, causal)
    torch.manual_seed(1)
    return MultiHeadAttention(D_MODEL, NUM_HEADS, encoding=enc, causal=causal, path=path).to(dtype)


def rand(*shape, dtype=torch.float64, seed=2):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def left_padding_mask(lengths, n):
    return torch.stack([torch.arange(n) >= n - length for length in lengths])  # (b, n)


# ---------------------------------------------------------------------------
# The fast path equals the plain path (forward and gradients, full tensors).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SDPA_NAMES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_equals_plain(name, causal, padded):
    fast, plain = layer(name, causal=causal, path="sdpa"), layer(name, causal=causal, path="plain")
    plain.load_state_dict(fast.state_dict())
    b, n = 3, 6
    mask = left_padding_mask([6, 4, 1], n) if padded else None
    weight = rand(b, n, D_MODEL, seed=9)
    results = []
    for module in (fast, plain):
        x = rand(b, n, D_MODEL).requires_grad_(True)
        out = module(x, padding_mask=mask)
        (out * weight).sum().backward()
        grads = {k: p.grad for k, p in module.named_parameters()}
        results.append((out.detach(), x.grad, grads))
    (out_f, gx_f, g_f), (out_p, gx_p, g_p) = results
    torch.testing.assert_close(out_f, out_p, **tol(torch.float64))
    torch.testing.assert_close(gx_f, gx_p, **tol(torch.float64))
    assert g_f.keys() == g_p.keys()
    for key in g_f:
        torch.testing.assert_close(g_f[key], g_p[key], **tol(torch.float64), msg=key)


@pytest.mark.parametrize("name", SDPA_NAMES)
def test_sdpa_equals_plain_float32(name):
    fast, plain = (layer(name, path=p, dtype=torch.float32) for p in ("sdpa", "plain"))
    plain.load_state_dict(fast.state_dict())
    x = rand(2, 7, D_MODEL, dtype=torch.float32)
    torch.testing.assert_close(fast(x), plain(x), **tol(torch.float32))


@pytest.mark.parametrize("name", PLAIN_ONLY)
def test_sdpa_refuses_kinds_it_cannot_express(name):
    with pytest.raises(ValueError, match="path='sdpa'"):
        layer(name, path="sdpa")(rand(1, 3, D_MODEL))
    assert choose_path(posenc.ENCODINGS[name].kind) == "plain"


def test_choose_path():
    assert [choose_path(k) for k in ("none", "additive", "rotary", "bias")] == ["sdpa"] * 4
    assert choose_path("relative") == choose_path("contextual") == "plain"
    assert choose_path("rotary", need_weights=True) == "plain"
    with pytest.raises(ValueError, match="path must be one of"):
        choose_path("none", "flash")


@pytest.mark.parametrize("causal", [True, False])
def test_no_encoding_matches_torch_multihead_attention(causal):
    """Cross-check against an independent implementation (torch.nn.MultiheadAttention)."""
    ours = layer(None, causal=causal)
    ref = torch.nn.MultiheadAttention(D_MODEL, NUM_HEADS, bias=False, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
    n = 6
    x = rand(2, n, D_MODEL)
    # right padding: no query row is left without a key under either mask
    pad = torch.tensor([[True] * n, [True] * 4 + [False] * 2])
    future = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    expected, _ = ref(x, x, x, attn_mask=future, key_padding_mask=~pad, need_weights=False)
    for path in ("sdpa", "plain"):
        ours.path = path
        torch.testing.assert_close(ours(x, padding_mask=pad), expected, **tol(torch.float64))


# ---------------------------------------------------------------------------
# Masks: padding, fully-masked rows, packed documents, cross-attention.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_fully_masked_rows_are_zero_not_nan(name):
    """Left padding under a causal mask leaves padding queries with no key at all."""
    module = layer(name, causal=True)
    mask = left_padding_mask([5, 2], 5)
    x = rand(2, 5, D_MODEL).requires_grad_(True)
    out = module(x, padding_mask=mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(out[1, :3], torch.zeros(3, D_MODEL, dtype=torch.float64), rtol=0, atol=0)
    assert out[1, 3:].abs().sum() > 0
    # a row with no real token at all, bidirectional
    bidir = layer(name, causal=False)
    empty = torch.zeros(1, 4, dtype=torch.bool)
    out = bidir(rand(1, 4, D_MODEL), padding_mask=empty)
    torch.testing.assert_close(out, torch.zeros_like(out), rtol=0, atol=0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("causal", [True, False])
def test_left_padded_row_equals_unpadded(name, causal):
    """Padding + positions counted from the mask reproduce the unpadded sequence exactly."""
    module = layer(name, causal=causal)
    x = rand(1, 4, D_MODEL)
    alone = module(x)
    padded = torch.cat([rand(1, 3, D_MODEL, seed=5), x], dim=1)  # 3 junk pads, then the real 4
    mask = left_padding_mask([4], 7)
    out = module(padded, padding_mask=mask)  # positions=None: counted from the mask
    torch.testing.assert_close(out[:, 3:], alone, **tol(torch.float64))
    explicit = module(padded, padding_mask=mask, positions=positions_from_padding_mask(mask))
    # Same positions; Transformer-XL sizes its distance range from what is known without
    # reading them (checked explicit positions: their maximum; counted ones: the length), so
    # its products may differ in shape and round differently: equal to float64 precision.
    torch.testing.assert_close(explicit, out, **tol(torch.float64))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("causal", [True, False])
def test_packed_documents_equal_separate_runs(name, causal):
    module = layer(name, causal=causal)
    lengths = [3, 4, 2]
    x = rand(1, sum(lengths), D_MODEL)
    ids = document_ids_from_lengths(lengths)
    packed = module(x, document_ids=ids, positions=positions_from_document_ids(ids))
    separate = torch.cat([module(chunk) for chunk in x.split(lengths, dim=1)], dim=1)
    torch.testing.assert_close(packed, separate, **tol(torch.float64))


@given(st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_document_helpers_round_trip(lengths):
    ids = document_ids_from_lengths(lengths)
    positions = positions_from_document_ids(ids)
    assert positions.tolist() == [[p for length in lengths for p in range(length)]]
    assert torch.equal(document_ids_from_positions(positions), ids)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4))
def test_positions_from_padding_mask_count_real_tokens(lengths):
    mask = left_padding_mask(lengths, 6)
    positions = positions_from_padding_mask(mask)
    for row, length in zip(positions, lengths):
        assert row[6 - length :].tolist() == list(range(length))
        assert (row[: 6 - length] == 0).all()


@pytest.mark.parametrize("name", ALL)
def test_cross_attention_on_itself_equals_bidirectional_self_attention(name):
    module = layer(name, causal=False)
    x = rand(2, 5, D_MODEL)
    torch.testing.assert_close(module(x, context=x), module(x), **tol(torch.float64))
    other = rand(2, 3, D_MODEL, seed=4)
    out = module(x, context=other, context_mask=torch.tensor([[True] * 3, [True, True, False]]))
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("name", [None, "_distance_bias", *PLAIN_ONLY])
def test_returned_weights_are_a_masked_distribution(name):
    module = layer(name, causal=True)
    mask = left_padding_mask([5, 3], 5)
    _, weights = module(rand(2, 5, D_MODEL), padding_mask=mask, return_weights=True)
    assert weights.shape == (2, NUM_HEADS, 5, 5)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert (weights[..., future] == 0).all()
    assert (weights[1, :, :, :2] == 0).all()  # padded keys get nothing
    real_rows = torch.tensor([[True] * 5, [False, False, True, True, True]])
    sums = weights.sum(-1).permute(0, 2, 1)[real_rows]  # (rows, h)
    torch.testing.assert_close(sums, torch.ones_like(sums), **tol(torch.float64))


@pytest.mark.parametrize("path", ["sdpa", "plain"])
def test_dropout_only_in_training(path):
    module = MultiHeadAttention(D_MODEL, NUM_HEADS, dropout=0.5, path=path).double()
    x = rand(1, 6, D_MODEL)
    assert not torch.equal(module(x), module(x))
    module.eval()
    torch.testing.assert_close(module(x), module(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------
# Bad input names the parameter.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(d_model=16, num_heads=0), ValueError, "num_heads"),
        (dict(d_model=16, num_heads=-2), ValueError, "num_heads"),
        (dict(d_model=0, num_heads=1), ValueError, "d_model"),
        (dict(d_model=16, num_heads=3), ValueError, "divisible by num_heads"),
        (dict(d_model=16, num_heads=2, dropout=1.5), ValueError, "dropout"),
        (dict(d_model=16, num_heads=2, path="fast"), ValueError, "path"),
        (dict(d_model=16, num_heads=2, encoding="rope"), TypeError, "encoding"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, match):
    d_model, num_heads = kwargs.pop("d_model"), kwargs.pop("num_heads")
    with pytest.raises(error, match=match):
        MultiHeadAttention(d_model, num_heads, **kwargs)


@pytest.mark.parametrize(
    "name",
    [n for n, c in posenc.ENCODINGS.items() if {"head_dim", "num_heads"} & set(c.Config.field_names())],
)
def test_encoding_with_other_head_layout_is_rejected(name):
    enc = posenc.build_for_model(name, d_model=D_MODEL, num_heads=2 * NUM_HEADS)
    with pytest.raises(ValueError, match="head_dim|num_heads"):
        MultiHeadAttention(D_MODEL, NUM_HEADS, encoding=enc)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(positions=torch.arange(4)), ValueError, "positions"),
        (dict(positions=torch.zeros(3, 5, dtype=torch.long)), ValueError, "positions"),
        (dict(positions=torch.zeros(2, 5)), TypeError, "positions"),
        (dict(positions=-torch.ones(2, 5, dtype=torch.long)), ValueError, "positions"),
        (dict(padding_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, "padding_mask"),
        (dict(padding_mask=torch.ones(2, 5)), TypeError, "padding_mask"),
        (dict(context=torch.zeros(2, 3, 8)), ValueError, "context"),
        (
            dict(context=torch.zeros(2, 3, 16), context_positions=torch.arange(4)),
            ValueError,
            "context_positions",
        ),
        (
            dict(context=torch.zeros(2, 3, 16), context_mask=torch.ones(2, 4, dtype=torch.bool)),
            ValueError,
            "context_mask",
        ),
        (dict(document_ids=torch.zeros(2, 4, dtype=torch.long)), ValueError, "document_ids"),
    ],
)
@pytest.mark.parametrize("name", [None, "rope" if "rope" in posenc.ENCODINGS else "nope"])
def test_bad_forward_arguments(kwargs, error, match, name):
    module = layer(name, dtype=torch.float32)
    with pytest.raises(error, match=match):
        module(torch.zeros(2, 5, D_MODEL), **kwargs)


def test_bad_x():
    module = layer(None, dtype=torch.float32)
    with pytest.raises(ValueError, match="x"):
        module(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="d_model"):
        module(torch.zeros(2, 5, 8))
    with pytest.raises(TypeError, match="x"):
        module(torch.zeros(2, 5, D_MODEL, dtype=torch.long))


@pytest.mark.parametrize("name", ALL)
def test_bfloat16_follows_float64(name):
    """Tables are built in float64 and cast last, so bf16 stays within bf16 rounding."""
    exact = layer(name, causal=True)
    low = layer(name, causal=True).to(torch.bfloat16)
    low.load_state_dict(exact.state_dict())
    x = rand(2, 6, D_MODEL)
    out = low(x.to(torch.bfloat16), padding_mask=left_padding_mask([6, 4], 6))
    assert out.dtype == torch.bfloat16
    expected = exact(x, padding_mask=left_padding_mask([6, 4], 6))
    torch.testing.assert_close(out.double(), expected, rtol=5e-2, atol=5e-2)


# ---------------------------------------------------------------------------
# Positions with axes: every path agrees.
# ---------------------------------------------------------------------------


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


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
    torch.testing.assert_close(plain(x, positions=pos), sdpa(x, positions=pos), **tol(torch.float64))
