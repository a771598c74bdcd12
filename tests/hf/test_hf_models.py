"""posenc inside transformers models (posenc.hf.apply): random-weight models built from configs.

Every verified family (posenc.hf.families.FAMILIES) passes every check of posenc.hf.parity
(logits within 1e-5 of the model's own, greedy generation with and without the KV cache, left
padding, remove bit-exact, torch.compile fullgraph); every other causal LM transformers ships is
refused at apply. Where transformers has the same scheme, the logits of the posenc-applied
model equal the model's own within 1e-5. Bias encodings (which transformers' Llama-style models
do not have) are checked against the same model run with transformers' eager attention and the
bias added by hand as a 4-D float mask.
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
import transformers
from torch import nn
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import posenc
from posenc import schedules
from posenc.hf import parity as checks
from posenc.hf.families import FAMILIES, family_available

pytestmark = pytest.mark.peers

LOGITS = dict(rtol=1e-5, atol=1e-5)  # "equal to transformers' own within 1e-5"
VOCAB = 97
SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, vocab_size=VOCAB
)
GQA = dict(num_key_value_heads=2)  # 4 query heads share 2 key/value heads
SHORT = [1.0 + 0.05 * i for i in range(8)]  # LongRoPE factors for 16 rotated dims
LONG = [1.5 + 0.5 * i for i in range(8)]

MODELS = {
    "llama": (LlamaForCausalLM, LlamaConfig, {**SMALL, **GQA}),
    "mistral": (MistralForCausalLM, MistralConfig, {**SMALL, **GQA, "sliding_window": 12}),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config, {**SMALL, **GQA}),  # q/k/v biases
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, {**SMALL, **GQA, "head_dim": 16}),  # q/k norms before RoPE
    "phi3": (Phi3ForCausalLM, Phi3Config, {**SMALL, **GQA, "pad_token_id": 0, "partial_rotary_factor": 0.5}),
}
# rope_parameters transformers implements, with lengths in tokens small enough that the test
# sequences (40 tokens) cross the original context L0 = 16.
ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 500000.0},
    "longrope": {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                 "original_max_position_embeddings": 16, "rope_theta": 10000.0},
}  # fmt: skip


def build(family: str, rope: dict | None = None, *, max_positions: int = 16, **extra) -> nn.Module:
    model_cls, config_cls, dims = MODELS[family]
    kwargs = {**dims, **extra, "max_position_embeddings": max_positions}
    if rope is not None:
        kwargs["rope_parameters"] = copy.deepcopy(rope)
    torch.manual_seed(0)
    return model_cls(config_cls(**kwargs)).eval()


def tokens(batch: int = 2, length: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def logits(model, ids, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kwargs).logits


CASES = [(family, "default") for family in MODELS] + [("llama", name) for name in ROPES if name != "default"]
CASES += [("qwen2", "yarn"), ("mistral", "dynamic")]


@pytest.mark.parametrize("family,rope", CASES, ids=[f"{f}-{r}" for f, r in CASES])
def test_posenc_rope_gives_the_logits_of_the_models_own(family, rope):
    rotary_dim = 8 if family == "phi3" else 16
    params = copy.deepcopy(ROPES[rope])
    if rope == "longrope":  # one factor per rotated pair
        params["short_factor"], params["long_factor"] = SHORT[: rotary_dim // 2], LONG[: rotary_dim // 2]
    model = build(family, params)
    ids = tokens()
    want = logits(model, ids)
    handle = posenc.hf.apply(model)
    assert all(enc.kind == "rotary" and enc.rotary_dim == rotary_dim for enc in handle.encodings)
    torch.testing.assert_close(logits(model, ids), want, **LOGITS)
    handle.remove()
    torch.testing.assert_close(logits(model, ids), want, rtol=0, atol=0)  # transformers' own code again


@pytest.mark.parametrize("rope", ["default", "yarn", "dynamic", "longrope"])
def test_generate_with_a_kv_cache_gives_the_models_own_tokens(rope):
    params = copy.deepcopy(ROPES[rope])
    if rope == "longrope":
        params["short_factor"], params["long_factor"] = SHORT, LONG
    model = build("llama", params)
    prompt = tokens(2, 6)
    mask = torch.ones_like(prompt)
    mask[1, :2] = 0  # left padding in the second row
    settings = dict(
        attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0
    )  # crosses L0 = 16
    with torch.no_grad():
        want = model.generate(prompt, **settings)
        posenc.hf.apply(model)
        got = model.generate(prompt, **settings)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_scaling_changed_after_loading_takes_effect():
    """transformers computes the frequencies when the model is built; posenc's change at once."""
    model = build("llama", ROPES["default"], max_positions=64)
    ids = tokens()
    handle = posenc.hf.apply(model)
    for name in ("yarn", "linear", "llama3"):
        params = {k: v for k, v in ROPES[name].items() if k != "rope_theta"}
        assert handle.set_scaling(params) == 1  # one RoPE instance, shared by every layer
        reference = build("llama", {**params, "rope_theta": 10000.0}, max_positions=64)
        torch.testing.assert_close(logits(model, ids), logits(reference, ids), **LOGITS)
    handle.set_scaling(None)
    torch.testing.assert_close(logits(model, ids), logits(build("llama", ROPES["default"]), ids), **LOGITS)


