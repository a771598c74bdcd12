"""The cases of ``posenc conform`` and their golden numbers: one RoPE case per scaling
(:data:`posenc.encoding.rotary.scaling.BUILTIN_SCALINGS`' ``example``), the RoPE layers, ALiBi slopes
and bias rows and T5 buckets of every model preset, the M-RoPE of Qwen2-VL and Qwen3-VL, and the
cases of one model's config (:func:`config_cases`); :func:`golden` computes a case's arrays from
posenc's NumPy float64 references (the file format: :mod:`posenc.conform.vectors`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from posenc import hf, presets, reference
from posenc.conform import hf_families as conform_hf
from posenc.conform import mrope_vectors as conform_mrope
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.hf.families import FAMILIES
from posenc.registry import build, get_encoding_class
from posenc.schedules import LayerEncoding

SCHEMA = "posenc.conform/1"
HEAD_DIM = 64  # the rotated width of the per-rope_type cases
BASE = 10000.0
CONTEXT = 8192  # max_position_embeddings of the per-rope_type cases (L0 = 2048 in every example)
HEADS = conform_hf.HEADS  # heads of the q/k inputs
SEED = 0
MAX_MANIFEST_BYTES = 16 << 20  # the manifest is ~100 KB

# Per dtype: rtol for inv_freq / attention_scaling / biases; atol for values of magnitude 1
# (cos, sin, rotated vectors per unit of input); angle: allowed error per radian of p * theta,
# since an angle computed in float32 is only as exact as p * theta * eps. Half precision keeps
# float32 angles (computing them in half precision fails, as it should).
# frequency: rtol of inv_freq and attention_scaling, tables kept in float32 at least.
TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"frequency": 1e-12, "rtol": 1e-12, "atol": 1e-12, "angle": 4 * 2.0**-52},
    "float32": {"frequency": 2e-6, "rtol": 2e-6, "atol": 4 * 2.0**-24, "angle": 8 * 2.0**-24},
    "bfloat16": {"frequency": 2e-6, "rtol": 2.0**-7, "atol": 2.0**-7, "angle": 8 * 2.0**-24},
    "float16": {"frequency": 2e-6, "rtol": 2.0**-9, "atol": 2.0**-9, "angle": 8 * 2.0**-24},
}
DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


NotSupported = conform_hf.NotSupported  # an adapter cannot compute this case (the table shows n/a)


# ---------------------------------------------------------------------------
# Cases.
# ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    kind: str  # "rope" | "mrope" | "alibi" | "t5"
    source: str  # "rope_type yarn", "preset llama-3.1", "preset gemma-3-12b (global layers)"
    config: dict[
        str, Any
    ]  # posenc config (RoPE: head_dim, rotary_dim, base, layout, scaling, max_position_embeddings)
    calls: list = field(
        default_factory=list
    )  # RoPE: positions per call (M-RoPE: (t, h, w) per token); biases: [query, key] positions
    hf_model_type: str | None = None  # RoPE: the transformers family whose own code `--against hf` runs

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "config": self.config,
        }
        if self.kind == "rope":
            out["hf_config"] = _hf_config(self.config)
            out["hf_model_type"] = self.hf_model_type
        if self.kind == "mrope":  # (t, h, w) coordinates per call: posenc.conform.mrope_vectors
            out["hf_config"] = conform_mrope.hf_config(self.config)
        return {**out, "calls": self.calls}


def _hf_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The RoPE as a transformers-5 config (``rope_parameters``, ``head_dim``, ...), or None
    when transformers has no such scaling; interleaved layouts keep their pairs in the weights."""
    kwargs = {k: v for k, v in config.items() if k not in ("layout", "rotary_dim")}
    kwargs["partial_rotary_factor"] = config["rotary_dim"] / config["head_dim"]
    name, _ = rope_scaling.split(config["scaling"])
    if name == "ntk":
        return None
    return hf.to_hf(kwargs)


