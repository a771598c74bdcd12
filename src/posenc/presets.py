"""Real-model presets: the positional encoding of well-known checkpoints, as posenc configs.

Introductions to positional encoding often end with a table "position encoding in
practice" (BERT learned 512, GPT-2 learned 1024, LLaMA RoPE, ...). ``PRESETS`` is that
table made exact: each
entry names a registered encoding, its config, the model dimensions it is built
for and the Hugging Face ``config.json`` the numbers were read from::

    enc = posenc.presets.build("llama-3.1")          # RoPE, head_dim 128, llama3 scaling
    enc = posenc.presets.build("gpt2", max_len=2048)  # overrides win
    layers = posenc.presets.schedule("llama-4-scout")  # Llama 4's RoPE, NoPE every 4th layer

Models whose layers differ (Llama 4, Gemma 3) record the pattern as a
:mod:`posenc.schedules` builder; ``config`` is then the main layers' encoding (RoPE layers,
global layers).

Every number below is a fact of the cited config (or of the model code where the
config does not say it, e.g. GPT-J's interleaved pairs, or of the paper where no
config was published: the original Transformer, GPT-3); nothing is tuned.
Dimensions: ``d_model`` is the hidden size, ``head_dim`` the per-head size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.checks import check_int, did_you_mean
from posenc.encoding import PositionalEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.registry import build_for_model
from posenc.schedules import SCHEDULES, Schedule, uniform


@dataclass(frozen=True)
class Preset:
    encoding: str  # registry name in posenc.ENCODINGS
    config: dict[str, Any]  # encoding config without the model dims (dim / head_dim / num_heads)
    d_model: int  # hidden size
    num_heads: int  # attention (query) heads
    head_dim: int | None  # per-head size; None -> d_model // num_heads
    max_positions: int | None  # context length the config declares (None: none declared, ALiBi)
    layout: str  # where the encoding acts / architecture, in words
    source: str  # URL of the config the numbers come from (the paper's, where none was published)
    paper: str  # the model's paper
    note: str  # one line
    num_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: num_heads
    num_layers: int | None = None  # decoder layers (None: not recorded)
    # Per-layer pattern: (a builder in posenc.schedules.SCHEDULES, its keyword arguments);
    # None: `encoding` + `config` in every layer. With a pattern, `config` is the main layers'.
    layers: tuple[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Everything but the derived fields, JSON-ready."""
        return {
            "encoding": self.encoding,
            "config": dict(self.config),
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads if self.num_kv_heads is not None else self.num_heads,
            "head_dim": self.head_dim if self.head_dim is not None else self.d_model // self.num_heads,
            "num_layers": self.num_layers,
            "layers": None if self.layers is None else {"builder": self.layers[0], **self.layers[1]},
            "max_positions": self.max_positions,
            "layout": self.layout,
            "source": self.source,
            "paper": self.paper,
            "note": self.note,
        }


HF = "https://huggingface.co/{}/blob/main/config.json"

# Llama-4-Scout-17B-16E text_config: RoPE layers (every layer but each 4th).
LLAMA4_ROPE: dict[str, Any] = {
    "base": 500000.0,
    "layout": "interleaved",  # transformers' Llama 4 rotates (2i, 2i+1) pairs as complex numbers
    "max_position_embeddings": 10485760,
    "scaling": {
        "rope_type": "llama3",
        "factor": 16.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
}
# gemma-3-12b-it text_config: the global (full-attention) layers.
GEMMA3_GLOBAL: dict[str, Any] = {
    "base": 1000000.0,
    "layout": "half",
    "max_position_embeddings": 131072,
    "scaling": {"rope_type": "linear", "factor": 8.0},
}
# Phi-3.5-mini-instruct rope_scaling (longrope): one factor per rotated pair (head_dim 96 -> 48).
PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
    1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
    4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
    17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
    50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
    62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
    63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
    64.51000213623047, 64.52999877929688, 64.83999633789062,
]  # fmt: skip
PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979,
    1.0999999046325684, 1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662,
    1.2899998426437378, 1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533,
    2.729999542236328, 2.749999523162842, 2.8399994373321533,
]  # fmt: skip

