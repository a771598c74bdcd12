"""Real-model presets: each builds, and the numbers agree with transformers' own code."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner
from transformers import (
    DeepseekV3Config,
    Gemma3TextConfig,
    GPTNeoXConfig,
    Llama4TextConfig,
    LlamaConfig,
    Phi3Config,
    Qwen3Config,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import posenc
from posenc import hf, presets
from posenc.cli import main
from posenc.encoding.rotary import scaling as rope_scaling

RTOL = 1e-6  # transformers computes inv_freq in float32, posenc in float64
# Gemma 3's head_dim 256 is not d_model / heads; DeepSeek-V3 rotates 64 of each 192-dim head.
HEADS_NOT_D_MODEL = ("gemma-3-12b", "deepseek-v3")


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_preset_builds_a_registered_encoding(name):
    preset = presets.PRESETS[name]
    assert preset.encoding in posenc.ENCODINGS
    enc = presets.build(name)
    assert isinstance(enc, posenc.ENCODINGS[preset.encoding])
    for key, value in preset.config.items():
        assert enc.config.to_dict()[key] == value, key
    dims = {"dim": preset.d_model, "num_heads": preset.num_heads, "head_dim": preset.head_dim}
    for key, value in dims.items():
        if key in enc.config.field_names():
            assert getattr(enc.config, key) == value, key
    if name in HEADS_NOT_D_MODEL:  # the preset says why in its note
        assert preset.head_dim * preset.num_heads != preset.d_model and "head" in preset.note
    else:
        assert preset.head_dim * preset.num_heads == preset.d_model
    assert preset.num_kv_heads is None or preset.num_heads % preset.num_kv_heads == 0
    from_config = preset.source.startswith("https://huggingface.co/") and preset.source.endswith(
        "config.json"
    )
    from_paper = (
        preset.source.startswith("https://arxiv.org/abs/") and "no config file published" in preset.source
    )
    assert from_config or from_paper, preset.source
    assert preset.paper and preset.note and preset.layout
    json.dumps(preset.to_dict())


def test_seed_001_table_numbers():
    """Seed 001: BERT learned 512, GPT-2 learned 1024, LLaMA RoPE."""
    assert presets.build("bert").config.max_len == 512
    assert presets.build("gpt2").config.max_len == 1024
    assert presets.build("llama-2").kind == "rotary"


def test_the_notes_models_have_presets_with_their_papers_numbers():
    """Original Transformer (sinusoidal, base 512/8), GPT-3 (learned 2048), LLaMA-1 (RoPE 2048), Transformer-XL."""
    transformer = presets.build("transformer")
    assert (
        transformer.kind == "additive"
        and transformer.config.dim == 512
        and transformer.config.base == 10000.0
    )
    assert presets.PRESETS["transformer"].max_positions is None  # sinusoids are defined at every position
    gpt3 = presets.build("gpt3")
    assert type(gpt3) is posenc.ENCODINGS["learned"]
    assert (gpt3.config.max_len, gpt3.config.dim) == (2048, 12288)
    assert sum(p.numel() for p in gpt3.parameters()) == 2048 * 12288
    with pytest.raises(ValueError, match="max_len"):  # no row past the table, as for GPT-2 and BERT
        gpt3.embed(torch.zeros(1, 1, 12288), positions=torch.tensor([[2048]]))
    llama = presets.build("llama-1")
    assert (llama.kind, llama.config.base, llama.config.max_position_embeddings) == ("rotary", 10000.0, 2048)
    assert llama.config.head_dim == 128 and llama.config.scaling is None
    xl = presets.build("transformer-xl")
    assert type(xl) is posenc.ENCODINGS["transformer_xl"]
    assert (xl.config.num_heads, xl.config.head_dim, xl.config.sinusoid_dim) == (16, 64, 1024)


def test_llama_1_frequencies_match_transformers_default_rope():
    preset = presets.PRESETS["llama-1"]
    hf_config = LlamaConfig(
        hidden_size=preset.d_model,
        num_attention_heads=preset.num_heads,
        max_position_embeddings=preset.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    want, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(hf_config, device="cpu")
    torch.testing.assert_close(presets.build("llama-1").frequencies(0)[0], want.double(), rtol=RTOL, atol=0)


def test_llama_3_1_inv_freq_matches_transformers_llama3_init():
    preset = presets.PRESETS["llama-3.1"]
    rope = dict(preset.config["scaling"])
    hf_config = LlamaConfig(
        hidden_size=preset.d_model,
        num_attention_heads=preset.num_heads,
        max_position_embeddings=preset.config["max_position_embeddings"],
        rope_parameters={**rope, "rope_theta": preset.config["base"]},
    )
    want, want_scale = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    got, got_scale = presets.build("llama-3.1").frequencies(0)
    assert got.shape == (64,)
    torch.testing.assert_close(got, want.double(), rtol=RTOL, atol=0)
    assert got_scale == pytest.approx(float(want_scale))
    # the scaling does something: the lowest frequencies are divided by the factor 8
    plain = presets.build("llama-3.1", scaling=None).frequencies(0)[0]
    torch.testing.assert_close(got[-1], plain[-1] / 8, rtol=1e-12, atol=0)
    torch.testing.assert_close(got[0], plain[0], rtol=0, atol=0)


def test_gpt_neox_partial_rotary_matches_transformers():
    preset = presets.PRESETS["gpt-neox"]
    hf_config = GPTNeoXConfig(
        hidden_size=preset.d_model,
        num_attention_heads=preset.num_heads,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    )
    want, _ = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(hf_config, device="cpu")
    enc = presets.build("gpt-neox")
    assert enc.rotary_dim == 24
    torch.testing.assert_close(enc.frequencies(0)[0], want.double(), rtol=RTOL, atol=0)


def test_bloom_alibi_slopes_for_112_heads_match_transformers():
    enc = presets.build("bloom")
    alibi = build_alibi_tensor(torch.ones(1, 3), 112, torch.float32)  # (h, 1, n) = slope_h * key position
    torch.testing.assert_close(enc.slopes, alibi[:, 0, 1].double(), rtol=RTOL, atol=0)


def test_overrides_win_and_are_validated():
    assert presets.build("gpt2", max_len=2048).config.max_len == 2048
    assert presets.build("t5", bidirectional=False).config.bidirectional is False
    with pytest.raises(ValueError, match="did you mean 'max_len'"):
        presets.build("gpt2", max_lenn=5)


@pytest.mark.parametrize(
    "typo,hint",
    [("llama3.1", "llama-3.1"), ("gpt-2", "gpt2"), ("mistral", "mistral-7b"), ("gpt-3", "gpt3")],
)
def test_unknown_preset_suggests_the_closest(typo, hint):
    with pytest.raises(ValueError, match=f"did you mean '{hint}'"):
        presets.build(typo)
    with pytest.raises(TypeError):
        presets.get(3)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_cli_list_presets_and_build_preset():
    result = run("list", "--presets", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [row["name"] for row in json.loads(result.output)] == list(presets.PRESETS)
    table = run("list", "--presets")
    assert table.exit_code == 0 and all(name in table.output for name in presets.PRESETS)
    built = run("build", "--preset", "gpt-j", "--format", "json")
    assert built.exit_code == 0, built.output
    out = json.loads(built.output)
    assert out["config"]["rotary_dim"] == 64 and out["config"]["layout"] == "interleaved"
    assert out["config"] == presets.build("gpt-j").config.to_dict()
    shown = run("build", "--preset", "t5")
    assert shown.exit_code == 0 and "T5RelativeBias" in shown.output and "num_buckets" in shown.output
    bad = run("build", "--preset", "gtp2")
    assert bad.exit_code == 2 and "did you mean 'gpt2'" in bad.output


# ---------------------------------------------------------------------------
# The presets of current models, against transformers' reading of the same numbers.
# ---------------------------------------------------------------------------


def hf_config_for(name: str, config_cls, **extra):
    """The preset's numbers as a transformers config (the layout transformers 5 writes)."""
    preset = presets.PRESETS[name]
    rope = {k: v for k, v in preset.config.items() if k != "layout"}
    written = hf.to_hf({"head_dim": preset.head_dim, **rope})
    return config_cls(
        hidden_size=preset.d_model,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_kv_heads or preset.num_heads,
        num_hidden_layers=preset.num_layers or 1,
        **{**written, **extra},
    )


