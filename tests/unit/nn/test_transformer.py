"""The tiny Transformer: config, every registered encoding, padding, sharing, the additive options."""

from __future__ import annotations

import json

import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc.core.axes import grid_positions, multimodal_positions
from posenc.core.errors import PosencError
from posenc.nn.transformer import Transformer, TransformerConfig

NAMES = list(posenc.ENCODINGS)
ADDITIVE = [n for n, c in posenc.ENCODINGS.items() if c.kind == "additive"]
NOT_ADDITIVE = [n for n, c in posenc.ENCODINGS.items() if c.kind != "additive"]
VOCAB = 11
SMALL = dict(vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=2, ffn_dim=32)


def tiny(name: str, **overrides) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**{**SMALL, "encoding": name, **overrides})).double().eval()


def tokens(b: int, n: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------
# Config.
# ---------------------------------------------------------------------------


def test_config_defaults_and_json_round_trip():
    config = TransformerConfig(vocab_size=7, encoding="nope", encoding_config={})
    assert (config.d_model, config.num_heads, config.num_layers, config.ffn_dim) == (64, 4, 3, 256)
    assert config.causal and config.tie_embeddings and config.share_encoding is None
    assert TransformerConfig.__dataclass_fields__["encoding"].default == "rope"
    again = TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config


def test_config_copies_encoding_config():
    extra = {}
    config = TransformerConfig(vocab_size=7, encoding="nope", encoding_config=extra)
    extra["oops"] = 1
    assert config.encoding_config == {}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(vocab_size=0), ValueError, "vocab_size"),
        (dict(num_heads=0), ValueError, "num_heads"),
        (dict(d_model=10, num_heads=4), ValueError, "divisible by num_heads"),
        (dict(num_layers=0), ValueError, "num_layers"),
        (dict(ffn_dim=0), ValueError, "ffn_dim"),
        (dict(dropout=-0.1), ValueError, "dropout"),
        (dict(causal="yes"), TypeError, "causal"),
        (dict(share_encoding="yes"), TypeError, "share_encoding"),
        (dict(encoding="ropee"), ValueError, "unknown encoding"),
        (dict(encoding_config=[("a", 1)]), TypeError, "encoding_config"),
        (dict(combine="multiply"), ValueError, "combine"),
        (dict(inject="everywhere"), ValueError, "inject"),
    ],
)
def test_bad_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransformerConfig(**{**SMALL, "encoding": "nope", **kwargs})


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="did you mean 'num_heads'"):
        TransformerConfig.from_dict({"vocab_size": 5, "num_head": 2})


def test_unknown_encoding_config_key_is_named():
    with pytest.raises(ValueError, match="unknown config key 'nonsense'"):
        tiny(NAMES[0], encoding_config={"nonsense": 1})


# ---------------------------------------------------------------------------
# Every encoding, causal LM and encoder.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_shapes_gradients_and_tied_embeddings(name, causal):
    model = tiny(name, causal=causal).train()
    toks = tokens(2, 7)
    logits = model(toks)
    assert logits.shape == (2, 7, VOCAB) and torch.isfinite(logits).all()
    assert model.lm_head.weight is model.tok_emb.weight
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), toks.flatten()).backward()
    assert model.tok_emb.weight.grad is not None and torch.isfinite(model.tok_emb.weight.grad).all()
    for enc in model.encodings():  # bidirectional follows the model wherever the encoding has it
        if hasattr(enc.config, "bidirectional"):
            assert enc.config.bidirectional is (not causal)


@pytest.mark.parametrize("name", NAMES)
def test_causal_lm_never_looks_ahead(name):
    model = tiny(name)
    toks = tokens(1, 8)
    changed = toks.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % VOCAB
    torch.testing.assert_close(model(changed)[:, :5], model(toks)[:, :5], **tol(torch.float64))
    assert not torch.allclose(model(changed)[:, 5:], model(toks)[:, 5:])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_left_padding_matches_unpadded(name, causal):
    model = tiny(name, causal=causal)
    toks = tokens(2, 6)
    mask = torch.tensor([[True] * 6, [False, False] + [True] * 4])
    padded = model(toks, padding_mask=mask)  # positions counted from the mask
    torch.testing.assert_close(padded[1, 2:], model(toks[1:, 2:])[0], **tol(torch.float64))
    torch.testing.assert_close(padded[0], model(toks[:1])[0], **tol(torch.float64))