def _rope_calls(original: int | None, context: int | None) -> list[list[int]]:
    """Positions per call: short ones, up to L0 (seq_len = L0), one past it, and far past it."""
    start = [0, 1, 2, 3, 7, 31, 100]
    if original is None:
        far = [1000, 4095] + ([context - 1] if context and context > 4096 else [65535])
        return [start, start + far]
    calls = [
        start + [original - 2, original - 1],
        start + [original - 1, original],
        start + [2 * original - 1],
    ]
    if context and context > 2 * original:
        calls.append(start + [original, context - 1])
    return [sorted(set(call)) for call in calls]


def rope_case(name: str, source: str, rope: dict[str, Any], hf_model_type: str | None = "llama") -> Case:
    """A RoPE case from posenc RoPE config fields (``head_dim`` required), checked against the
    transformers family ``hf_model_type`` (default Llama, whose code takes every rope type)."""
    enc = build("rope", **rope)  # validates; resolves the rotary dim
    config = enc.config
    scaling = rope_scaling.resolve(config.scaling, max_position_embeddings=config.max_position_embeddings)
    full = {
        "head_dim": config.head_dim,
        "rotary_dim": enc.rotary_dim,
        "base": config.base,
        "layout": config.layout,
        "scaling": scaling,
        "max_position_embeddings": config.max_position_embeddings,
    }
    original = (scaling or {}).get(rope_scaling.ORIGINAL)
    calls = _rope_calls(original, config.max_position_embeddings)
    return Case(name, "rope", source, full, calls, hf_model_type)


