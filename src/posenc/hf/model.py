"""Give a loaded Hugging Face model posenc's positional encodings: :func:`apply`.

Axis legend: b batch, h query heads, g key/value heads (``h = g * groups``), i queries,
j keys (cache included), d head_dim.

::

    model = transformers.AutoModelForCausalLM.from_pretrained(...)   # or from_config
    handle = posenc.hf.apply(model)                  # posenc's RoPE from the model's own config
    handle.set_scaling({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    posenc.hf.apply(model, "alibi")                  # a bias encoding in every layer
    posenc.hf.apply(model, schedules.irope(model.config.num_hidden_layers))   # Llama 4's NoPE layers
    handle.remove()                                  # back to transformers' own code

In transformers (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 3, ...) the model's rotary embedding
(``model.model.rotary_emb``) computes ``(cos, sin)`` once per forward pass; every attention
layer unpacks them and calls its module's ``apply_rotary_pos_emb(q, k, cos, sin)`` before the
KV cache. In transformers 5 changing ``config.rope_parameters`` after loading changes nothing:
the frequencies were computed when the model was built. :func:`apply` therefore

1. replaces the rotary embedding by :class:`PositionIds`, which hands the position ids through
   that slot, and gives each attention layer its own copy of its ``forward`` in which
   ``apply_rotary_pos_emb`` is posenc's: the layer's encoding (a submodule,
   ``posenc_encoding``) rotates q and k with the fused kernel, float64 tables and any posenc
   scaling (RoPE, xPos, per-layer configs), or leaves them alone (NoPE, bias encodings). Other
   instances of the same class, and transformers' modules, are not touched;
2. for bias encodings (ALiBi, T5, KERPLE, FIRE, Sandwich) registers the attention function
   ``"posenc"`` in transformers' ``AttentionInterface`` (with a mask function that always gives
   the boolean mask) and switches the model to it: the bias is added by posenc's row-chunked
   SDPA (:mod:`posenc.kernels.bias_attention`), grouped-query keys and values repeated to the
   query heads; layers without a bias run transformers' own SDPA function.

Positions: queries take the model's ``position_ids``; the keys of a layer are the cached ones,
whose positions continue up to the last query's (``k_pos = q_pos[-1] - (j - 1) + arange(j)``),
which is what left padding and the KV cache give. Length-dependent scalings (dynamic NTK,
LongRoPE) follow transformers: keys are cached rotated with the frequencies of their step.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from posenc import rope_scaling
from posenc.encoding import PositionalEncoding, RotaryEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.hf.config import from_hf
from posenc.kernels.bias_attention import bias_attention, repeat_kv
from posenc.registry import get_encoding_class
from posenc.schedules import LayerEncoding, Schedule, uniform

ATTENTION = "posenc"  # the name posenc registers in transformers' AttentionInterface
KINDS = ("rotary", "bias", "none")  # what can act inside a transformers attention layer
ROTATE = "apply_rotary_pos_emb"  # the module-level function each supported attention forward calls


class PositionIds(nn.Module):
    """Stands where the model's rotary embedding was: ``(x, position_ids) -> (position_ids,) * 2``.

    The attention layers unpack the pair as ``cos, sin`` and hand it to posenc's rotation,
    which reads the positions. Extra arguments (Gemma 3's layer type) are ignored.
    """

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None, *args: Any, **kwargs: Any):
        if not isinstance(position_ids, torch.Tensor) or position_ids.is_floating_point():
            raise PosencError("posenc's rotary embedding needs integer position_ids from the model")
        return position_ids, position_ids


def _rotate(attn: nn.Module, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, *_: Any, **__: Any):
    """posenc's ``apply_rotary_pos_emb`` for one attention layer: ``q (b, h, i, d)``, ``k (b, g, i, d)``."""
    enc = attn.posenc_encoding
    if not isinstance(enc, RotaryEncoding):  # NoPE, bias encodings: no rotation
        return q, k
    return enc.rotate(q, k, q_positions=positions, k_positions=positions, layout="bhsd")


def _patched_forward(attn: nn.Module) -> types.MethodType:
    """``attn``'s class ``forward`` with ``apply_rotary_pos_emb`` bound to posenc's, for ``attn`` only."""
    func = type(attn).forward
    scope = dict(func.__globals__)
    scope[ROTATE] = functools.partial(_rotate, attn)
    copy = types.FunctionType(func.__code__, scope, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__, copy.__doc__ = func.__qualname__, func.__doc__
    return types.MethodType(copy, attn)


# ---------------------------------------------------------------------------
# The attention function (bias encodings).
# ---------------------------------------------------------------------------


def _key_positions(q_pos: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Keys end at the last query: ``k_pos = q_pos[:, -1:] - (j - 1) + arange(j)``, clamped at 0
    (negative only for left padding, which the mask removes)."""
    steps = torch.arange(num_keys, device=q_pos.device)
    return (q_pos[:, -1:] - (num_keys - 1) + steps).clamp(min=0)


def attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; ``query (b, h, i, d)``, ``key/value (b, g, j, d)``.

    Returns ``(out (b, i, h, d), None)`` as transformers' functions do.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # the optional peer

    enc = getattr(module, "posenc_encoding", None)
    if enc is None or enc.kind != "bias":
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if kwargs.get("softcap") is not None:
        raise PosencError("posenc's bias attention does not implement logit soft-capping (Gemma 2)")
    b, h, i, d = query.shape
    j, groups = key.shape[2], h // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)  # grouped-query: as posenc's attention
    if scaling is not None and not math.isclose(scaling, d**-0.5, rel_tol=1e-12):
        query = query * (scaling * math.sqrt(d))  # posenc's kernel scales by 1/sqrt(d)
    position_ids = kwargs.get("position_ids")
    q_pos = position_ids if isinstance(position_ids, torch.Tensor) else None
    if q_pos is None or q_pos.shape[-1] != i:
        q_pos = torch.arange(j - i, j, device=query.device)[None]
    k_pos = _key_positions(q_pos, j)
    allowed = None
    if attention_mask is not None:
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask > -1e30
    row_ok = None
    if allowed is not None:
        row_ok = allowed.any(dim=-1, keepdim=True)  # (b, 1, i, 1): padded queries see nothing
        allowed = allowed | ~row_ok  # let them attend everywhere, zeroed below
    out = bias_attention(
        query, key, value, enc, q_positions=q_pos, k_positions=k_pos, allowed=allowed,
        causal=allowed is None and getattr(module, "is_causal", True) and i > 1,
        dropout=dropout if module.training else 0.0,
    )  # fmt: skip
    if row_ok is not None:
        out = out * row_ok.to(out.dtype)
    return out.transpose(1, 2).contiguous(), None


def _boolean_mask(*args: Any, **kwargs: Any):
    """transformers' SDPA mask, never skipped: bias attention needs the mask it would drop."""
    from transformers.masking_utils import sdpa_mask

    for name in ("allow_is_causal_skip", "allow_is_bidirectional_skip"):
        if name in inspect.signature(sdpa_mask).parameters:
            kwargs[name] = False
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    """Register :func:`attention` as ``"posenc"`` (transformers' own registry for this purpose)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, _boolean_mask)


# ---------------------------------------------------------------------------
# apply / remove.
# ---------------------------------------------------------------------------


@dataclass
class Applied:
    """What :func:`apply` changed, to change the scaling later or to undo it."""

    model: nn.Module
    encodings: list[PositionalEncoding]  # one per layer (shared instances repeat)
    attention_layers: list[nn.Module]
    rotary: list[tuple[nn.Module, str, nn.Module]] = field(default_factory=list)  # (parent, name, original)
    attn_implementation: str | None = None  # the model's before "posenc" (None: not switched)

    def set_scaling(self, scaling: dict | None) -> int:
        """Swap the context-extension scaling of every RoPE layer (any posenc ``rope_type``);
        returns how many encodings changed. Takes effect at the next forward pass."""
        return rope_scaling.apply_to_model(self.model, scaling)

    def remove(self) -> None:
        """Restore the model's rotary embedding, attention forwards and attention function."""
        for attn in self.attention_layers:
            attn.__dict__.pop("forward", None)
            if "posenc_encoding" in attn._modules:
                del attn._modules["posenc_encoding"]
        for parent, name, original in self.rotary:
            setattr(parent, name, original)
        if self.attn_implementation is not None:
            cast(Any, self.model).set_attn_implementation(self.attn_implementation)
        self.model.__dict__.pop("_posenc_applied", None)


def _text_config(model: nn.Module):
    config = getattr(model, "config", None)
    if config is None:
        raise PosencTypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _calls_rotate(module: nn.Module) -> bool:
    code = getattr(getattr(type(module), "forward", None), "__code__", None)
    return code is not None and ROTATE in code.co_names


def _attention_layers(model: nn.Module) -> list[nn.Module]:
    """Every attention module whose forward calls ``apply_rotary_pos_emb``, by layer index."""
    layers = [module for module in model.modules() if hasattr(module, "layer_idx") and _calls_rotate(module)]
    return sorted(layers, key=lambda module: int(cast(Any, module).layer_idx))


def _kind_message(name: str, kind: str) -> str:
    return (
        f"{name} is of kind {kind!r}; inside a transformers attention layer posenc runs the kinds "
        f"{', '.join(KINDS)} (an additive encoding would change the embeddings, relative and contextual "
        "ones the attention scores with content)"
    )


def _layer_schedule(
    encoding: Any, num_layers: int, config: dict[str, Any]
) -> Schedule | list[PositionalEncoding]:
    if encoding is None:
        encoding = "rope"
    if isinstance(encoding, str):
        kind = get_encoding_class(encoding).kind
        if kind not in KINDS:
            raise PosencError(_kind_message(encoding, kind))
        return uniform(num_layers, encoding, **config)
    if config:
        raise PosencError(
            "config keywords go with an encoding name, e.g. apply(model, 'rope', scaling={...})"
        )
    if isinstance(encoding, PositionalEncoding):
        return [encoding] * num_layers
    if isinstance(encoding, Schedule):
        if encoding.num_layers != num_layers:
            raise PosencError(f"the schedule has {encoding.num_layers} layers but the model has {num_layers}")
        return encoding
    if isinstance(encoding, Sequence) and all(isinstance(e, PositionalEncoding) for e in encoding):
        if len(encoding) != num_layers:
            raise PosencError(f"got {len(encoding)} encodings for a model with {num_layers} layers")
        return list(encoding)
    raise PosencTypeError(
        "encoding must be None, a registry name, a PositionalEncoding, a list of one per layer or a "
        f"posenc.schedules.Schedule, got {type(encoding).__name__}"
    )


def apply(model: nn.Module, encoding: Any = None, **config: Any) -> Applied:
    """Give a loaded transformers model posenc's positional encoding, in place.

    Args:
        model: a transformers causal LM (or base model) of a family whose attention layers
            call ``apply_rotary_pos_emb`` (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 3, ...),
            built from a config or loaded; weights are not touched.
        encoding: ``None`` / ``"rope"``: posenc's RoPE read from the model's config
            (:func:`posenc.hf.from_hf`, per layer type for Gemma 3) with ``config`` overriding
            fields (``scaling={...}``, ``base=...``); another registry name of kind rotary,
            bias or none, in every layer; an encoding instance (every layer) or a list of
            one per layer; or a :class:`~posenc.schedules.Schedule` (its RoPE layers default
            to the model's own RoPE config, their entries win).

    Returns:
        An :class:`Applied`: ``.encodings`` per layer, ``.set_scaling(...)``, ``.remove()``.
        Applying again first removes the previous application.

    Raises:
        PosencError for a model without supported attention layers, additive / relative /
        contextual encodings (they do not act inside a transformers attention layer), and
        dims that do not match the model.
    """
    previous = model.__dict__.get("_posenc_applied")
    if previous is not None:
        previous.remove()
    hf_config = _text_config(model)
    layers = _attention_layers(model)
    if not layers:
        raise PosencError(
            f"{type(model).__name__} has no attention layer that calls {ROTATE}(q, k, cos, sin); "
            "posenc.hf supports the Llama, Mistral, Qwen2, Qwen3, Phi-3 and Gemma 3 families of transformers"
        )
    num_heads = int(hf_config.num_attention_heads)
    head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // num_heads)
    nested = isinstance(getattr(hf_config, "rope_parameters", None), dict) and any(
        isinstance(v, dict) for v in hf_config.rope_parameters.values()
    )

    def rope_defaults(index: int, layer: LayerEncoding) -> dict[str, Any]:
        if layer.encoding != "rope":
            return {}
        layer_type = hf_config.layer_types[layers[index].layer_idx] if nested else None
        rope = from_hf(hf_config, layer_type=layer_type)
        del rope["head_dim"]  # the model's, filled in by build_for_model
        return rope

    plan = _layer_schedule(encoding, len(layers), config)
    if isinstance(plan, Schedule):
        encodings = plan.build(
            d_model=int(hf_config.hidden_size), num_heads=num_heads, head_dim=head_dim, causal=True,
            defaults=rope_defaults,
        )  # fmt: skip
    else:
        encodings = plan
    device = next(model.parameters()).device
    for enc in encodings:
        if enc.kind not in KINDS:
            raise PosencError(_kind_message(type(enc).__name__, enc.kind))
        if enc.kind == "rotary" and enc.config.head_dim != head_dim:
            raise PosencError(
                f"encoding has head_dim={enc.config.head_dim} but the model has head_dim={head_dim}"
            )
        if enc.kind == "bias" and enc.config.num_heads != num_heads:
            raise PosencError(
                f"encoding has num_heads={enc.config.num_heads} but the model has {num_heads} heads"
            )
        enc.to(device)

    applied = Applied(model, list(encodings), layers)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if name == "rotary_emb" and not isinstance(child, PositionIds):
                applied.rotary.append((parent, name, child))
                setattr(parent, name, PositionIds())
    for attn, enc in zip(layers, encodings):
        attn.posenc_encoding = enc  # a submodule: learned biases train with the model
        attn.forward = _patched_forward(attn)
    if any(enc.kind == "bias" for enc in encodings):
        _register()
        applied.attn_implementation = hf_config._attn_implementation or "sdpa"
        cast(Any, model).set_attn_implementation(ATTENTION)
    model.__dict__["_posenc_applied"] = applied
    return applied


def remove(model: nn.Module) -> None:
    """Undo :func:`apply` on ``model`` (nothing to do if it was not applied)."""
    applied = model.__dict__.get("_posenc_applied")
    if applied is not None:
        applied.remove()


__all__ = ["ATTENTION", "Applied", "PositionIds", "apply", "attention", "remove"]
