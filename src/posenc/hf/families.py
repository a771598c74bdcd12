"""The transformers model families posenc has verified, and how each one takes its rotary tables.

Every transformers model with RoPE computes its rotation tables once per forward pass in one
module, the model's rotary embedding (``model.model.rotary_emb``, ``transformer.rotary_emb``,
...: ``(x, position_ids[, layer_type]) -> tables``), and every attention layer rotates its
queries and keys with those tables, in the family's own code. That module is the seam
:func:`posenc.hf.apply` uses: posenc stands in for it and hands over tables in the family's
format, computed from integer positions in float64; the family's attention code then does
exactly what it always does. The families differ only in the format of those tables:

========  =====================================================  ===================================
format    tables                                                 families
========  =====================================================  ===================================
cat       ``(cat(cos, cos), cat(sin, sin))``, ``(b, n, r)``        Llama, Mistral, Qwen2/3, Phi-3, ...
repeat    ``(cos, sin)`` with each angle repeated twice in place   Cohere
sin_cos   ``(sin, cos)``, ``(b, n, r/2)`` each                     GPT-J
complex   ``exp(i angle)``, complex64 ``(b, n, r/2)``              Llama 4
========  =====================================================  ===================================

(``r`` is the rotated size per head: the whole head, or the leading ``partial_rotary_factor``
share of it, or DeepSeek-V3's ``qk_rope_head_dim``.) Which pairs a family rotates
(``"half"``: ``(x_i, x_{i+r/2})``; ``"interleaved"``: ``(x_{2i}, x_{2i+1})``) is its
``layout``; an encoding given to :func:`posenc.hf.apply` must have the family's layout and
rotated size, since the model's weights were trained with them.

A family is listed here only once its checks pass (the model's own logits, greedy generation
with and without the KV cache, left padding, ``remove`` bit-exact, ``torch.compile``):
``tests/hf/test_hf_models.py`` runs them for every row of :data:`FAMILIES` and
``scripts/hf_support.py`` writes the table of docs/hf-support.md from a run of them. Every
other family is refused by name at :func:`posenc.hf.apply`, and at every apply posenc also
calls the model's own rotary embedding once and checks that its tables equal posenc's for the
model's config: a transformers release that changes a family's tables is refused, never run
with silently wrong logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posenc.core.errors import PosencError

FORMATS = ("cat", "repeat", "sin_cos", "complex")

# The transformers releases the checks were run on (docs/hf-support.md); posenc.hf warns
# outside this range. constraints.txt pins the newest for the test environment.
TESTED_TRANSFORMERS = ("5.0.0", "5.24.0")

# The small config every family's checks build on (random weights, no download).
_SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=97, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    """One verified transformers family: how its rotary tables look and what it allows."""

    label: str  # the family's name in messages and docs ("Llama")
    model_class: str  # its causal LM class in transformers ("LlamaForCausalLM")
    config_class: str  # its (text) config class ("LlamaConfig")
    tables: str = "cat"  # one of FORMATS
    layout: str = "half"  # the pairs its rotation takes ("half" | "interleaved")
    # How posenc's RoPE reads this family's config when posenc.hf.from_hf alone cannot:
    # fn(config dict) -> RoPE keyword arguments overriding from_hf's.
    rope_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    layout_from: str | None = None  # a boolean config key that switches the layout to "interleaved"
    # Layer types whose rotary tables differ (Gemma 3: rotary_emb(x, position_ids, layer_type));
    # a flat scaling goes to scaled_layer_type only, as the family's config does.
    layer_types: bool = False
    scaled_layer_type: str | None = None
    no_bias: str | None = None  # why bias encodings cannot run in it (None: through AttentionInterface)
    rotary_layers_key: str | None = None  # config list: 1 = the layer rotates (Llama 4's no_rope_layers)
    rescaling: str | None = None  # why set_scaling is refused (None: allowed)
    small: dict[str, Any] = field(default_factory=dict)  # small config for the checks
    note: str = ""  # what is special, for docs
    since: str | None = None  # the first transformers release with the seam (None: every tested one)
    since_why: str = "its rotary tables come from one rotary embedding module there"  # why ``since``
    # The posenc encoding the model's own RoPE is (rope_config then gives all its arguments), and
    # the axes of its position ids: Qwen2-VL's M-RoPE takes (t, h, w) per token, as (3, b, n).
    encoding: str = "rope"
    axes: int = 1

    def layout_of(self, config: dict[str, Any]) -> str:
        """The pair layout of a model of this family with ``config``."""
        if self.layout_from is not None and config.get(self.layout_from):
            return "interleaved"
        return self.layout

    def small_config(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments of a small config of this family (checks and conformance)."""
        return {**_SMALL, **self.small, **overrides}


