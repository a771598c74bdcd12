"""posenc's RoPE scalings against Hugging Face transformers (a test extra: never skipped).

For each HF config: posenc reads it (posenc.hf.from_hf), computes inv_freq and the
attention scaling, and must match ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``
(or the model's ``compute_default_rope_parameters``) to 1e-6 relative. HF computes in
float32, posenc in float64, hence the tolerance. The HF config dicts must also
round-trip through posenc unchanged, and posenc's own HF output must load in HF.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st
from transformers import LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

import posenc
from posenc import hf
from posenc.encoding.rotary import scaling as rope_scaling

# the version constraints.txt locks: on it, nothing here may be skipped
LOCKED_TRANSFORMERS = next(
    line.split("==")[1].strip()
    for line in (Path(__file__).parents[2] / "constraints.txt").read_text().splitlines()
    if line.startswith("transformers==")
)

RTOL = 1e-6
LONG = [1.0 + 0.25 * i for i in range(48)]  # Phi-3 style per-pair factors, head_dim 96
SHORT = [1.0 + 0.01 * i for i in range(48)]
SHORT_32 = [1.0 + 0.02 * i for i in range(16)]  # for partial rotary: 32 rotated dims
LONG_32 = [2.0 + 0.5 * i for i in range(16)]

LLAMA = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=4)
# name -> (HF config class, config dict, sequence lengths to check)
CONFIGS = {
    "default_v4_null": (
        LlamaConfig,
        {**LLAMA, "rope_scaling": None, "rope_theta": 10000.0, "max_position_embeddings": 2048},
        [None],
    ),
    "default_v5": (
        LlamaConfig,
        {
            **LLAMA,
            "head_dim": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
            "max_position_embeddings": 4096,
        },
        [None],
    ),
    "default_partial": (
        Phi3Config,
        {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
            "max_position_embeddings": 2048,
            "rope_scaling": None,
        },
        [None],
    ),
    "linear_legacy_type": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_scaling": {"type": "linear", "factor": 4.0},
            "rope_theta": 10000.0,
            "max_position_embeddings": 8192,
        },
        [None],
    ),
    "linear_v5": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_parameters": {"rope_type": "linear", "factor": 2.5, "rope_theta": 20000.0},
            "max_position_embeddings": 4096,
        },
        [None],
    ),
    "dynamic": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
            "rope_theta": 10000.0,
            "max_position_embeddings": 2048,
        },
        [None, 1, 1000, 2048, 2049, 4096, 10000, 100000],
    ),
    "dynamic_v5": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_parameters": {"rope_type": "dynamic", "factor": 8.0, "rope_theta": 1e6},
            "max_position_embeddings": 1024,
        },
        [None, 1024, 3000, 50000],
    ),
    "yarn": (
        LlamaConfig,
        {
            **LLAMA,
            "head_dim": 128,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 2048,
                "rope_theta": 10000.0,
            },
            "max_position_embeddings": 8192,
        },
        [None],
    ),
    "yarn_attention_factor": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_scaling": {
                "type": "yarn",
                "factor": 8.0,
                "original_max_position_embeddings": 4096,
                "attention_factor": 0.8,
                "beta_fast": 16.0,
                "beta_slow": 2.0,
            },
            "rope_theta": 10000.0,
            "max_position_embeddings": 32768,
        },
        [None],
    ),
    "yarn_mscale": (
        LlamaConfig,
        {
            **LLAMA,
            "head_dim": 64,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "mscale": 1.0,
                "mscale_all_dim": 0.707,
                "beta_fast": 32,
                "beta_slow": 1,
                "rope_theta": 10000.0,
            },
            "max_position_embeddings": 163840,
        },
        [None],
    ),
    "yarn_no_truncate": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 16.0,
                "original_max_position_embeddings": 4096,
                "truncate": False,
                "rope_theta": 150000.0,
            },
            "max_position_embeddings": 65536,
        },
        [None],
    ),
    "yarn_inferred_original": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
            "rope_theta": 10000.0,
            "max_position_embeddings": 4096,
        },
        [None],
    ),
    "llama3": (
        LlamaConfig,
        {
            "hidden_size": 512,
            "num_attention_heads": 4,
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
                "rope_theta": 500000.0,
            },
            "max_position_embeddings": 131072,
        },
        [None],
    ),
    "llama3_legacy": (
        LlamaConfig,
        {
            **LLAMA,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 8.0,
                "original_max_position_embeddings": 1024,
            },
            "rope_theta": 10000.0,
            "max_position_embeddings": 32768,
        },
        [None],
    ),
    "longrope_phi3": (
        Phi3Config,
        {
            "hidden_size": 384,
            "num_attention_heads": 4,
            "rope_scaling": {"type": "longrope", "short_factor": SHORT, "long_factor": LONG},
            "rope_theta": 10000.0,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
        },
        [None, 100, 4096, 4097, 131072],
    ),
    "longrope_factor": (
        Phi3Config,
        {
            "hidden_size": 384,
            "num_attention_heads": 4,
            "rope_parameters": {
                "rope_type": "longrope",
                "short_factor": SHORT,
                "long_factor": LONG,
                "factor": 16.0,
                "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0,
            },
            "max_position_embeddings": 65536,
        },
        [None, 4096, 4097],
    ),
    "longrope_attention_partial": (
        Phi3Config,
        {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "partial_rotary_factor": 0.5,
            "rope_parameters": {
                "rope_type": "longrope",
                "short_factor": SHORT_32,
                "long_factor": LONG_32,
                "attention_factor": 1.3,
                "rope_theta": 10000.0,
            },
            "max_position_embeddings": 8192,
            "original_max_position_embeddings": 2048,
        },
        [None, 2048, 2049],
    ),
}
DEFAULT_FN = {LlamaConfig: LlamaRotaryEmbedding, Phi3Config: Phi3RotaryEmbedding}


def hf_frequencies(cls, cfg: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """inv_freq and attention scaling exactly as transformers computes them from the config."""
    config = cls(**copy.deepcopy(cfg))
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return DEFAULT_FN[cls].compute_default_rope_parameters(config, device="cpu")
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def posenc_frequencies(cfg: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    kwargs = hf.from_hf(cfg)
    dim = int(kwargs["head_dim"] * kwargs["partial_rotary_factor"])
    return rope_scaling.compute(
        kwargs["scaling"],
        dim=dim,
        base=kwargs["base"],
        seq_len=seq_len,
        max_position_embeddings=kwargs["max_position_embeddings"],
    )


CASES = [(name, seq_len) for name, (_, _, lengths) in CONFIGS.items() for seq_len in lengths]


@pytest.mark.parametrize("name,seq_len", CASES, ids=[f"{n}-L{s}" for n, s in CASES])
def test_inv_freq_and_attention_scaling_match_transformers(name, seq_len):
    cls, cfg, _ = CONFIGS[name]
    want_freq, want_scale = hf_frequencies(cls, cfg, seq_len)
    got_freq, got_scale = posenc_frequencies(cfg, seq_len)
    assert got_freq.dtype == torch.float64
    torch.testing.assert_close(got_freq, want_freq.double(), rtol=RTOL, atol=0)
    assert got_scale == pytest.approx(float(want_scale), rel=RTOL)


@pytest.mark.parametrize("name,seq_len", CASES, ids=[f"{n}-L{s}" for n, s in CASES])
def test_rope_encoding_built_from_hf_config_matches_transformers(name, seq_len):
    cls, cfg, _ = CONFIGS[name]
    enc = hf.rope_from_hf(cfg)
    want_freq, want_scale = hf_frequencies(cls, cfg, seq_len)
    got_freq, got_scale = enc.frequencies(0 if seq_len is None else seq_len - 1)
    if seq_len is None and rope_scaling.depends_on_seq_len(enc.config.scaling):
        got_freq, got_scale = enc._inv_freq, enc.attention_scaling  # the length-free set
    torch.testing.assert_close(got_freq, want_freq.double(), rtol=RTOL, atol=0)
    assert got_scale == pytest.approx(float(want_scale), rel=RTOL)


@pytest.mark.parametrize("name", ["linear_v5", "yarn", "llama3", "longrope_phi3", "dynamic"])
def test_rotated_qk_match_transformers_rotary_embedding(name):
    """The whole rotation (cos/sin incl. attention scaling, rotate_half) against HF's forward."""
    cls, cfg, _ = CONFIGS[name]
    config = cls(**copy.deepcopy(cfg))
    hf_rope = (LlamaRotaryEmbedding if cls is LlamaConfig else Phi3RotaryEmbedding)(config)
    enc = hf.rope_from_hf(cfg)
    head_dim = enc.config.head_dim
    seq = 48
    positions = torch.arange(seq)[None] + (5000 if name in ("longrope_phi3", "dynamic") else 0)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, seq, head_dim, generator=g)
    k = torch.randn(1, 2, seq, head_dim, generator=g)
    cos, sin = hf_rope(q, positions)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = enc.rotate(q, k, q_positions=positions, k_positions=positions)
    # float32 angles in HF at positions ~5000: ~5e-4 absolute error in the angle
    atol = 2e-3 if positions.max() > 1000 else 2e-5
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=atol)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=atol)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_hf_config_round_trips_unchanged(name):
    _, cfg, _ = CONFIGS[name]
    original = copy.deepcopy(cfg)
    assert hf.to_hf(hf.from_hf(cfg), like=cfg) == original
    assert cfg == original  # from_hf/to_hf never mutate their input