def test_posenc_only_scaling_static_ntk_equals_the_base_it_implies():
    """Static NTK (no transformers counterpart) is a base change: b' = b * s^(d/(d-2))."""
    model = build("llama", ROPES["default"])
    ids = tokens()
    posenc.hf.apply(model, scaling={"rope_type": "ntk", "factor": 4.0})
    reference = build("llama", {"rope_type": "default", "rope_theta": 10000.0 * 4.0 ** (16 / 14)})
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), **LOGITS)


class IdentityRotary(nn.Module):
    """A rotary embedding with angle 0: cos = 1, sin = 0 (transformers' rotation does nothing)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim

    def forward(self, x, position_ids, *args):
        shape = (*position_ids.shape, self.head_dim)
        return torch.ones(shape, dtype=x.dtype), torch.zeros(shape, dtype=x.dtype)


def eager_with_bias(
    model: nn.Module, encoding, ids: torch.Tensor, *, window: int | None = None
) -> torch.Tensor:
    """Reference: transformers' eager attention, no rotation, causal mask + bias as a 4-D float mask."""
    reference = copy.deepcopy(model)
    posenc.hf.remove(reference)
    reference.model.rotary_emb = IdentityRotary(reference.config.head_dim)
    reference.set_attn_implementation("eager")
    n = ids.shape[1]
    bias = encoding.bias(n, n).float()  # (1, h, n, n), the dense definition
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (j <= i) if window is None else (j <= i) & (i - j < window)
    mask = bias.masked_fill(~allowed, float("-inf")).expand(ids.shape[0], -1, -1, -1)
    return logits(reference, ids, attention_mask=mask)


BIAS = [name for name, cls in posenc.ENCODINGS.items() if cls.kind == "bias" and cls.position_axes == 1]


def trained(name: str):
    """One instance of bias encoding ``name`` for the test models, parameters moved off their init."""
    enc = posenc.build_for_model(name, d_model=64, num_heads=4, causal=True)
    with torch.no_grad():  # stand in for trained parameters (some start at zero)
        for param in enc.parameters():
            param.add_(0.5 * torch.randn_like(param))
    return enc


@pytest.mark.parametrize("name", BIAS)
def test_bias_encodings_run_through_the_attention_interface_with_grouped_query_attention(name):
    model = build("llama", ROPES["default"])
    enc = trained(name)
    posenc.hf.apply(model, enc)  # one instance in every layer: the reference adds one bias
    assert model.config._attn_implementation == posenc.hf.ATTENTION
    ids = tokens(2, 24)
    torch.testing.assert_close(logits(model, ids), eager_with_bias(model, enc, ids), **LOGITS)


@pytest.mark.parametrize("name", BIAS)
def test_by_name_each_layer_gets_its_own_instance_unless_the_class_shares(name):
    encodings = posenc.hf.apply(build("llama", ROPES["default"]), name).encodings
    shares = posenc.ENCODINGS[name].share_across_layers
    assert len({id(enc) for enc in encodings}) == (1 if shares else len(encodings))
    assert all(enc.config.num_heads == 4 and enc.config.bidirectional is False for enc in encodings)