def _gptj(config: dict[str, Any]) -> dict[str, Any]:
    head_dim = int(config["n_embd"]) // int(config["n_head"])
    rotary = config.get("rotary_dim") or head_dim  # GPT-J: base 10000, no scaling in its config
    return {"head_dim": head_dim, "partial_rotary_factor": 1.0, "rotary_dim": rotary, "base": 10000.0,
            "scaling": None, "max_position_embeddings": config.get("n_positions")}  # fmt: skip


def _mrope(config: dict[str, Any]) -> dict[str, Any]:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise PosencError(f"posenc's M-RoPE has no context-extension scaling; the config has {rope!r}")
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    section = rope.get("mrope_section", [16, 24, 24])  # transformers' default (Qwen2-VL-7B's)
    return {
        "head_dim": head_dim,
        "base": float(rope.get("rope_theta", 10000.0)),
        "mrope_section": list(section),
    }


def _mla(config: dict[str, Any]) -> dict[str, Any]:
    return {"head_dim": int(config["qk_rope_head_dim"])}  # MLA rotates a separate block of this size


_GPTJ_SMALL = dict(
    n_embd=64, n_layer=3, n_head=4, rotary_dim=8, vocab_size=97, n_positions=256, pad_token_id=0,
    bos_token_id=1, eos_token_id=2,
)  # fmt: skip
_EXPERTS = dict(
    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32
)
_MOE_SMALL = dict(
    n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=32
)