@pytest.mark.parametrize("name", list(CONFIGS))
def test_canonical_hf_output_loads_in_transformers_with_the_same_frequencies(name):
    cls, cfg, lengths = CONFIGS[name]
    kwargs = hf.from_hf(cfg)
    written = hf.to_hf(kwargs)
    assert "rope_parameters" in written and "rope_scaling" not in written
    assert hf.to_hf(hf.from_hf(written)) == written  # canonical form is a fixed point
    full = {**{k: v for k, v in cfg.items() if k in ("hidden_size", "num_attention_heads")}, **written}
    for seq_len in lengths:
        try:
            want_freq, want_scale = hf_frequencies(cls, full, seq_len)
        except RuntimeError as exc:  # transformers 5.0's longrope ignores a partial rotary factor
            if transformers.__version__ == LOCKED_TRANSFORMERS:
                raise
            pytest.skip(f"transformers {transformers.__version__} cannot compute this config itself: {exc}")
        got_freq, got_scale = posenc_frequencies(cfg, seq_len)
        torch.testing.assert_close(got_freq, want_freq.double(), rtol=RTOL, atol=0)
        assert got_scale == pytest.approx(float(want_scale), rel=RTOL)


def test_to_hf_takes_values_from_posenc_and_places_from_the_template():
    _, cfg, _ = CONFIGS["linear_legacy_type"]
    kwargs = hf.from_hf(cfg)
    kwargs["scaling"] = {"rope_type": "linear", "factor": 8.0}
    kwargs["base"] = 50000.0
    out = hf.to_hf(kwargs, like=cfg)
    assert out["rope_scaling"] == {"type": "linear", "factor": 8.0}
    assert out["rope_theta"] == 50000.0 and "rope_parameters" not in out