def test_bias_attention_keeps_the_sliding_window_of_mistral():
    model = build("mistral", ROPES["default"])
    enc = trained("kerple_power")
    posenc.hf.apply(model, enc)
    ids = tokens(2, 30)
    torch.testing.assert_close(logits(model, ids), eager_with_bias(model, enc, ids, window=12), **LOGITS)


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_bias_encodings_generate_the_same_tokens_with_and_without_the_kv_cache(name):
    model = build("qwen2", ROPES["default"])
    posenc.hf.apply(model, trained(name))
    prompt = tokens(2, 5)
    mask = torch.ones_like(prompt)
    mask[0, :2] = 0
    settings = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(prompt, **settings)
        full = model.generate(prompt, use_cache=False, **settings)
    torch.testing.assert_close(cached, full, rtol=0, atol=0)


def test_nope_leaves_queries_and_keys_unrotated():
    model = build("llama", ROPES["default"])
    ids = tokens()
    reference = copy.deepcopy(model)
    reference.model.rotary_emb = IdentityRotary(16)
    posenc.hf.apply(model, "nope")
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), **LOGITS)


GEMMA_LOCAL = {"rope_type": "default", "rope_theta": 10000.0}
GEMMA_GLOBAL = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}


def gemma(local: dict = GEMMA_LOCAL, global_: dict = GEMMA_GLOBAL) -> nn.Module:
    config = Gemma3TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=VOCAB, sliding_window=8, max_position_embeddings=64,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        rope_parameters={"sliding_attention": copy.deepcopy(local), "full_attention": copy.deepcopy(global_)},
    )  # fmt: skip
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config).eval()


def test_gemma3_local_global_bases_with_scaling_on_global_layers_match_transformers():
    """Gemma 3's own config (one rope dict per layer type) and posenc's local_global schedule."""
    model = gemma()
    ids = tokens(2, 30)
    want = logits(model, ids)
    handle = posenc.hf.apply(model)
    assert [enc.config.base for enc in handle.encodings] == [1e4, 1e4, 1e6] * 2
    torch.testing.assert_close(logits(model, ids), want, **LOGITS)
    schedule = schedules.local_global(
        6, global_every=3, global_scaling={"rope_type": "linear", "factor": 8.0}
    )
    posenc.hf.apply(model, schedule)
    torch.testing.assert_close(logits(model, ids), want, **LOGITS)


SCALED = {"rope_type": "linear", "factor": 4.0}  # (transformers 5.0 cannot build per-layer-type yarn dicts)


@pytest.mark.parametrize(
    "layer_type,local,global_",
    [
        (None, GEMMA_LOCAL, {**SCALED, "rope_theta": 1e6}),  # as transformers: the full_attention layers only
        ("full_attention", GEMMA_LOCAL, {**SCALED, "rope_theta": 1e6}),
        ("sliding_attention", {**SCALED, "rope_theta": 1e4}, {"rope_type": "default", "rope_theta": 1e6}),
        ("all", {**SCALED, "rope_theta": 1e4}, {**SCALED, "rope_theta": 1e6}),
    ],
)
def test_gemma3_set_scaling_scales_the_layer_type_transformers_would(layer_type, local, global_):
    """set_scaling on a Gemma 3 equals the same model built with that scaling in its config: by default
    on the global (full_attention) layers only, as Gemma3TextConfig puts a flat rope_scaling."""
    model = gemma(GEMMA_LOCAL, {"rope_type": "default", "rope_theta": 1e6})
    handle = posenc.hf.apply(model)
    changed = handle.set_scaling(SCALED, layer_type=layer_type)
    assert changed == (2 if layer_type == "all" else 1)  # one RoPE per layer type
    ids = tokens(2, 30)
    torch.testing.assert_close(logits(model, ids), logits(gemma(local, global_), ids), **LOGITS)


def test_gemma3_scaling_given_at_apply_goes_where_set_scaling_puts_it():
    model = gemma(GEMMA_LOCAL, {"rope_type": "default", "rope_theta": 1e6})
    posenc.hf.apply(model, scaling=SCALED)
    ids = tokens(2, 30)
    torch.testing.assert_close(
        logits(model, ids), logits(gemma(GEMMA_LOCAL, {**SCALED, "rope_theta": 1e6}), ids), **LOGITS
    )


def test_set_scaling_names_the_layer_types_a_model_has():
    handle = posenc.hf.apply(gemma())
    with pytest.raises(
        posenc.PosencError, match="layer_type must be 'all', 'sliding_attention', 'full_attention'"
    ):
        handle.set_scaling(SCALED, layer_type="global")
    with pytest.raises(posenc.PosencError, match="layer_type must be 'all' for this Llama"):
        posenc.hf.apply(build("llama", ROPES["default"])).set_scaling(SCALED, layer_type="full_attention")
    shared = posenc.hf.apply(gemma(), posenc.build("rope", head_dim=16))  # one instance for both types
    with pytest.raises(posenc.PosencError, match="share one encoding"):
        shared.set_scaling(SCALED)
    assert shared.set_scaling(SCALED, layer_type="all") == 1


