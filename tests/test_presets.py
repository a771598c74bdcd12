"""Real-model presets: each builds, and the numbers agree with transformers' own code."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

import posenc
from posenc import presets
from posenc.cli import main

RTOL = 1e-6  # transformers computes inv_freq in float32, posenc in float64


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
    assert preset.head_dim * preset.num_heads == preset.d_model  # every preset model has no odd-sized heads
    assert preset.source.startswith("https://huggingface.co/") and preset.source.endswith("config.json")
    assert preset.paper and preset.note and preset.layout
    json.dumps(preset.to_dict())


def test_seed_001_table_numbers():
    """Seed 001: BERT learned 512, GPT-2 learned 1024, LLaMA RoPE."""
    assert presets.build("bert").config.max_len == 512
    assert presets.build("gpt2").config.max_len == 1024
    assert presets.build("llama-2").kind == "rotary"


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
    "typo,hint", [("llama3.1", "llama-3.1"), ("gpt-2", "gpt2"), ("mistral", "mistral-7b")]
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