def test_from_hf_reads_a_transformers_config_object_and_a_json_file(tmp_path):
    import json

    _, cfg, _ = CONFIGS["yarn"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_file = hf.from_hf(str(path))
    from_object = hf.from_hf(LlamaConfig(**copy.deepcopy(cfg)))
    assert from_file == hf.from_hf(cfg)
    assert from_object["scaling"] == from_file["scaling"]
    assert from_object["head_dim"] == 128 and from_object["base"] == 10000.0


@pytest.mark.parametrize(
    "cfg,match",
    [
        ({**LLAMA, "rope_scaling": {"type": "linear", "rope_type": "yarn", "factor": 2.0}}, "must agree"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "head_dim"),
        ({**LLAMA, "rope_scaling": {"type": "linear", "factor": 0.5}}, "factor"),
        ({**LLAMA, "rope_scaling": {"type": "linear", "factr": 2.0}}, "factr"),
        ({**LLAMA, "rope_scaling": {"type": "yarm", "factor": 2.0}}, "did you mean 'yarn'"),
        (
            {
                **LLAMA,
                "max_position_embeddings": 2048,
                "rope_scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024},
            },
            "max_position_embeddings",
        ),
        (
            {
                **LLAMA,
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0],
                    "long_factor": [1.0],
                    "original_max_position_embeddings": 8,
                },
            },
            "short_factor",
        ),
    ],
)
def test_from_hf_rejects_bad_configs_naming_the_key(cfg, match):
    with pytest.raises(ValueError, match=match):
        hf.from_hf(cfg)