FAMILIES: dict[str, Family] = {
    "llama": Family("Llama", "LlamaForCausalLM", "LlamaConfig"),
    "mistral": Family("Mistral", "MistralForCausalLM", "MistralConfig", small={"sliding_window": 12}),
    "qwen2": Family("Qwen2", "Qwen2ForCausalLM", "Qwen2Config", note="q/k/v biases"),
    "qwen3": Family("Qwen3", "Qwen3ForCausalLM", "Qwen3Config", small={"head_dim": 16}, note="q/k norms"),
    "qwen2_moe": Family("Qwen2-MoE", "Qwen2MoeForCausalLM", "Qwen2MoeConfig", small=_EXPERTS),
    "qwen3_moe": Family(
        "Qwen3-MoE", "Qwen3MoeForCausalLM", "Qwen3MoeConfig", small={"head_dim": 16, **_EXPERTS}
    ),
    "mixtral": Family("Mixtral", "MixtralForCausalLM", "MixtralConfig", small={"num_local_experts": 4}),
    "ministral": Family("Ministral", "MinistralForCausalLM", "MinistralConfig", small={"head_dim": 16}),
    "starcoder2": Family("StarCoder2", "Starcoder2ForCausalLM", "Starcoder2Config"),
    "smollm3": Family(
        "SmolLM3",
        "SmolLM3ForCausalLM",
        "SmolLM3Config",
        rotary_layers_key="no_rope_layers",
        small={"num_hidden_layers": 4},
        note="NoPE every 4th layer (no_rope_layers)",
    ),
    "helium": Family(
        "Helium",
        "HeliumForCausalLM",
        "HeliumConfig",
        layout="interleaved",
        small={"head_dim": 16},
        note="interleaved pairs from half-layout tables",
    ),
    "phi3": Family(
        "Phi-3",
        "Phi3ForCausalLM",
        "Phi3Config",
        small={"partial_rotary_factor": 0.5},
        note="partial rotary, sliced from the tables' width",
    ),
    "gemma": Family("Gemma", "GemmaForCausalLM", "GemmaConfig", small={"head_dim": 16}),
    "gemma2": Family(
        "Gemma 2",
        "Gemma2ForCausalLM",
        "Gemma2Config",
        small={"head_dim": 16},
        note="logit soft-capping: bias encodings only with attn_logit_softcapping=None",
    ),
    "gemma3_text": Family(
        "Gemma 3",
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        layer_types=True,
        scaled_layer_type="full_attention",
        small={"head_dim": 16, "sliding_window": 8},
        note="one rope dict per layer type; a flat scaling goes to full_attention layers, as in its config",
    ),
    "olmo2": Family("OLMo 2", "Olmo2ForCausalLM", "Olmo2Config", note="q/k norms over all heads"),
    "olmo": Family("OLMo", "OlmoForCausalLM", "OlmoConfig"),
    "olmoe": Family("OLMoE", "OlmoeForCausalLM", "OlmoeConfig", small=_EXPERTS),
    "granite": Family("Granite", "GraniteForCausalLM", "GraniteConfig"),
    "cohere": Family("Cohere", "CohereForCausalLM", "CohereConfig", tables="repeat", layout="interleaved"),
    "glm": Family(
        "GLM",
        "GlmForCausalLM",
        "GlmConfig",
        layout="interleaved",
        small={"head_dim": 16},
        note="interleaved pairs from half-layout tables, partial rotary (factor 0.5)",
    ),
    "glm4": Family(
        "GLM-4", "Glm4ForCausalLM", "Glm4Config", layout="interleaved", small={"head_dim": 16}, note="as GLM"
    ),
    "phi": Family("Phi", "PhiForCausalLM", "PhiConfig", note="partial rotary sliced in the model"),
    "stablelm": Family(
        "StableLM", "StableLmForCausalLM", "StableLmConfig", note="partial rotary sliced in the model"
    ),
    "gpt_neox": Family("GPT-NeoX", "GPTNeoXForCausalLM", "GPTNeoXConfig", note="partial rotary"),
    "falcon": Family(
        "Falcon",
        "FalconForCausalLM",
        "FalconConfig",
        no_bias="its attention does not run through transformers' AttentionInterface, where posenc adds bias encodings",
        small={"new_decoder_architecture": True, "num_kv_heads": 2},
        note="own attention code (no AttentionInterface): RoPE and NoPE only; alibi=True models have no RoPE",
    ),
    "gptj": Family(
        "GPT-J",
        "GPTJForCausalLM",
        "GPTJConfig",
        tables="sin_cos",
        layout="interleaved",
        rope_config=_gptj,
        small=_GPTJ_SMALL,
        since="5.24.0",
        note="interleaved, partial (rotary_dim); one rotary embedding module since transformers 5.24 "
        "(before, each attention layer held its own table)",
    ),
    "deepseek_v3": Family(
        "DeepSeek-V3",
        "DeepseekV3ForCausalLM",
        "DeepseekV3Config",
        rope_config=_mla,
        layout_from="rope_interleave",
        rescaling="DeepSeek-V3 also scales its attention softmax by its config's YaRN mscale when the model "
        "is built; a new scaling after loading would change the rotation only. Build the model with it",
        small={
            "kv_lora_rank": 16,
            "q_lora_rank": 32,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 16,
            "first_k_dense_replace": 1,
            "num_key_value_heads": 4,
            **_MOE_SMALL,
        },
        note="multi-head latent attention: RoPE on the qk_rope_head_dim block",
    ),  # fmt: skip
    "qwen2_vl_text": Family(
        "Qwen2-VL",
        "Qwen2VLTextModel",
        "Qwen2VLTextConfig",
        rope_config=_mrope,
        encoding="mrope",
        axes=3,
        no_bias="its position ids are (t, h, w) coordinates; posenc's bias encodings take sequence positions",
        since="5.24.0",
        since_why="its rotary embedding module applies mrope_section there; transformers 5.0 splits the sections "
        "inside each attention layer, which posenc has not verified",
        small={"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}},
        note="M-RoPE: (t, h, w) position ids per token, sections of the rotary pairs (mrope_section); the text "
        "model (no language-model head, so no generation checks)",
    ),
    "llama4_text": Family(
        "Llama 4",
        "Llama4ForCausalLM",
        "Llama4TextConfig",
        tables="complex",
        layout="interleaved",
        rotary_layers_key="no_rope_layers",
        small={"head_dim": 16, "num_local_experts": 2, "intermediate_size_mlp": 96},
        note="complex tables; its NoPE layers (no_rope_layers) never rotate",
    ),  # fmt: skip
}


def family_of(config: Any, model_name: str, transformers_version: str | None = None) -> tuple[str, Family]:
    """``(model_type, Family)`` of a model's config; refuses unverified families by name, and a
    family whose seam the installed transformers (``transformers_version``) does not have yet."""
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None or not isinstance(model_type, str):
        verified = ", ".join(f.label for f in FAMILIES.values())
        raise PosencError(
            f"posenc.hf has not verified {model_name} (model_type {model_type!r}): posenc only runs in "
            f"families whose rotary tables and attention it has checked against the model's own "
            f"outputs: {verified}"
        )
    if family.since and transformers_version and _older(transformers_version, family.since):
        raise PosencError(
            f"posenc.hf runs {family.label} models from transformers {family.since} on ({family.since_why}); "
            f"transformers {transformers_version} is installed"
        )
    return model_type, family


def family_available(model_type: str) -> bool:
    """Whether the installed transformers has the seam of verified family ``model_type``."""
    import transformers

    since = FAMILIES[model_type].since
    return not (since and _older(transformers.__version__, since))


def _older(version: str, than: str) -> bool:
    from packaging.version import Version  # a dependency of transformers, which is installed here

    return Version(version) < Version(than)


__all__ = ["FAMILIES", "FORMATS", "TESTED_TRANSFORMERS", "Family", "family_available", "family_of"]