@pytest.mark.parametrize("name", NAMES)
def test_encoding_sharing_follows_the_class_flag(name):
    cls = posenc.ENCODINGS[name]
    num_layers = SMALL["num_layers"]
    for share in (None, True, False):
        model = tiny(name, share_encoding=share)
        found = list(model.encodings())
        if cls.kind == "additive":  # applied once at the input
            assert found == [model.input_encoding]
            assert all(block.attn.encoding is None for block in model.blocks)
            continue
        shared = cls.share_across_layers if share is None else share
        assert len(found) == (1 if shared else num_layers)
        assert [block.attn.encoding for block in model.blocks] == (found * num_layers if shared else found)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    model = tiny(name)
    torch.manual_seed(99)
    other = Transformer(TransformerConfig.from_dict(model.config.to_dict())).double().eval()
    other.load_state_dict(model.state_dict())
    toks = tokens(2, 5)
    torch.testing.assert_close(other(toks), model(toks), rtol=0, atol=0)


def test_untied_embeddings_and_bad_tokens():
    model = tiny("nope", tie_embeddings=False)
    assert model.lm_head.weight is not model.tok_emb.weight
    with pytest.raises(ValueError, match="tokens"):
        model(torch.tensor([[0, VOCAB]]))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        model(tokens(1, 3), positions=torch.arange(4))
    with pytest.raises(TypeError, match="config"):
        Transformer({"vocab_size": 3})


def test_a_few_steps_of_training_lower_the_loss():
    """Sanity: the model learns to copy the previous token (needs position: RoPE if present)."""
    name = "rope" if "rope" in posenc.ENCODINGS else NAMES[0]
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**{**SMALL, "encoding": name, "num_layers": 1}))
    toks = tokens(4, 9)
    losses = []
    for _ in range(12):  # plain sign-SGD: no optimizer import, a few ms per step
        logits = model(toks[:, 1:])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), toks[:, :-1].flatten())
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= 1e-2 * param.grad.sign()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# ---------------------------------------------------------------------------
# Additive options: combine, inject, position_scale.
# ---------------------------------------------------------------------------


def erased_by_layer_norm(model: Transformer) -> bool:
    """True when the additive signal is the same in every feature (``PE(pos) = c(pos) * 1``):
    every sublayer of a pre-LN model reads ``LayerNorm(x)``, which subtracts the feature mean,
    so such a signal cannot reach attention, the FFN or the output at all."""
    x = model.token_embeddings(tokens(1, 6))
    signal = model.input_encoding.embed(x, positions=torch.arange(6)[None]) - x
    return bool((signal - signal.mean(-1, keepdim=True)).abs().max() < 1e-12)


def test_a_feature_constant_signal_is_invisible_to_the_pre_ln_model():
    """The model-level fact behind ``erased_by_layer_norm``, shown with a hand-made signal."""
    model = tiny("nope")
    x = model.token_embeddings(tokens(1, 5))  # (1, n, D)
    shift = 100.0 * torch.randn(1, 5, 1, dtype=torch.float64)  # c(pos) * (1, ..., 1)

    def run(h):
        for block in model.blocks:
            h = block(h, positions=None, padding_mask=None, cache=None)
        return model.lm_head(model.ln_final(h))

    torch.testing.assert_close(run(x + shift), run(x), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ADDITIVE)
def test_position_scale_zero_removes_the_positional_signal(name):
    """At scale 0 an additive-encoding encoder is a NoPE encoder: permutation-equivariant."""
    model = tiny(name, causal=False)
    toks = tokens(1, 6)
    perm = torch.tensor([5, 3, 1, 0, 2, 4])
    # position-blind already at scale 1 iff LayerNorm erases the signal (see above)
    assert torch.allclose(model(toks[:, perm]), model(toks)[:, perm]) == erased_by_layer_norm(model)
    model.position_scale = 0.0
    torch.testing.assert_close(model(toks[:, perm]), model(toks)[:, perm], **tol(torch.float64))
    model.position_scale = 1.0
    x = model.token_embeddings(toks)
    torch.testing.assert_close(model.embed(toks, torch.arange(6)[None]), model.input_encoding.embed(x))