def test_to_hf_rejects_what_hf_cannot_represent():
    with pytest.raises(ValueError, match="layout"):
        hf.to_hf({"head_dim": 64, "layout": "interleaved"})
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024}
    with pytest.raises(ValueError, match="max_position_embeddings"):
        hf.to_hf({"head_dim": 64, "scaling": scaling, "max_position_embeddings": 4096})
    with pytest.raises(ValueError, match="unknown RoPE key"):
        hf.to_hf({"head_dim": 64, "theta": 3.0})


def test_posenc_build_accepts_from_hf_output():
    enc = posenc.build("rope", **hf.from_hf(CONFIGS["default_partial"][1]))
    assert enc.rotary_dim == 32


def test_to_hf_accepts_a_rope_config_dict():
    enc = posenc.build(
        "rope", head_dim=64, rotary_dim=32, base=5e5, scaling={"rope_type": "linear", "factor": 2.0}
    )
    out = hf.to_hf(enc.config.to_dict())
    assert out["rope_parameters"] == {
        "rope_type": "linear",
        "factor": 2.0,
        "rope_theta": 5e5,
        "partial_rotary_factor": 0.5,
    }
    assert out["head_dim"] == 64
    back = hf.from_hf(out)
    assert back["partial_rotary_factor"] == 0.5 and back["scaling"] == {"rope_type": "linear", "factor": 2.0}


def _scalings(factor: float, original: int, pairs: int) -> list[dict | None]:
    return [
        None,
        {"rope_type": "linear", "factor": factor},
        {"rope_type": "dynamic", "factor": factor},
        {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original, "beta_fast": 16.0},
        {"rope_type": "llama3", "factor": factor, "original_max_position_embeddings": original,
         "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        {"rope_type": "longrope", "short_factor": [1.0] * pairs, "long_factor": [factor] * pairs,
         "original_max_position_embeddings": original},
    ]  # fmt: skip


@given(
    head_dim=st.sampled_from([16, 64, 128]),
    partial=st.sampled_from([0.25, 0.5, 1.0]),
    base=st.sampled_from([10000.0, 5e5]),
    factor=st.floats(1.0, 32.0),
    original=st.sampled_from([512, 4096]),
    which=st.integers(0, 5),
)
def test_posenc_config_survives_hf_and_back(head_dim, partial, base, factor, original, which):
    scaling = _scalings(factor, original, int(head_dim * partial) // 2)[which]
    kwargs = {"head_dim": head_dim, "base": base, "partial_rotary_factor": partial,
              "scaling": scaling, "max_position_embeddings": 4 * original}  # fmt: skip
    written = hf.to_hf(kwargs)
    back = hf.from_hf(written)
    resolved = rope_scaling.resolve(scaling, max_position_embeddings=4 * original)
    assert back == {**kwargs, "scaling": resolved}
    assert hf.to_hf(back, like=written) == written


def test_every_rope_type_of_transformers_has_parity_or_is_named_unsupported():
    """transformers' rope types (5.24 added 'proportional') each either map to a posenc scaling with
    parity (the tests above) or are listed, with what they are, and refused by name."""
    from posenc.encoding.rotary.scaling import ROPE_SCALINGS

    for rope_type in ROPE_INIT_FUNCTIONS:
        assert rope_type in ROPE_SCALINGS or rope_type in posenc.hf.UNSUPPORTED_ROPE_TYPES, rope_type
    for rope_type in posenc.hf.UNSUPPORTED_ROPE_TYPES:
        config = {**LLAMA, "rope_parameters": {"rope_type": rope_type, "rope_theta": 1e4}}
        with pytest.raises(
            posenc.PosencError, match=f"rope_type '{rope_type}' .* is not implemented by posenc"
        ):
            posenc.hf.from_hf(config)
