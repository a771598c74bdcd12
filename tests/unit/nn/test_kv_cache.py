"""Incremental decoding with a KV cache equals the full recompute, for every registered encoding."""

from __future__ import annotations

import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc.encoding.base import NoEncoding
from posenc.nn.attention import KVCache, MultiHeadAttention
from posenc.nn.transformer import Transformer, TransformerConfig

NAMES = list(posenc.ENCODINGS)
CACHEABLE = [n for n, c in posenc.ENCODINGS.items() if c.supports_kv_cache]
NOT_CACHEABLE = [n for n, c in posenc.ENCODINGS.items() if not c.supports_kv_cache]
ROTARY = [n for n, c in posenc.ENCODINGS.items() if c.kind == "rotary"]
VOCAB = 13


def tiny_model(name: str, **overrides) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, encoding=name, **overrides
    )
    model = Transformer(config).double().eval()
    with torch.no_grad():  # stand in for trained encodings (some start at zero, i.e. as NoPE)
        for enc in model.encodings():
            for param in enc.parameters():
                param.add_(0.1 * torch.randn_like(param))
    return model


def tokens(b: int, n: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def decode(model, toks, prefill, **kwargs):
    """Prefill ``prefill`` tokens, then feed the rest one at a time; concatenated logits."""
    cache = model.new_cache()
    mask = kwargs.pop("padding_mask", None)
    chunks = [(0, prefill)] + [(t, t + 1) for t in range(prefill, toks.shape[1])]
    outs = []
    for start, stop in chunks:
        step_mask = None if mask is None else mask[:, start:stop]
        outs.append(model(toks[:, start:stop], cache=cache, padding_mask=step_mask, **kwargs))
    assert all(c.length == toks.shape[1] for c in cache)
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_then_decode_equals_full_forward(name):
    model = tiny_model(name)
    toks = tokens(2, 9)
    if name in NOT_CACHEABLE:
        with pytest.raises(ValueError, match="KV cache"):
            model.new_cache()
        return
    torch.testing.assert_close(decode(model, toks, prefill=4), model(toks), **tol(torch.float64))


@pytest.mark.parametrize("name", CACHEABLE)
def test_decode_with_left_padding_equals_full_forward(name):
    """Left-padded batch: positions come from the mask at prefill and continue per row."""
    model = tiny_model(name)
    toks = tokens(2, 8)
    mask = torch.tensor([[True] * 8, [False] * 3 + [True] * 5])
    full = model(toks, padding_mask=mask)
    cached = decode(model, toks, prefill=5, padding_mask=mask)
    torch.testing.assert_close(cached[mask], full[mask], **tol(torch.float64))
    # the padded row matches the same tokens run alone, unpadded
    alone = model(toks[1:, 3:])
    torch.testing.assert_close(cached[1, 3:], alone[0], **tol(torch.float64))


@pytest.mark.parametrize("name", CACHEABLE)
def test_decode_from_an_offset(name):
    """Explicit positions at prefill (e.g. a window starting at 5); decoding continues from there."""
    model = tiny_model(name)
    toks = tokens(1, 6)
    positions = torch.arange(5, 11)[None]
    full = model(toks, positions=positions)
    cache = model.new_cache()
    outs = [model(toks[:, :3], positions=positions[:, :3], cache=cache)]
    outs += [model(toks[:, t : t + 1], cache=cache) for t in range(3, 6)]  # positions=None continues
    torch.testing.assert_close(torch.cat(outs, dim=1), full, **tol(torch.float64))


@pytest.mark.parametrize("name", ROTARY)
def test_unrotated_key_rule_gives_the_same_answer(name):
    """``cache_unrotated_keys=True`` caches raw keys and re-rotates them only when the rotation
    changes; a static rotary encoding never changes it, so after the prefill only each new
    token is rotated, and both rules agree with the full recompute."""
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    recorded = []

    class Unrotated(type(enc)):
        cache_unrotated_keys = True

        def rotate(self, q, k, *, q_positions=None, k_positions=None):
            recorded.append((q.shape[2], k.shape[2]))
            return super().rotate(q, k, q_positions=q_positions, k_positions=k_positions)

    raw = Unrotated(enc.config)
    raw.load_state_dict(enc.state_dict())
    torch.manual_seed(0)
    first = MultiHeadAttention(16, 2, encoding=enc).double()
    second = MultiHeadAttention(16, 2, encoding=raw).double()
    second.load_state_dict(first.state_dict())
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    full = first(x)
    for module in (first, second):
        cache = KVCache()
        out = torch.cat(
            [module(x[:, :2], cache=cache)] + [module(x[:, t : t + 1], cache=cache) for t in range(2, 6)], 1
        )
        torch.testing.assert_close(out, full, **tol(torch.float64))
    assert recorded == [(2, 2), (1, 1), (1, 1), (1, 1), (1, 1)]  # the new token only, every step


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0, 3.0, 4.0, 5.0],
         "original_max_position_embeddings": 4},
    ],
)  # fmt: skip
def test_length_dependent_scaling_re_rotates_only_when_frequencies_change(scaling):
    """Dynamic NTK changes its frequencies at every step past the original context, LongRoPE once
    (short -> long factors): the cached raw keys are rotated again exactly then, and the decode
    equals the full recompute at every step."""
    enc = posenc.build("rope", head_dim=8, max_position_embeddings=4, scaling=scaling)
    assert enc.cache_unrotated_keys
    calls = []
    rotate = enc.rotate

    def recording(q, k, **kwargs):
        calls.append(k.shape[2])
        return rotate(q, k, **kwargs)

    torch.manual_seed(0)
    module = MultiHeadAttention(16, 2, encoding=enc).double()
    x = torch.randn(1, 8, 16, dtype=torch.float64)
    cache = KVCache()
    enc.rotate = recording  # type: ignore[method-assign]
    outs = [module(x[:, :3], cache=cache)] + [module(x[:, t : t + 1], cache=cache) for t in range(3, 8)]
    enc.rotate = rotate  # type: ignore[method-assign]
    for t, out in zip(range(3, 9), outs):  # step t ends at token t: equals the full run on x[:, :t]
        torch.testing.assert_close(out[:, -1], module(x[:, :t])[:, -1], **tol(torch.float64))
    if scaling["rope_type"] == "dynamic":  # within 4 positions: unchanged; then new every step
        assert calls == [3, 1, 5, 6, 7, 8]
    else:  # short factors up to 4 positions, long factors from 5 on: one re-rotation
        assert calls == [3, 1, 5, 1, 1, 1]