def cases() -> list[Case]:
    """One case per RoPE scaling (its registry ``example``) and per preset (each distinct RoPE
    layer of its schedule; ALiBi; T5). Learned tables (BERT, GPT-2) have no closed form."""
    out = []
    for name, spec in rope_scaling.BUILTIN_SCALINGS.items():
        if spec.example is None:
            raise PosencError(f"rope scaling {name!r} has no example for the conformance vectors")
        example = spec.example(HEAD_DIM)
        scaling = None if name == "default" else {"rope_type": name, **example}
        # transformers' dynamic NTK reads L0 from max_position_embeddings: make them one
        context = example[rope_scaling.ORIGINAL] if spec.hf_original == "max_position_embeddings" else CONTEXT
        rope = {"head_dim": HEAD_DIM, "base": BASE, "scaling": scaling, "max_position_embeddings": context}
        out.append(rope_case(f"rope_type-{name}", f"rope_type {name} (its registry example)", rope))
    positions = [0, 1, 2, 7, 100, 1000, 4095]
    for name, preset in presets.PRESETS.items():
        kind = get_encoding_class(preset.encoding).kind
        if kind == "rotary":
            layers = presets.schedule(name, max(1, preset.num_layers or 1)).layers
            configs: dict[str, LayerEncoding] = {}
            for layer in layers:  # each distinct RoPE layer once (Gemma 3: local and global)
                if layer.encoding == "rope":
                    configs.setdefault(json.dumps(layer.config, sort_keys=True), layer)
            for layer in configs.values():
                suffix = f"-{layer.role}" if len(configs) > 1 else ""
                rope = {**layer.config, "head_dim": preset.head_dim or preset.d_model // preset.num_heads}
                role = f" ({layer.role} layers)" if suffix else ""
                source = f"preset {name}{role}"
                out.append(rope_case(f"preset-{name}{suffix}", source, rope, preset.hf_model_type))
        elif preset.encoding == "alibi":
            config = {"num_heads": preset.num_heads, **preset.config}
            out.append(Case(f"preset-{name}", "alibi", f"preset {name}", config, [positions, positions]))
        elif preset.encoding == "t5":
            config = {
                "num_heads": preset.num_heads,
                **{k: v for k, v in preset.config.items() if k != "init_std"},
            }
            rel = list(range(-300, 301))
            for bidirectional in (True, False):
                variant = {**config, "bidirectional": bidirectional}
                label = "encoder" if bidirectional else "decoder"
                out.append(Case(f"preset-{name}-{label}", "t5", f"preset {name} ({label})", variant, [rel]))
    for name, (source, config) in conform_mrope.CASES.items():
        out.append(Case(name, "mrope", source, dict(config), conform_mrope.calls()))
    return out


#: transformers model types whose M-RoPE posenc computes (Qwen2-VL / Qwen2.5-VL; Qwen3-VL interleaves
#: the sections), with their text models' own types.
MROPE_MODEL_TYPES = {
    "qwen2_vl": False, "qwen2_vl_text": False, "qwen2_5_vl": False, "qwen2_5_vl_text": False,
    "qwen3_vl": True, "qwen3_vl_text": True, "qwen3_vl_moe": True, "qwen3_vl_moe_text": True,
}  # fmt: skip
_SIZE_KEYS = ("head_dim", "hidden_size", "n_embd")


def text_part(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``(the text model's config, where it was)`` of a ``config.json`` dict: its ``text_config``
    when it has one (a composite config: vision-language models), as transformers'
    ``get_text_config`` reads it and :func:`posenc.hf.apply` does, else the config itself. A
    composite config whose text model sits under another key is refused, naming the key."""
    text = cfg.get("text_config")
    if text is not None:
        if not isinstance(text, dict):
            raise PosencError(f"config.json: text_config must be an object, got {type(text).__name__}")
        return {"model_type": cfg.get("model_type"), **text}, "text_config"
    if not any(cfg.get(key) is not None for key in _SIZE_KEYS):
        parts = [k for k, v in cfg.items() if isinstance(v, dict) and any(s in v for s in _SIZE_KEYS)]
        if parts:
            raise PosencError(
                f"config.json (model_type {cfg.get('model_type')!r}) keeps its models' sizes under "
                f"{', '.join(map(repr, parts))}, not under text_config nor at the top level; posenc reads the "
                "text model from text_config only: export with that part of the file as the config"
            )
    return cfg, ""


def _mrope_case(cfg: dict[str, Any], rope: dict[str, Any], where: str) -> Case:
    """The M-RoPE case of a Qwen-VL text config (its rope dict holds ``mrope_section``)."""
    model_type = cfg.get("model_type")
    if model_type not in MROPE_MODEL_TYPES:
        verified = ", ".join(MROPE_MODEL_TYPES)
        raise PosencError(
            f"config.json (model_type {model_type!r}) has an M-RoPE (mrope_section); posenc computes the "
            f"M-RoPE of Qwen2-VL, Qwen2.5-VL and Qwen3-VL only (model_type one of {verified})"
        )
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise PosencError(
            f"config.json: posenc's M-RoPE has no context-extension scaling, got rope_type {rope_type!r}"
        )
    theta = rope.get("rope_theta", cfg.get("rope_theta"))
    section = rope.get("mrope_section")
    for key, value in (("rope_theta", theta), ("mrope_section", section)):
        if value is None:
            raise PosencError(f"config.json: an M-RoPE config needs {key}, which it does not give")
    heads = cfg.get("num_attention_heads")
    head_dim = cfg.get("head_dim") or (
        cfg["hidden_size"] // heads
        if isinstance(cfg.get("hidden_size"), int) and isinstance(heads, int) and heads
        else None
    )
    if head_dim is None:
        raise PosencError(
            "config.json: an M-RoPE config needs head_dim, or hidden_size and num_attention_heads"
        )
    interleaved = bool(rope.get("mrope_interleaved", MROPE_MODEL_TYPES[model_type]))
    enc = build("mrope", head_dim=head_dim, base=theta, mrope_section=section, mrope_interleaved=interleaved)
    config = {"head_dim": enc.config.head_dim, "base": enc.config.base, "mrope_section": enc.config.resolved_section(),
              "mrope_interleaved": interleaved, "layout": "half"}  # fmt: skip
    label = "interleaved M-RoPE" if interleaved else "M-RoPE"
    source = (
        f"config.json{where} (model_type {model_type!r}, {label}, mrope_section {config['mrope_section']})"
    )
    return Case(f"config-{model_type}", "mrope", source, config, conform_mrope.calls())


def config_cases(config: Any) -> list[Case]:
    """The RoPE cases of a Hugging Face ``config.json`` (a path, dict or config object): its text
    model's (:func:`text_part`), one per layer type with its own rope dict, read as
    :func:`posenc.hf.apply` reads it and checked against the config's own family where posenc has
    verified it; a Qwen-VL config's M-RoPE as one M-RoPE case."""
    top = hf.config_dict(config)
    cfg, part = text_part(top)
    if part:
        cfg = hf.config_dict(cfg)  # the aliases of the text model's own keys
    where_part = f" {part}" if part else ""
    model_type = cfg.get("model_type")
    rope_dicts = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if isinstance(rope_dicts, dict) and ("mrope_section" in rope_dicts or rope_dicts.get("type") == "mrope"):
        return [_mrope_case(cfg, rope_dicts, where_part)]
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is not None and family.encoding != "rope":
        raise PosencError(
            f"config.json (model_type {model_type!r}) has no rope dict with mrope_section to export"
        )
    nested = (
        [key for key, value in rope_dicts.items() if isinstance(value, dict)]
        if isinstance(rope_dicts, dict)
        else []
    )
    out = []
    for layer_type in nested or [None]:
        rope = (
            hf.own_rope(family, cfg, layer_type)
            if family is not None
            else hf.from_hf(cfg, layer_type=layer_type)
        )
        label = f"config-{model_type or 'model'}" + (f"-{layer_type}" if layer_type else "")
        where = f"config.json{where_part} (model_type {model_type!r}" + (
            f", {layer_type} layers)" if layer_type else ")"
        )
        out.append(rope_case(label, where, rope, model_type if family is not None else None))
    return out


# ---------------------------------------------------------------------------
# The golden numbers (NumPy float64 references only).
# ---------------------------------------------------------------------------


def golden(case: Case) -> dict[str, np.ndarray]:
    """The float64 reference arrays of ``case`` (inputs included)."""
    c = case.config
    out: dict[str, np.ndarray] = {}
    if case.kind == "rope":
        rng = np.random.default_rng(SEED)
        for index, positions in enumerate(case.calls):
            pos = np.asarray(positions, dtype=np.int64)
            inv_freq, scale = rope_scaling.reference(
                c["scaling"], dim=c["rotary_dim"], base=c["base"], seq_len=int(pos.max()) + 1
            )
            angles = pos.astype(np.float64)[:, None] * inv_freq
            q, k = (rng.standard_normal((HEADS, len(pos), c["head_dim"])) for _ in range(2))
            rotate = {"layout": c["layout"], "rotary_dim": c["rotary_dim"], "inv_freq": inv_freq,
                      "attention_scaling": scale}  # fmt: skip
            out.update(
                {
                    f"call{index}.positions": pos,
                    f"call{index}.inv_freq": inv_freq,
                    f"call{index}.attention_scaling": np.asarray(scale),
                    f"call{index}.cos": np.cos(angles) * scale,
                    f"call{index}.sin": np.sin(angles) * scale,
                    f"call{index}.q": q,
                    f"call{index}.k": k,
                    f"call{index}.q_rot": reference.rope(q, pos, **rotate),
                    f"call{index}.k_rot": reference.rope(k, pos, **rotate),
                }
            )
    elif case.kind == "alibi":
        q_pos, k_pos = (np.asarray(p, dtype=np.int64) for p in case.calls)
        out["q_positions"], out["k_positions"] = q_pos, k_pos
        out["slopes"] = reference.alibi_slopes(c["num_heads"])
        out["bias"] = reference.alibi(q_pos, k_pos, c["num_heads"], c["bidirectional"])  # (h, i, j)
        out["allowed"] = (
            np.ones((len(q_pos), len(k_pos)), bool) if c["bidirectional"] else k_pos[None] <= q_pos[:, None]
        )
    elif case.kind == "mrope":
        out = conform_mrope.golden(c, case.calls, np.random.default_rng(SEED), HEADS)
    elif case.kind == "t5":
        rel = np.asarray(case.calls[0], dtype=np.int64)
        out["relative_position"] = rel
        out["bucket"] = reference.t5_relative_position_bucket(
            rel, c["bidirectional"], c["num_buckets"], c["max_distance"]
        )
    return out