@pytest.mark.parametrize(
    "name,config_cls,lengths",
    [
        ("llama-3.2-1b", LlamaConfig, [None]),
        ("qwen3-8b", Qwen3Config, [None]),
        ("phi-3.5-mini", Phi3Config, [None, 4096, 4097, 131072]),  # short factors, then long ones
        ("deepseek-v3", DeepseekV3Config, [None]),
    ],
)
def test_current_model_presets_give_transformers_frequencies(name, config_cls, lengths):
    extra = {"qk_rope_head_dim": 64, "qk_nope_head_dim": 128} if name == "deepseek-v3" else {}
    hf_config = hf_config_for(name, config_cls, **extra)
    rope_type = hf_config.rope_parameters["rope_type"]
    enc = presets.build(name)
    for seq_len in lengths:
        if rope_type == "default":
            want, want_scale = LlamaRotaryEmbedding.compute_default_rope_parameters(hf_config, device="cpu")
        else:
            want, want_scale = ROPE_INIT_FUNCTIONS[rope_type](hf_config, "cpu", seq_len=seq_len)
        got, got_scale = enc.frequencies(0 if seq_len is None else seq_len - 1)
        torch.testing.assert_close(got, want.double(), rtol=RTOL, atol=0)
        assert got_scale == pytest.approx(float(want_scale), rel=RTOL)