# ---------------------------------------------------------------------------
# Misuse raises a clear error.
# ---------------------------------------------------------------------------


class _NoCache(NoEncoding):
    """Test-only encoding that declares it cannot be decoded with a cache."""

    Config = posenc.ENCODINGS["nope"].Config
    supports_kv_cache = False


def test_encoding_without_cache_support_raises():
    module = MultiHeadAttention(16, 2, encoding=_NoCache(_NoCache.Config()))
    with pytest.raises(ValueError, match="supports_kv_cache"):
        module(torch.zeros(1, 3, 16), cache=KVCache())


def test_cache_misuse():
    x = torch.zeros(2, 3, 16)
    causal = MultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match="causal"):
        MultiHeadAttention(16, 2, causal=False)(x, cache=KVCache())
    with pytest.raises(TypeError, match="cache"):
        causal(x, cache={})
    with pytest.raises(ValueError, match="context"):
        causal(x, cache=KVCache(), context=x)
    with pytest.raises(ValueError, match="document_ids"):
        causal(x, cache=KVCache(), document_ids=torch.zeros(2, 3, dtype=torch.long))
    shared = KVCache()
    causal(x, cache=shared)
    with pytest.raises(ValueError, match="another attention layer"):
        MultiHeadAttention(16, 2)(x, cache=shared)
    with pytest.raises(ValueError, match="batch|cache"):
        causal(torch.zeros(3, 1, 16), cache=shared)
    shared.reset()
    assert shared.length == 0 and causal(torch.zeros(3, 1, 16), cache=shared).shape == (3, 1, 16)


def test_model_cache_misuse():
    model = tiny_model("nope")
    with pytest.raises(ValueError, match="cache"):
        model(tokens(1, 3), cache=[KVCache()])
    encoder = tiny_model("nope", causal=False)
    with pytest.raises(ValueError, match="causal"):
        encoder.new_cache()


@pytest.mark.parametrize(
    "name",
    [
        n
        for n, c in posenc.ENCODINGS.items()
        if c.kind == "additive" and "max_len" in c.Config.field_names() and c.supports_kv_cache
    ],
)
def test_learned_table_overflow_during_decode_names_max_len(name):
    max_len = posenc.ENCODINGS[name].Config.parameters()["max_len"]
    model = tiny_model(name, encoding_config={"max_len": 5})
    assert model.input_encoding.config.max_len == 5 != max_len
    cache = model.new_cache()
    model(tokens(1, 5), cache=cache)  # positions 0..4 fit
    with pytest.raises(ValueError, match="max_len"):
        model(tokens(1, 1), cache=cache)  # position 5 does not


def test_kvcache_bookkeeping():
    cache = KVCache()
    assert cache.length == 0 and cache.next_positions() is None
    k = torch.zeros(2, 2, 3, 4)
    mask = torch.tensor([[True] * 3, [False, True, True]])
    cache.append(k, k, torch.tensor([[0, 1, 2], [0, 0, 1]]), mask)
    assert cache.next_positions().tolist() == [[3], [2]]
    cache.append(k[:, :, :1], k[:, :, :1], torch.tensor([[3], [2]]), None)
    assert cache.length == 4 and cache.key_mask[:, -1].all()


def test_decode_steps_write_into_the_cache_in_place():
    """The cache grows by doubling: a one-token step copies that token, not the whole cache;
    with no padding the next position is known without reading the cached positions."""
    module = MultiHeadAttention(16, 2, encoding=posenc.build("rope", head_dim=8))
    cache = KVCache()
    with torch.no_grad():
        module(torch.randn(1, 20, 16), cache=cache)
        module(torch.randn(1, 1, 16), cache=cache)  # outgrows the prefill: new storage, room for 40
        storage = cache.keys.data_ptr()
        for _ in range(10):
            module(torch.randn(1, 1, 16), cache=cache)
    assert cache.keys.data_ptr() == storage and cache.length == 31 and cache.next_start() == 31
    assert cache.positions.tolist() == [list(range(31))]