PRESETS: dict[str, Preset] = {
    # --- fixed sinusoids ---
    "transformer": Preset(
        encoding="sinusoidal",
        config={"base": 10000.0},
        d_model=512,
        num_heads=8,
        head_dim=64,
        max_positions=None,
        layout="encoder-decoder; sinusoids added to the token embeddings at the input of both stacks",
        source="https://arxiv.org/abs/1706.03762 (sec. 3.5 and Table 3, base model; no config file published)",
        paper="Vaswani et al. 2017, Attention Is All You Need, https://arxiv.org/abs/1706.03762",
        note="base model: N 6 (encoder and decoder each), d_model 512, h 8, d_k 64; "
        "PE(pos, 2i) = sin(pos / 10000^(2i/d_model))",
        num_layers=6,
    ),
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
    "gpt3": Preset(
        encoding="learned",
        config={"max_len": 2048},
        d_model=12288,
        num_heads=96,
        head_dim=128,
        max_positions=2048,
        layout="causal decoder; learned table added to token embeddings, as in GPT-2",
        source="https://arxiv.org/abs/2005.14165 (Table 2.1, GPT-3 175B; no config file published)",
        paper="Brown et al. 2020, Language Models are Few-Shot Learners, https://arxiv.org/abs/2005.14165",
        note="GPT-3 175B: n_ctx 2048, n_layers 96, d_model 12288, 96 heads of 128; "
        "same model and architecture as GPT-2 (sec. 2.1)",
        num_layers=96,
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
    "llama-1": Preset(
        encoding="rope",
        config={"base": 10000.0, "layout": "half", "max_position_embeddings": 2048},
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=2048,
        layout="causal decoder; RoPE on all 128 dims (HF checkpoints use rotate_half pairs)",
        source=HF.format("huggyllama/llama-7b"),
        paper="Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, "
        "https://arxiv.org/abs/2302.13971",
        note="LLaMA-7B: max_position_embeddings 2048, base 10000 (HF's default when rope_theta is absent); "
        "Meta's own code pairs dimensions interleaved, the HF conversion permutes q/k weights to match",
        num_layers=32,
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
        num_kv_heads=8,
        num_layers=32,
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
        num_kv_heads=8,
        num_layers=32,
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
        num_kv_heads=4,
        num_layers=28,
    ),
    "llama-3.2-1b": Preset(
        encoding="rope",
        config={
            "base": 500000.0,
            "layout": "half",
            "max_position_embeddings": 131072,
            "scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        d_model=2048,
        num_heads=32,
        head_dim=64,
        max_positions=131072,
        layout="causal decoder; RoPE with llama3 frequency-band scaling (8k -> 128k), grouped-query attention",
        source=HF.format("meta-llama/Llama-3.2-1B"),
        paper="Meta 2024, The Llama 3 Herd of Models, https://arxiv.org/abs/2407.21783",
        note="Llama-3.2-1B: rope_theta 500000, llama3 factor 32 (8 in 3.1), low 1, high 4, original 8192",
        num_kv_heads=8,
        num_layers=16,
    ),
    "llama-4-scout": Preset(
        encoding="rope",
        config=LLAMA4_ROPE,
        d_model=5120,
        num_heads=40,
        head_dim=128,
        max_positions=10485760,
        layout="causal MoE decoder; iRoPE: NoPE in every 4th layer, RoPE (interleaved pairs, llama3 scaling) "
        "with chunked attention (8192) elsewhere",
        source=HF.format("meta-llama/Llama-4-Scout-17B-16E"),
        paper="Meta 2025, The Llama 4 herd, https://ai.meta.com/blog/llama-4-multimodal-intelligence/",
        note="Llama-4-Scout text_config: rope_theta 500000, llama3 factor 16 with low = high = 1 (no blended "
        "band), original 8192; no_rope_layer_interval 4 (transformers' default; layers 3, 7, ... are NoPE); "
        "NoPE layers also scale queries by log(floor((pos + 1) / 8192) + 1) * 0.1 + 1 (attn_temperature_tuning), "
        "an attention change outside posenc's encoding",
        num_kv_heads=8,
        num_layers=48,
        layers=("irope", {"nope_every": 4, **LLAMA4_ROPE}),
    ),
    "gemma-3-12b": Preset(
        encoding="rope",
        config=GEMMA3_GLOBAL,
        d_model=3840,
        num_heads=16,
        head_dim=256,
        max_positions=131072,
        layout="causal decoder; 5 local (sliding window 1024) layers per global one; RoPE base 1e4 on local "
        "layers, base 1e6 with linear scaling 8 on global layers",
        source=HF.format("google/gemma-3-12b-it"),
        paper="Gemma Team 2025, Gemma 3 Technical Report, https://arxiv.org/abs/2503.19786",
        note="gemma-3-12b text_config: rope_theta 1000000 + rope_scaling linear 8 (global layers), "
        "rope_local_base_freq 10000 (local layers), sliding_window_pattern 6, head_dim 256 (not d_model / heads), "
        "query_pre_attn_scalar 256",
        num_kv_heads=8,
        num_layers=48,
        layers=(
            "local_global",
            {
                "global_every": 6,
                "local_base": 10000.0,
                "global_base": 1000000.0,
                "global_scaling": GEMMA3_GLOBAL["scaling"],
                "layout": "half",
                "max_position_embeddings": 131072,
            },
        ),  # fmt: skip
    ),
    "phi-3.5-mini": Preset(
        encoding="rope",
        config={
            "base": 10000.0,
            "layout": "half",
            "max_position_embeddings": 131072,
            "scaling": {
                "rope_type": "longrope",
                "short_factor": PHI35_SHORT,
                "long_factor": PHI35_LONG,
                "original_max_position_embeddings": 4096,
            },
        },
        d_model=3072,
        num_heads=32,
        head_dim=96,
        max_positions=131072,
        layout="causal decoder; RoPE with LongRoPE per-pair factors (short up to 4096 tokens, long beyond)",
        source=HF.format("microsoft/Phi-3.5-mini-instruct"),
        paper="Abdin et al. 2024, Phi-3 Technical Report, https://arxiv.org/abs/2404.14219",
        note="Phi-3.5-mini-instruct: rope_scaling longrope (48 short / 48 long factors), "
        "original_max_position_embeddings 4096, max 131072: factor 32 inferred, attention factor "
        "sqrt(1 + ln 32 / ln 4096) = 1.19",
        num_kv_heads=32,
        num_layers=32,
    ),
    "deepseek-v3": Preset(
        encoding="rope",
        config={
            "base": 10000.0,
            "layout": "interleaved",
            "max_position_embeddings": 163840,
            "scaling": {
                "rope_type": "yarn",
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        },
        d_model=7168,
        num_heads=128,
        head_dim=64,
        max_positions=163840,
        layout="causal MoE decoder, multi-head latent attention: YaRN-scaled RoPE on a 64-dim part of each "
        "192-dim query/key head (qk_rope_head_dim), interleaved pairs",
        source=HF.format("deepseek-ai/DeepSeek-V3"),
        paper="DeepSeek-AI 2024, DeepSeek-V3 Technical Report, https://arxiv.org/abs/2412.19437",
        note="DeepSeek-V3: qk_rope_head_dim 64 (the rotated part of each head), rope_theta 10000, "
        "yarn factor 40, original 4096, beta_fast 32, beta_slow 1, "
        "mscale = mscale_all_dim = 1 (attention factor 1); the softmax scale is multiplied by "
        "(0.1 ln 40 + 1)^2 = 1.87 in attention, outside the encoding",
        num_kv_heads=128,
        num_layers=61,
    ),
    "qwen3-8b": Preset(
        encoding="rope",
        config={"base": 1000000.0, "layout": "half", "max_position_embeddings": 40960},
        d_model=4096,
        num_heads=32,
        head_dim=128,
        max_positions=40960,
        layout="causal decoder; RoPE on all 128 dims, base 1e6, q/k RMSNorm before rotation",
        source=HF.format("Qwen/Qwen3-8B"),
        paper="Yang et al. 2025, Qwen3 Technical Report, https://arxiv.org/abs/2505.09388",
        note="Qwen3-8B: rope_theta 1000000, rope_scaling null, max_position_embeddings 40960 "
        "(the model card's 131072-token setting adds YaRN factor 4 over 32768)",
        num_kv_heads=8,
        num_layers=36,
    ),
    # --- relative ---
    "transformer-xl": Preset(
        encoding="transformer_xl",
        config={"base": 10000.0},
        d_model=1024,
        num_heads=16,
        head_dim=64,
        max_positions=None,
        layout="causal decoder with segment recurrence; sinusoid of i - j projected per layer, "
        "learned global biases u, v",
        source=HF.format("transfo-xl/transfo-xl-wt103"),
        paper="Dai et al. 2019, Transformer-XL, https://arxiv.org/abs/1901.02860",
        note="transfo-xl-wt103: d_model 1024, n_head 16, d_head 64, mem_len 1600; its clamp_len 1000 "
        "(distances past 1000 use the sinusoid of 1000) is not modelled here",
        num_layers=18,
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


def schedule(name: str, num_layers: int | None = None) -> Schedule:
    """Preset ``name``'s encoding per layer, for its own layer count or ``num_layers`` (the
    pattern repeats: ``schedule("llama-4-scout", 8)`` has NoPE in layers 3 and 7).

    Without a per-layer pattern every layer gets the preset's encoding and config. Every
    layer carries the preset's whole set-up, not only its pattern: ``"llama-4-scout"`` is NoPE
    in every 4th layer *and* Llama 4's RoPE elsewhere (base 500000, llama3 scaling,
    interleaved pairs). With :func:`posenc.hf.apply` it therefore replaces a model's own RoPE
    base and scaling, and a model whose pairs are laid out otherwise refuses it; for the
    pattern alone, keeping the model's RoPE, use the builder (``schedules.irope(n)``). Use it
    in a :class:`~posenc.model.TransformerConfig` or with :func:`posenc.hf.apply`.
    """
    preset = get(name)
    if num_layers is None:
        if preset.num_layers is None:
            raise PosencError(f"preset {name!r} records no layer count; pass num_layers")
        num_layers = preset.num_layers
    if preset.layers is None:
        return uniform(num_layers, preset.encoding, **preset.config)
    builder, kwargs = preset.layers
    return SCHEDULES[builder].fn(num_layers, **kwargs)


def kv_heads(name: str, num_heads: int) -> int:
    """Key/value heads for a model with ``num_heads`` query heads and preset ``name``'s grouping:
    ``num_heads`` divided by the preset's query heads per key/value head (Llama 3.1: 32 / 8 = 4
    per group, so 4 heads -> 1). Raises when ``num_heads`` is not a multiple of the group size."""
    preset = get(name)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    groups = preset.num_heads // (preset.num_kv_heads or preset.num_heads)
    if num_heads % groups:
        raise PosencError(
            f"preset {name!r} has {groups} query heads per key/value head "
            f"({preset.num_heads} / {preset.num_kv_heads}); num_heads={num_heads} is not a multiple of it"
        )
    return num_heads // groups


def list_presets() -> list[dict[str, Any]]:
    """One JSON-ready row per preset (name first)."""
    return [{"name": name, **preset.to_dict()} for name, preset in PRESETS.items()]


__all__ = ["PRESETS", "Preset", "build", "get", "kv_heads", "list_presets", "schedule"]