def test_phi35_longrope_attention_factor_is_the_published_formula():
    enc = presets.build("phi-3.5-mini")
    resolved = rope_scaling.resolve(enc.config.scaling, max_position_embeddings=131072)
    assert resolved["factor"] == 32.0  # 131072 / 4096, inferred as transformers does
    assert enc.attention_scaling == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


def test_llama4_scout_irope_layers_and_frequencies_match_transformers():
    preset = presets.PRESETS["llama-4-scout"]
    schedule = presets.schedule("llama-4-scout")
    text = Llama4TextConfig(
        hidden_size=preset.d_model, num_attention_heads=preset.num_heads, num_key_value_heads=preset.num_kv_heads,
        head_dim=preset.head_dim, num_hidden_layers=preset.num_layers,
        rope_parameters={**preset.config["scaling"], "rope_theta": preset.config["base"]},
        max_position_embeddings=preset.config["max_position_embeddings"],
    )  # fmt: skip
    assert [int(layer.encoding == "rope") for layer in schedule.layers] == text.no_rope_layers
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](text, "cpu")
    rope = presets.build("llama-4-scout")
    assert torch.isfinite(want).all()  # low = high = 1: no pair sits exactly on the band edge
    torch.testing.assert_close(rope.frequencies(0)[0], want.double(), rtol=RTOL, atol=0)
    assert rope.config.layout == "interleaved"


def test_gemma3_local_and_global_layers_match_transformers_per_layer_type():
    preset = presets.PRESETS["gemma-3-12b"]
    text = Gemma3TextConfig(
        hidden_size=preset.d_model, num_attention_heads=preset.num_heads, num_key_value_heads=preset.num_kv_heads,
        head_dim=preset.head_dim, num_hidden_layers=preset.num_layers, sliding_window_pattern=6,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        max_position_embeddings=preset.max_positions,
    )  # fmt: skip
    rotary = Gemma3RotaryEmbedding(text)
    encodings = presets.schedule("gemma-3-12b").build(
        d_model=preset.d_model, num_heads=preset.num_heads, head_dim=preset.head_dim
    )
    for layer_type, enc in zip(text.layer_types, encodings):
        want = getattr(rotary, f"{layer_type}_inv_freq")
        torch.testing.assert_close(enc.frequencies(0)[0], want.double(), rtol=RTOL, atol=0)
        assert enc.attention_scaling == getattr(rotary, f"{layer_type}_attention_scaling")
    assert presets.build("gemma-3-12b").config.to_dict() == encodings[5].config.to_dict()  # a global layer


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_preset_has_a_schedule_of_its_layers(name):
    preset = presets.PRESETS[name]
    if posenc.ENCODINGS[preset.encoding].kind == "additive":  # acts on the embeddings, not per layer
        with pytest.raises(ValueError, match="additive"):
            presets.schedule(name, 12)
        return
    schedule = presets.schedule(name, 12)
    assert schedule.num_layers == 12
    if preset.layers is None:
        assert {(layer.encoding, json.dumps(layer.config, sort_keys=True)) for layer in schedule.layers} == {
            (preset.encoding, json.dumps(preset.config, sort_keys=True))
        }
    if preset.num_layers is None:
        with pytest.raises(ValueError, match="num_layers"):
            presets.schedule(name)