def test_irope_schedule_gives_nope_layers_inside_a_llama():
    model = build("llama", ROPES["default"], num_hidden_layers=4)
    handle = posenc.hf.apply(model, schedules.irope(4, nope_every=2))
    assert [enc.kind for enc in handle.encodings] == ["rotary", "none", "rotary", "none"]
    ids = tokens()
    # by hand: transformers' own RoPE in layers 0 and 2, identity rotation in layers 1 and 3
    reference = build("llama", ROPES["default"], num_hidden_layers=4)
    posenc.hf.apply(reference, [posenc.hf.rope_from_hf(reference.config), posenc.build("nope")] * 2)
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), rtol=0, atol=0)
    plain = build("llama", ROPES["default"], num_hidden_layers=4)
    assert not torch.allclose(logits(model, ids), logits(plain, ids), **LOGITS)
    # its NoPE layers are rotation-free: equal to transformers' own model whose layers 1 and 3 are
    # handed cos = 1, sin = 0 (a pre-hook written here, independent of posenc's)
    nope_layers = build("llama", ROPES["default"], num_hidden_layers=4)
    for index in (1, 3):
        nope_layers.model.layers[index].self_attn.register_forward_pre_hook(_no_rotation, with_kwargs=True)
    torch.testing.assert_close(logits(model, ids), logits(nope_layers, ids), **LOGITS)


def _no_rotation(module, args, kwargs):
    cos, sin = kwargs["position_embeddings"]
    kwargs["position_embeddings"] = (torch.ones_like(cos), torch.zeros_like(sin))
    return args, kwargs


def test_applying_again_replaces_and_remove_restores_everything():
    model = build("llama", ROPES["yarn"])
    ids = tokens()
    want = logits(model, ids)
    posenc.hf.apply(model, "alibi")
    posenc.hf.apply(model)  # replaces the ALiBi application
    assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(logits(model, ids), want, **LOGITS)
    posenc.hf.remove(model)
    assert type(model.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"
    assert not any("posenc" in name for name, _ in model.named_modules())
    torch.testing.assert_close(logits(model, ids), want, rtol=0, atol=0)


def test_learned_bias_parameters_are_model_parameters_and_train():
    model = build("llama", ROPES["default"])
    enc = posenc.hf.apply(model, "t5").encodings[0]
    assert all(any(p is q for q in model.parameters()) for p in enc.parameters())
    model.train()
    loss = model(tokens(2, 12), labels=tokens(2, 12)).loss
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.parameters())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: posenc.hf.apply(m, "sinusoidal"), "kind 'additive'"),
        (lambda m: posenc.hf.apply(m, "shaw"), "kind 'relative'"),
        (lambda m: posenc.hf.apply(m, posenc.build("rope", head_dim=8)), "head_dim=8"),
        (lambda m: posenc.hf.apply(m, schedules.irope(5)), "5 layers"),
        (lambda m: posenc.hf.apply(m, posenc.build("alibi", num_heads=3)), "num_heads=3"),
        (lambda m: posenc.hf.apply(m, "rope", bse=2.0), "bse"),
        (lambda m: posenc.hf.apply(m, posenc.build("nope"), base=2.0), "config keywords"),
        (lambda m: posenc.hf.apply(m, "xpos"), "xPos scales them differently"),
        (
            lambda m: posenc.hf.apply(m, "alibi_2d"),
            "ALiBi2D takes positions with 2 axes but the Llama model gives 1",
        ),
        (lambda m: posenc.hf.apply(m, "rope_axial"), "AxialRoPE takes positions with 2 axes"),
        (lambda m: posenc.hf.apply(m, "rope", layout="interleaved"), "layout='interleaved'"),
        (lambda m: posenc.hf.apply(m, "rope", partial_rotary_factor=0.5), "rotary_dim=8"),
        (lambda m: posenc.hf.apply(m, scaling={"rope_type": "yran"}), "yran"),
    ],
)
def test_bad_requests_are_refused_naming_what_is_wrong(call, match):
    model = build("llama", ROPES["default"])
    with pytest.raises(ValueError, match=match):
        call(model)
    assert type(model.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"  # nothing was changed


def test_models_of_families_posenc_has_not_verified_are_refused():
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB))
    with pytest.raises(
        ValueError, match="has not verified GPT2LMHeadModel \\(model_type 'gpt2'\\).*Llama, Mistral"
    ):
        posenc.hf.apply(model)