@pytest.mark.parametrize("name", ADDITIVE)
def test_position_scale_is_linear_in_the_signal(name):
    model = tiny(name)
    toks, positions = tokens(2, 5), torch.arange(5)[None]
    x = model.token_embeddings(toks)
    model.position_scale = 0.25
    expected = x + 0.25 * (model.input_encoding.embed(x, positions=positions) - x)
    torch.testing.assert_close(model.embed(toks, positions), expected, **tol(torch.float64))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="position_scale"):
            model.position_scale = bad


@pytest.mark.parametrize("name", ADDITIVE)
def test_concat_projects_token_and_position(name):
    model = tiny(name, combine="concat")
    toks, positions = tokens(2, 5), torch.arange(5)[None]
    x = model.token_embeddings(toks)
    signal = model.input_encoding.embed(x, positions=positions) - x
    w = model.concat_proj.weight  # (D, 2D): [W_tok | W_pos]
    expected = x @ w[:, :16].T + signal @ w[:, 16:].T  # concat + linear == two projections added
    torch.testing.assert_close(model.embed(toks, positions), expected, **tol(torch.float64))
    assert model(toks).shape == (2, 5, VOCAB)


@pytest.mark.parametrize("name", ADDITIVE)
def test_every_layer_injection_adds_the_signal_before_each_block(name):
    once, every = tiny(name), tiny(name, inject="every_layer")
    every.load_state_dict(once.state_dict())
    toks = tokens(1, 5)
    assert torch.allclose(once(toks), every(toks)) == erased_by_layer_norm(every)
    seen = []
    for block in every.blocks:
        block.register_forward_pre_hook(lambda mod, args, kw: seen.append(args[0].detach()), with_kwargs=True)
    every(toks)
    positions = torch.arange(5)[None]
    after_first = every.blocks[0](seen[0], positions=positions, padding_mask=None, cache=None)
    pe = every.input_encoding.embed(after_first, positions=positions) - after_first
    torch.testing.assert_close(seen[1], after_first + pe, **tol(torch.float64))


@pytest.mark.parametrize("name", NOT_ADDITIVE[:1] + NOT_ADDITIVE[-1:])
def test_additive_options_refused_for_other_kinds(name):
    with pytest.raises(ValueError, match="additive"):
        tiny(name, combine="concat")
    with pytest.raises(ValueError, match="additive"):
        tiny(name, inject="every_layer")


def test_bad_padding_mask_is_named():
    model = tiny("nope")
    with pytest.raises(ValueError, match="padding_mask"):
        model(tokens(2, 4), padding_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="padding_mask"):
        model(tokens(2, 4), padding_mask=torch.ones(2, 4))


def test_scale_embeddings_multiplies_tokens_by_sqrt_d_model():
    """Vaswani et al. 3.4: the token embedding is multiplied by sqrt(d_model) (opt-in)."""
    toks = tokens(1, 5)
    on = Transformer(
        TransformerConfig(vocab_size=11, d_model=16, num_heads=2, encoding="nope", scale_embeddings=True)
    )
    off = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, encoding="nope"))
    torch.testing.assert_close(on.token_embeddings(toks), on.tok_emb(toks) * 4.0)
    torch.testing.assert_close(off.token_embeddings(toks), off.tok_emb(toks))


# ---------------------------------------------------------------------------
# Positions with axes: coordinates through the model and its KV cache.
# ---------------------------------------------------------------------------


MULTI = [
    name
    for name in posenc.ENCODINGS
    if posenc.build_for_model(name, d_model=24, num_heads=2).position_axes > 1
]


def coords(*sizes: int, prefix: int = 0, start: int = 0) -> torch.Tensor:
    return grid_positions(sizes, prefix=prefix, start=start)


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
        torch.testing.assert_close(torch.cat(steps, dim=1), full, **tol(torch.float64))
        # positions=None after coordinates: text continues on the diagonal past the largest one
        nxt = model(tokens[:, :1], cache=cache)
        top = int(pos.max()) + 1
        explicit = model(torch.cat([tokens, tokens[:, :1]], 1),
                         positions=torch.cat([pos, torch.full((1, 1, a), top)], 1))[:, -1:]  # fmt: skip
        torch.testing.assert_close(nxt, explicit, **tol(torch.float64))
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
