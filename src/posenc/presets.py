"""Real-model presets: the positional encoding of well-known checkpoints, as posenc configs.

Introductions to positional encoding often end with a table "position encoding in
practice" (BERT learned 512, GPT-2 learned 1024, LLaMA RoPE, ...). ``PRESETS`` is that
table made exact: each
entry names a registered encoding, its config, the model dimensions it is built
for and the Hugging Face ``config.json`` the numbers were read from::

    enc = posenc.presets.build("llama-3.1")          # RoPE, head_dim 128, llama3 scaling
    enc = posenc.presets.build("gpt2", max_len=2048)  # overrides win

Every number below is a fact of the cited config (or of the model code where the
config does not say it, e.g. GPT-J's interleaved pairs); nothing is tuned.
Dimensions: ``d_model`` is the hidden size, ``head_dim`` the per-head size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.base import PositionalEncoding, did_you_mean
from posenc.errors import PosencError, PosencTypeError
from posenc.registry import build_for_model


@dataclass(frozen=True)
class Preset:
    encoding: str  # registry name in posenc.ENCODINGS
    config: dict[str, Any]  # encoding config without the model dims (dim / head_dim / num_heads)
    d_model: int  # hidden size
    num_heads: int  # attention (query) heads
    head_dim: int | None  # per-head size; None -> d_model // num_heads
    max_positions: int | None  # context length the config declares (None: none declared, ALiBi)
    layout: str  # where the encoding acts / architecture, in words
    source: str  # URL of the config the numbers come from
    paper: str  # the model's paper
    note: str  # one line

    def to_dict(self) -> dict[str, Any]:
        """Everything but the derived fields, JSON-ready."""
        return {
            "encoding": self.encoding,
            "config": dict(self.config),
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim if self.head_dim is not None else self.d_model // self.num_heads,
            "max_positions": self.max_positions,
            "layout": self.layout,
            "source": self.source,
            "paper": self.paper,
            "note": self.note,
        }


HF = "https://huggingface.co/{}/blob/main/config.json"

PRESETS: dict[str, Preset] = {
    # --- learned absolute tables ---
    "bert": Preset(
        encoding="learned",
        config={"max_len": 512},
        d_model=768,
        num_heads=12,
        head_dim=64,
        max_positions=512,
        layout="encoder; learned table added to token + segment embeddings",
        source=HF.format("google-bert/bert-base-uncased"),
        paper="Devlin et al. 2019, BERT, https://arxiv.org/abs/1810.04805",
        note="bert-base: max_position_embeddings 512, position_embedding_type 'absolute'",
    ),
    "gpt2": Preset(
        encoding="learned",
        config={"max_len": 1024},
        d_model=768,
        num_heads=12,
        head_dim=64,
        max_positions=1024,
        layout="causal decoder; learned table (wpe) added to token embeddings",
        source=HF.format("openai-community/gpt2"),
        paper="Radford et al. 2019, Language Models are Unsupervised Multitask Learners, "
        "https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf",
        note="gpt2 (124M): n_positions 1024, n_embd 768, n_head 12",
    ),
    # --- bias ---
    "t5": Preset(
        encoding="t5",
        config={"bidirectional": True, "num_buckets": 32, "max_distance": 128},
        d_model=768,
        num_heads=12,
        head_dim=64,
        max_positions=None,
        layout="encoder-decoder; one bucketed bias table per stack, shared across its layers "
        "(bidirectional in the encoder, causal in the decoder)",
        source=HF.format("google-t5/t5-base"),
        paper="Raffel et al. 2020, T5, https://arxiv.org/abs/1910.10683",
        note="t5-base: relative_attention_num_buckets 32, max distance 128 (T5Config default); "
        "encoder preset, bidirectional=False gives the decoder's",
    ),
    "bloom": Preset(
        encoding="alibi",
        config={"bidirectional": False},
        d_model=14336,
        num_heads=112,
        head_dim=128,
        max_positions=None,
        layout="causal decoder; ALiBi bias on attention logits, no position embedding",
        source=HF.format("bigscience/bloom"),
        paper="BigScience 2022, BLOOM, https://arxiv.org/abs/2211.05100",
        note="bloom (176B): hidden_size 14336, n_head 112 (not a power of two: ALiBi's interleaved slopes)",
    ),
    "mpt": Preset(
        encoding="alibi",
        config={"bidirectional": False},
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=2048,
        layout="causal decoder; ALiBi bias on attention logits, no position embedding",
        source=HF.format("mosaicml/mpt-7b"),
        paper="MosaicML 2023, Introducing MPT-7B, https://www.databricks.com/blog/mpt-7b",
        note="mpt-7b: attn_config alibi true, alibi_bias_max 8 (slopes 2^(-8h/H)), max_seq_len 2048",
    ),
    # --- rotary ---
    "gpt-neox": Preset(
        encoding="rope",
        config={
            "base": 10000.0,
            "layout": "half",
            "partial_rotary_factor": 0.25,
            "max_position_embeddings": 2048,
        },
        d_model=6144,
        num_heads=64,
        head_dim=96,
        max_positions=2048,
        layout="causal decoder; RoPE on the first 25 % of each head (24 of 96 dims), rotate_half pairs",
        source=HF.format("EleutherAI/gpt-neox-20b"),
        paper="Black et al. 2022, GPT-NeoX-20B, https://arxiv.org/abs/2204.06745",
        note="gpt-neox-20b: rotary_pct 0.25, rotary_emb_base 10000",
    ),
    "gpt-j": Preset(
        encoding="rope",
        config={"base": 10000.0, "layout": "interleaved", "rotary_dim": 64, "max_position_embeddings": 2048},
        d_model=4096,
        num_heads=16,
        head_dim=256,
        max_positions=2048,
        layout="causal decoder; RoPE on the first 64 of 256 dims per head, interleaved (rotate_every_two) pairs",
        source=HF.format("EleutherAI/gpt-j-6b"),
        paper="Wang & Komatsuzaki 2021, GPT-J-6B, https://github.com/kingoflolz/mesh-transformer-jax",
        note="gpt-j-6b: rotary_dim 64, n_positions 2048; interleaved pairs from the model code (rotate_every_two)",
    ),
    "llama-2": Preset(
        encoding="rope",
        config={"base": 10000.0, "layout": "half", "max_position_embeddings": 4096},
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=4096,
        layout="causal decoder; RoPE on all 128 dims (HF checkpoints use rotate_half pairs)",
        source=HF.format("meta-llama/Llama-2-7b-hf"),
        paper="Touvron et al. 2023, Llama 2, https://arxiv.org/abs/2307.09288",
        note="Llama-2-7b: max_position_embeddings 4096, base 10000 (rope_theta, HF's default when absent)",
    ),
    "llama-3.1": Preset(
        encoding="rope",
        config={
            "base": 500000.0,
            "layout": "half",
            "max_position_embeddings": 131072,
            "scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=131072,
        layout="causal decoder; RoPE with llama3 frequency-band scaling (8k -> 128k)",
        source=HF.format("meta-llama/Llama-3.1-8B"),
        paper="Meta 2024, The Llama 3 Herd of Models, https://arxiv.org/abs/2407.21783",
        note="Llama-3.1-8B: rope_theta 500000, llama3 factor 8, low 1, high 4, original 8192",
    ),
    "mistral-7b": Preset(
        encoding="rope",
        config={"base": 10000.0, "layout": "half", "max_position_embeddings": 32768},
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=32768,
        layout="causal decoder; RoPE on all 128 dims, sliding-window attention (4096)",
        source=HF.format("mistralai/Mistral-7B-v0.1"),
        paper="Jiang et al. 2023, Mistral 7B, https://arxiv.org/abs/2310.06825",
        note="Mistral-7B-v0.1: rope_theta 10000, sliding_window 4096 (v0.2 raised rope_theta to 1e6)",
    ),
    "qwen2": Preset(
        encoding="rope",
        config={"base": 1000000.0, "layout": "half", "max_position_embeddings": 32768},
        d_model=3584,
        num_heads=28,
        head_dim=128,
        max_positions=32768,
        layout="causal decoder; RoPE on all 128 dims, base 1e6",
        source=HF.format("Qwen/Qwen2-7B-Instruct"),
        paper="Yang et al. 2024, Qwen2 Technical Report, https://arxiv.org/abs/2407.10671",
        note="Qwen2-7B-Instruct: rope_theta 1000000, rope_scaling null (YaRN is opt-in for 128k)",
    ),
}


def get(name: str) -> Preset:
    """The preset ``name``; unknown names raise ValueError suggesting the closest."""
    if not isinstance(name, str):
        raise PosencTypeError(f"preset name must be a string, got {type(name).__name__}")
    if name not in PRESETS:
        hint = did_you_mean(name, PRESETS, cutoff=0.4)
        raise PosencError(f"unknown preset {name!r}{hint} (valid: {', '.join(PRESETS)})")
    return PRESETS[name]


def build(name: str, **overrides: Any) -> PositionalEncoding:
    """Build preset ``name``'s encoding for the model's dims; ``overrides`` replace config fields.

    ``posenc.presets.build("llama-3.1")`` is ``posenc.build("rope", head_dim=128,
    base=500000.0, scaling={...}, ...)``; ``build("bert", max_len=1024)`` changes one field.
    """
    preset = get(name)
    config = {**preset.config, **overrides}
    return build_for_model(
        preset.encoding,
        d_model=preset.d_model,
        num_heads=preset.num_heads,
        head_dim=preset.head_dim,
        **config,
    )


def list_presets() -> list[dict[str, Any]]:
    """One JSON-ready row per preset (name first)."""
    return [{"name": name, **preset.to_dict()} for name, preset in PRESETS.items()]


__all__ = ["PRESETS", "Preset", "build", "get", "list_presets"]