def test_every_other_causal_lm_of_transformers_is_refused_by_name():
    """Every causal LM transformers lists outside the verified families (most of them with RoPE)
    is refused at apply, naming it, before anything changes (built on the meta device: no memory)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    built = 0
    with warnings.catch_warnings(), _quiet_transformers():
        warnings.simplefilter("ignore")
        for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            try:  # some configs need arguments or extra packages; they cannot be built here
                config = transformers.AutoConfig.for_model(model_type)
                with torch.device("meta"):
                    model = transformers.AutoModelForCausalLM.from_config(config)
            except Exception:
                continue
            if model.config.model_type in FAMILIES:  # e.g. "llama4" builds the verified llama4_text model
                continue
            before = [type(module) for module in model.modules()]
            name = model.config.model_type
            with pytest.raises(posenc.PosencError, match=f"has not verified .*model_type {name!r}"):
                posenc.hf.apply(model)
            assert [type(module) for module in model.modules()] == before
            built += 1
    assert built >= 80  # 94 in transformers 5.0, 181 in 5.24


class _quiet_transformers:
    def __enter__(self):
        logging.disable(logging.WARNING)

    def __exit__(self, *exc):
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("check", checks.CHECKS)
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_every_verified_family_passes_every_check(model_type, check):
    """One cell of docs/hf-support.md: the family's small model, posenc's RoPE from its config."""
    (result,) = checks.check_family(model_type, (check,))
    if not result.applicable:  # transformers' own model fails it too, or predates the family's seam
        pytest.skip(result.detail)
    assert result.passed, f"{model_type} {check}: error {result.error} {result.detail}"


def test_a_model_whose_own_tables_differ_from_its_config_is_refused():
    """As a transformers release that changed a family's tables would be: posenc compares the model's
    own rotary embedding with its reading of the config at every apply, and refuses a difference."""
    model = build("llama", ROPES["default"])
    with torch.no_grad():
        model.model.rotary_emb.inv_freq.mul_(1.01)  # the module no longer computes what the config says
    with pytest.raises(posenc.PosencError, match="does not give posenc's tables.*max difference"):
        posenc.hf.apply(model)
    assert type(model.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"


def test_a_transformers_release_outside_the_tested_range_is_named_at_apply(monkeypatch):
    monkeypatch.setattr(posenc.hf.model, "TESTED_TRANSFORMERS", ("1.0.0", "1.0.1"))
    with pytest.warns(
        UserWarning, match=f"checked on transformers 1.0.0 to 1.0.1; {transformers.__version__}"
    ):
        posenc.hf.apply(build("llama", ROPES["default"]))


def test_grouped_query_keys_are_repeated_not_mixed():
    """Bias attention with 2 key/value heads for 4 query heads equals 4 heads with the kv repeated."""
    gqa = build("llama", ROPES["default"])
    mha = build("llama", ROPES["default"], num_key_value_heads=4)
    with torch.no_grad():  # copy every weight; the k/v projections repeat each kv head twice
        state = gqa.state_dict()
        for key, value in list(state.items()):
            if key.endswith(("k_proj.weight", "v_proj.weight")):
                state[key] = value.view(2, 16, -1).repeat_interleave(2, dim=0).reshape(64, -1)
        mha.load_state_dict(state)
    enc = trained("kerple_log")
    for model in (gqa, mha):
        posenc.hf.apply(model, enc)
    ids = tokens(2, 20)
    torch.testing.assert_close(logits(gqa, ids), logits(mha, ids), **LOGITS)


def test_a_model_preset_schedule_brings_its_own_rope_and_is_refused_where_the_layout_differs():
    """presets.schedule('llama-4-scout') is Llama 4's whole set-up (interleaved pairs, base 5e5, llama3
    scaling): a Llama rotates half pairs, so it is refused; the pattern alone is schedules.irope."""
    model = build("llama", ROPES["default"], num_hidden_layers=4)
    with pytest.raises(posenc.PosencError, match="layout='interleaved' but the Llama model rotates 'half'"):
        posenc.hf.apply(model, posenc.presets.schedule("llama-4-scout", num_layers=4))
    handle = posenc.hf.apply(model, schedules.irope(4))
    assert [enc.kind for enc in handle.encodings] == ["rotary", "rotary", "rotary", "none"]
    rope = handle.encodings[0]
    assert (rope.config.base, rope.config.layout, rope.config.head_dim) == (
        10000.0,
        "half",
        16,
    )  # the model's
    prompt = tokens(2, 5)
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached, full = model.generate(prompt, **settings), model.generate(prompt, use_cache=False, **settings)
    torch.testing.assert_close(cached, full, rtol=0, atol=0)


def qwen2_vl(**rope) -> nn.Module:
    """A small Qwen2-VL text model (transformers' Qwen2VLTextModel) from a config: M-RoPE sections 2, 3, 3.
    On a transformers release before the verified one, posenc.hf refuses it by version (checked
    here) and the test stops."""
    params = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6, **rope}
    config = transformers.Qwen2VLTextConfig(**{**SMALL, **GQA, "rope_parameters": params})
    torch.manual_seed(0)
    model = transformers.Qwen2VLTextModel(config).eval()
    if not family_available("qwen2_vl_text"):
        with pytest.raises(posenc.PosencError, match=r"from transformers 5\.24\.0 on \(its rotary embedding"):
            posenc.hf.apply(model)
        pytest.skip("M-RoPE in transformers' Qwen2-VL is verified from 5.24 on; refused here by version")
    return model


def hidden(model, ids, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kwargs).last_hidden_state


def test_qwen2_vl_takes_posencs_mrope_with_t_h_w_position_ids_with_and_without_the_cache():
    """Text, a 2 x 3 x 4 video grid and text again, as Qwen2-VL's get_rope_index places them: the
    applied model gives the stock model's hidden states, in one pass and decoding with the KV cache."""
    model = qwen2_vl()
    positions = posenc.core.axes.multimodal_positions([5, (2, 3, 4), 7])  # (1, n, 3): t, h, w per token
    position_ids = positions.permute(2, 0, 1).expand(3, 2, -1)  # transformers' (3, batch, n)
    n = position_ids.shape[-1]
    ids = tokens(2, n)
    want = hidden(model, ids, position_ids=position_ids)
    handle = posenc.hf.apply(model)
    assert type(handle.encodings[0]).__name__ == "MRoPE" and handle.encodings[0].config.mrope_section == [
        2,
        3,
        3,
    ]
    torch.testing.assert_close(hidden(model, ids, position_ids=position_ids), want, **LOGITS)
    cache = transformers.DynamicCache(config=model.config)
    steps = [hidden(model, ids[:, :10], position_ids=position_ids[..., :10], cache=cache, use_cache=True)]
    for i in range(10, n):  # one token at a time, each with its own (t, h, w)
        steps.append(
            hidden(
                model,
                ids[:, i : i + 1],
                position_ids=position_ids[..., i : i + 1],
                cache=cache,
                use_cache=True,
            )
        )
    torch.testing.assert_close(torch.cat(steps, dim=1), want, **LOGITS)
    plain_rope = hidden(model, ids)  # diagonal positions: not the grid's
    assert not torch.allclose(plain_rope, want, **LOGITS)
    handle.remove()
    torch.testing.assert_close(hidden(model, ids, position_ids=position_ids), want, rtol=0, atol=0)


def test_qwen2_vl_refuses_what_its_position_ids_cannot_drive():
    model = qwen2_vl()
    with pytest.raises(
        posenc.PosencError, match="takes positions with 1 axes but the Qwen2-VL model gives 3"
    ):
        posenc.hf.apply(model, posenc.build("rope", head_dim=16))
    with pytest.raises(posenc.PosencError, match="Qwen2-VL takes no bias encodings: its position ids are"):
        posenc.hf.apply(model, "alibi")
    bad = qwen2_vl(mrope_section=[4, 4, 4])  # 12 pairs for a head of 8: transformers slices silently
    with pytest.raises(posenc.PosencError, match="mrope_section"):
        posenc.hf.apply(bad)


def test_falcons_own_attention_code_takes_no_bias_encodings():
    model = checks.small_model("falcon")
    with pytest.raises(
        posenc.PosencError, match="Falcon takes no bias encodings: its attention does not run"
    ):
        posenc.hf.apply(model, "alibi")
    posenc.hf.apply(model, "nope")  # rotary encodings and NoPE do
