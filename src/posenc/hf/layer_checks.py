"""What :func:`posenc.hf.model.apply` reads and checks before it changes a model: posenc's RoPE
for the model's config (:func:`own_rope`), the model's own rotary tables against posenc's
(:func:`probe_tables`: a difference is refused), and each layer's encoding against the layer it
would run in (:func:`check_layer`: its kind, axes, head size, rotated size, pair layout, heads)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding, RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.hf.config import from_hf
from posenc.hf.families import Family
from posenc.hf.rotary_tables import format_tables

KINDS = ("rotary", "bias", "none")  # what can act inside a transformers attention layer
PROBE = 16  # positions at which the model's own tables are compared with posenc's
PROBE_TOLERANCE = 1e-4  # float32 tables of transformers vs posenc's float64 ones cast to float32


def own_rope(family: Family, cfg: dict[str, Any], layer_type: str | None) -> dict[str, Any]:
    """Keyword arguments of the posenc encoding (``family.encoding``: RoPE, or Qwen2-VL's M-RoPE)
    of a model of ``family`` with config ``cfg`` (a dict from :func:`posenc.hf.config_dict`; one
    layer type)."""
    if family.encoding != "rope":  # its own reader gives every argument
        assert family.rope_config is not None
        return {**family.rope_config(cfg), "layout": family.layout_of(cfg)}
    rope = from_hf(cfg, layer_type=layer_type)
    if family.rope_config is not None:
        rope.update(family.rope_config(cfg))
    rope["layout"] = family.layout_of(cfg)
    return rope


def probe_tables(
    family: Family, stock: Any, own: dict[str | None, RotaryEncoding], cfg: dict, hf_config: Any
) -> None:
    """Refuse unless the model's own rotary embedding gives posenc's tables for its config."""
    device = next((b.device for b in stock.buffers()), torch.device("cpu"))
    # Below every original context, where length-dependent scalings use their original
    # frequencies (compared with a fresh module: the model's keeps its longest call's ones).
    limits = [cfg.get("max_position_embeddings")]
    limits += [
        (getattr(enc.config, "scaling", None) or {}).get(rope_scaling.ORIGINAL) for enc in own.values()
    ]
    n = max(1, min([PROBE] + [int(limit) - 1 for limit in limits if limit]))
    positions = torch.arange(n, device=device)[None]
    x = torch.zeros(1, n, int(cfg.get("hidden_size") or 1), device=device)
    for layer_type, enc in own.items():
        module = stock
        if cast(Any, enc).cache_unrotated_keys:  # length-dependent: transformers' module keeps the
            module = type(stock)(hf_config).to(device)  # longest call's frequencies; a fresh one has none
        with torch.no_grad():
            want = module(x, positions) if layer_type is None else module(x, positions, layer_type)
            got = format_tables(family.tables, *cast(Any, enc.to(device)).cos_sin(positions, torch.float32))
        want_parts = [want] if isinstance(want, torch.Tensor) else list(want)
        got_parts = [got] if isinstance(got, torch.Tensor) else list(got)
        error = math.inf
        if len(want_parts) == len(got_parts) and all(
            w.shape == g.shape for w, g in zip(want_parts, got_parts)
        ):
            error = max(
                float((torch.view_as_real(w) if w.is_complex() else w).double().sub(
                    torch.view_as_real(g) if g.is_complex() else g).abs().max())
                for w, g in zip(want_parts, got_parts)
            )  # fmt: skip
        if not error <= PROBE_TOLERANCE:
            shapes = [tuple(w.shape) for w in want_parts], [tuple(g.shape) for g in got_parts]
            where = f" ({layer_type} layers)" if layer_type else ""
            raise PosencError(
                f"the {family.label} model's own rotary embedding{where} does not give posenc's tables "
                f"for its config (shapes {shapes[0]} vs {shapes[1]}, max difference {error:.3g}); posenc "
                f"refuses to stand in for it. posenc read the config as {own_rope_text(enc)}"
            )


def own_rope_text(enc: RotaryEncoding) -> str:
    config = enc.config.to_dict()
    return ", ".join(f"{key}={value!r}" for key, value in config.items())


def rotary_dim(enc: PositionalEncoding) -> int:
    """Features per head a rotary encoding rotates (RoPE's ``rotary_dim``, else the whole head)."""
    return int(getattr(enc, "rotary_dim", None) or enc.config.head_dim)


def kind_message(name: str, kind: str) -> str:
    return (
        f"{name} is of kind {kind!r}; inside a transformers attention layer posenc runs the kinds "
        f"{', '.join(KINDS)} (an additive encoding would change the embeddings, relative and contextual "
        "ones the attention scores with content)"
    )


def check_layer(
    index: int, enc: PositionalEncoding, own: RotaryEncoding, family: Family, cfg: dict, num_heads: int
) -> None:
    """Refuse an encoding layer ``index`` cannot run as the model would."""
    name = type(enc).__name__
    if enc.kind not in KINDS:
        raise PosencError(kind_message(name, enc.kind))
    if enc.kind == "bias" and family.no_bias:
        raise PosencError(f"{family.label} takes no bias encodings: {family.no_bias}")
    axes = getattr(enc, "position_axes", 1)
    if enc.kind != "none" and axes != family.axes:
        raise PosencError(
            f"{name} takes positions with {axes} axes but the {family.label} model gives {family.axes} per token"
        )
    if enc.kind == "rotary":
        _check_rotary_layer(index, enc, own, family, cfg)
    if enc.kind == "bias":
        _check_bias_layer(enc, family, cfg, num_heads)


def _check_rotary_layer(
    index: int, enc: PositionalEncoding, own: RotaryEncoding, family: Family, cfg: dict
) -> None:
    """A rotary encoding gives the tables the model's attention rotates with, as the model would."""
    name = type(enc).__name__
    if not callable(getattr(enc, "cos_sin", None)):
        raise PosencError(
            f"{name} has no cos_sin(positions, dtype) method: a transformers model rotates queries and "
            "keys alike with one (cos, sin) table per position, which it asks the encoding for (xPos "
            "scales them differently, so it has none). To run a rotary encoding of yours there, add "
            "cos_sin(positions, dtype) -> (cos, sin), each of shape positions.shape + (rotary_dim // 2,) "
            "in dtype (one angle per rotated pair, as posenc.encoding.rotary.RoPE.cos_sin), and a Config field "
            "head_dim; docs/your-encoding.md shows one"
        )
    dim = getattr(enc.config, "head_dim", None)
    if not isinstance(dim, int):
        raise PosencError(
            f"{name} has cos_sin but its Config has no head_dim field: add head_dim (the features per "
            "head it rotates; posenc.core.fields.model_field('head_dim') lets the model fill it in)"
        )
    model_dim = own.config.head_dim
    if dim != model_dim:
        raise PosencError(f"encoding has head_dim={dim} but the model rotates head_dim={model_dim}")
    r, model_r = rotary_dim(enc), rotary_dim(own)
    if r != model_r:
        raise PosencError(
            f"encoding rotates rotary_dim={r} features per head but the {family.label} model rotates "
            f"{model_r} (its partial rotary is the model's)"
        )
    layout = getattr(enc.config, "layout", "half")
    if layout != own.config.layout:
        raise PosencError(
            f"encoding has layout={layout!r} but the {family.label} model rotates {own.config.layout!r} "
            "pairs; its q/k weights were trained for them (posenc.encoding.rotary.permute_qk_weight converts "
            "weights between layouts)"
        )
    key = family.rotary_layers_key
    if key is not None and not cfg.get(key, [1] * (index + 1))[index]:
        raise PosencError(
            f"layer {index} of this {family.label} model never rotates ({key}[{index}] = 0); posenc "
            "cannot give it a rotary encoding"
        )


def _check_bias_layer(enc: PositionalEncoding, family: Family, cfg: dict, num_heads: int) -> None:
    """A bias encoding has the model's heads, and the model's attention adds nothing posenc's lacks."""
    if enc.config.num_heads != num_heads:
        raise PosencError(
            f"encoding has num_heads={enc.config.num_heads} but the model has {num_heads} heads"
        )
    if cfg.get("attn_logit_softcapping") is not None:
        raise PosencError(
            f"this {family.label} model soft-caps attention logits (attn_logit_softcapping="
            f"{cfg['attn_logit_softcapping']}), which posenc's bias attention does not implement"
        )
