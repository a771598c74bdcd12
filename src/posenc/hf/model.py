"""Give a loaded Hugging Face model posenc's positional encodings: :func:`apply`.

Axis legend: b batch, h query heads, g key/value heads (``h = g * groups``), i queries,
j keys (cache included), n positions, r rotated features per head, e table sources.

::

    model = transformers.AutoModelForCausalLM.from_pretrained(...)   # or from_config
    handle = posenc.hf.apply(model)                  # posenc's RoPE from the model's own config
    handle.set_scaling({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    posenc.hf.apply(model, "alibi")                  # a bias encoding in every layer
    posenc.hf.apply(model, schedules.irope(model.config.num_hidden_layers))   # NoPE every 4th layer
    handle.remove()                                  # back to transformers' own modules

How, through transformers' public seams only (no function of transformers is read or copied,
so a new decorator or wrapper around an attention ``forward`` cannot break it):

1. **The rotary embedding module.** A model computes its rotation tables once per forward in
   ``rotary_emb(x, position_ids[, layer_type])`` and hands them to every attention layer as
   ``position_embeddings``. :func:`apply` puts :class:`RotaryTables` in that slot: posenc's
   encodings compute the tables from integer positions in float64, in the family's format
   (:mod:`posenc.hf.families`), and the family's own attention code rotates with them. In
   transformers 5 changing ``config.rope_parameters`` after loading changes nothing (the
   frequencies were computed when the model was built); posenc's change at once.
2. **Per-layer encodings** (a NoPE layer, another base, a bias layer): when the layers of one
   layer type do not all take the same tables, the module returns the tables of every source
   stacked (``(e, b, n, r)``) and a forward pre-hook on each attention module picks its own
   (NoPE and bias layers take the identity rotation, ``cos = 1, sin = 0``).
3. **Bias encodings** (ALiBi, T5, KERPLE, FIRE, Sandwich) run as the attention function
   ``"posenc"`` registered in transformers' ``AttentionInterface`` (with a mask function that
   always gives the boolean mask): posenc's row-chunked SDPA adds the bias, grouped-query keys
   and values repeated to the query heads; layers without a bias run transformers' SDPA.

What posenc has not verified it refuses at :func:`apply`, naming it: families outside
:data:`posenc.hf.families.FAMILIES`, a model whose own rotary tables differ from posenc's for
its config, an encoding whose layout or rotated size differs from the model's, xPos (its
queries and keys scale differently, which one table per position cannot express).

Positions: the tables follow the model's ``position_ids``, so left padding, the KV cache
(keys are cached rotated, as transformers does) and packed sequences are the model's own. The
bias attention takes the queries' ``position_ids``; the keys of a layer are the cached ones,
whose positions continue up to the last query's (``k_pos = q_pos[-1] - (j - 1) + arange(j)``).
Length-dependent scalings (dynamic NTK, LongRoPE) use the largest position of each call;
transformers' own dynamic NTK keeps the frequencies of the longest call so far.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.base import PositionalEncoding, RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.hf.attention_function import ATTENTION, register
from posenc.hf.config import config_dict
from posenc.hf.families import TESTED_TRANSFORMERS, Family, family_of
from posenc.hf.layer_checks import KINDS, check_layer, kind_message, own_rope, probe_tables, rotary_dim
from posenc.hf.rotary_tables import IDENTITY, RotaryTables, format_tables, pick_hook
from posenc.registry import build, get_encoding_class
from posenc.schedules import LayerEncoding, Schedule

ROTARY = "rotary_emb"  # the attribute every family keeps its rotary embedding in


# ---------------------------------------------------------------------------
# apply / remove.
# ---------------------------------------------------------------------------


@dataclass
class Applied:
    """What :func:`apply` changed, to change the scaling later or to undo it."""

    model: nn.Module
    family: Family
    encodings: list[PositionalEncoding]  # one per layer (shared instances repeat)
    layer_types: list[str | None]  # per layer (None: the family has no layer types)
    attention_layers: list[nn.Module]
    rotary: tuple[nn.Module, nn.Module]  # (parent, the model's own rotary embedding)
    hooks: list[Any] = field(default_factory=list)  # removable handles of the layers' pre-hooks
    attn_implementation: str | None = None  # the model's before "posenc" (None: not switched)

    def set_scaling(
        self, scaling: dict | rope_scaling.Scaling | None, *, layer_type: str | None = None
    ) -> int:
        """Swap the context-extension scaling (any posenc ``rope_type``, or None) of RoPE layers.

        Args:
            scaling: an HF-style rope dict with ``rope_type``, a parsed
                :class:`~posenc.encoding.rotary.scaling.Scaling`, or None for plain RoPE. It is
                parsed and checked once, before anything changes.
            layer_type: for families with layer types (Gemma 3), which layers: the default is
                the family's own choice (Gemma 3: ``"full_attention"``, the layers its config
                scales; the sliding-window layers never are), ``"all"`` for every layer.

        Returns how many encodings changed; they take effect at the next forward pass.
        """
        if self.family.rescaling:
            raise PosencError(self.family.rescaling)
        chosen = self._layers_of(layer_type)
        targets: list[PositionalEncoding] = []
        for index in chosen:
            enc = self.encodings[index]
            if isinstance(enc, RotaryEncoding) and enc.supports_scaling and enc not in targets:
                targets.append(enc)
        for enc in targets:
            shared = [i for i, other in enumerate(self.encodings) if other is enc and i not in chosen]
            if shared:
                raise PosencError(
                    f"layers {shared} share one encoding with the {layer_type or self.family.scaled_layer_type} "
                    "layers; apply one encoding per layer type, or set_scaling(..., layer_type='all')"
                )
        return rope_scaling.set_on([cast(RotaryEncoding, enc) for enc in targets], scaling)

    def _layers_of(self, layer_type: str | None) -> list[int]:
        types = [t for t in dict.fromkeys(self.layer_types) if t is not None]
        if layer_type is None:
            layer_type = self.family.scaled_layer_type or "all"
        if layer_type == "all":
            return list(range(len(self.encodings)))
        if layer_type not in types:
            raise PosencError(
                f"layer_type must be 'all'{''.join(', ' + repr(t) for t in types)} for this "
                f"{self.family.label} model, got {layer_type!r}"
            )
        return [i for i, t in enumerate(self.layer_types) if t == layer_type]

    def remove(self) -> None:
        """Restore the model's rotary embedding, attention layers and attention function."""
        for handle in self.hooks:
            handle.remove()
        for attn in self.attention_layers:
            if "posenc_encoding" in attn._modules:
                del attn._modules["posenc_encoding"]
        parent, original = self.rotary
        setattr(parent, ROTARY, original)
        if self.attn_implementation is not None:
            cast(Any, self.model).set_attn_implementation(self.attn_implementation)
        self.model.__dict__.pop("_posenc_applied", None)


def text_config(model: nn.Module) -> Any:
    """The text part of a transformers model's config (the config itself for a text-only model)."""
    config = getattr(model, "config", None)
    if config is None:
        raise PosencTypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _check_version() -> None:
    """Warn when the installed transformers is outside the releases posenc.hf was checked on."""
    import transformers
    from packaging.version import Version  # a dependency of transformers

    low, high = TESTED_TRANSFORMERS
    installed = Version(transformers.__version__)
    if not Version(low) <= installed <= Version(high):
        warnings.warn(
            f"posenc.hf was checked on transformers {low} to {high}; {transformers.__version__} is "
            "installed. Each apply still compares the model's own rotary tables with posenc's and "
            "refuses a difference, but the checks of docs/hf-support.md were not run on it",
            UserWarning,
            stacklevel=3,
        )


def _rotary_slot(model: nn.Module, label: str) -> tuple[nn.Module, nn.Module]:
    """``(parent, module)`` of the model's one rotary embedding."""
    slots = [
        (parent, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if name == ROTARY and not isinstance(child, RotaryTables)
    ]
    if len(slots) != 1:
        raise PosencError(
            f"posenc.hf expects one rotary embedding module named {ROTARY!r} in a {label} model, "
            f"found {len(slots)}; this transformers release lays the family out differently"
        )
    return slots[0]


def _attention_layers(model: nn.Module, num_layers: int, label: str) -> list[nn.Module]:
    """The attention module of every layer, by layer index."""
    layers = [
        module
        for module in model.modules()
        if isinstance(getattr(module, "layer_idx", None), int) and type(module).__name__.endswith("Attention")
    ]
    if len(layers) != num_layers:
        raise PosencError(
            f"posenc.hf expects one attention module per layer in a {label} model ({num_layers}), found "
            f"{len(layers)}; this transformers release lays the family out differently"
        )
    return sorted(layers, key=lambda module: int(cast(Any, module).layer_idx))


def _layer_schedule(
    encoding: Any, num_layers: int, config: dict[str, Any], rotates: list[int] | None = None
) -> Schedule | list[PositionalEncoding]:
    if encoding is None:
        encoding = "rope"
    if isinstance(encoding, str):
        cls = get_encoding_class(encoding)  # the one lookup: every layer below carries the class
        if cls.kind not in KINDS:
            raise PosencError(kind_message(encoding, cls.kind))
        schedule = Schedule(
            (LayerEncoding(encoding, config, encoding_class=cls),) * num_layers, name=encoding
        )
        if encoding == "rope" and rotates is not None:  # the model's own NoPE layers stay NoPE
            nope = LayerEncoding("nope", {}, "nope")
            return Schedule(tuple(x if r else nope for x, r in zip(schedule.layers, rotates)), "rope")
        return schedule
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


def _one_per_layer_type(
    encodings: list[PositionalEncoding], layer_types: list[str | None]
) -> list[PositionalEncoding]:
    """Copies where one built instance would serve two layer types, so that a scaling set on one
    layer type (:meth:`Applied.set_scaling`) never reaches the other."""
    owner: dict[int, str | None] = {}
    copies: dict[tuple[int, str | None], PositionalEncoding] = {}
    out = []
    for enc, layer_type in zip(encodings, layer_types):
        first = owner.setdefault(id(enc), layer_type)
        if first != layer_type:
            enc = copies.setdefault((id(enc), layer_type), copy.deepcopy(enc))
        out.append(enc)
    return out


def apply(model: nn.Module, encoding: Any = None, **config: Any) -> Applied:
    """Give a loaded transformers model posenc's positional encoding, in place.

    Args:
        model: a transformers causal LM (or base model) of a verified family
            (:data:`posenc.hf.families.FAMILIES`: Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2,
            Gemma 3, OLMo 2, Granite, Cohere, GLM, Phi, StableLM, GPT-NeoX, Falcon, GPT-J,
            DeepSeek-V3, Llama 4), built from a config or loaded; weights are not touched.
        encoding: ``None`` / ``"rope"``: posenc's RoPE read from the model's config
            (:func:`posenc.hf.from_hf`, per layer type for Gemma 3) with ``config`` overriding
            fields (``base=...``; ``scaling={...}`` goes where :meth:`Applied.set_scaling`
            puts it); another registry name of kind rotary, bias or none, in every layer; an
            encoding instance (every layer) or a list of one per layer; or a
            :class:`~posenc.schedules.Schedule` (its RoPE layers default to the model's own RoPE
            config, their entries win).

    Returns:
        An :class:`Applied`: ``.encodings`` per layer, ``.set_scaling(...)``, ``.remove()``.
        Applying again first removes the previous application.

    Raises:
        PosencError naming what is wrong: a family posenc has not verified, a model whose rotary
        tables differ from posenc's for its config, additive / relative / contextual encodings
        (they do not act inside a transformers attention layer), an encoding whose dims or
        layout differ from the model's; PosencTypeError when ``model`` is not a model.
    """
    _check_model(model)
    previous = model.__dict__.get("_posenc_applied")
    if previous is not None:
        previous.remove()
    target = _read_model(model)
    rescale = encoding in (None, "rope") and "scaling" in config and target.family.encoding == "rope"
    scaling = config.pop("scaling") if rescale else None  # set on the installed encodings, below
    encodings = _layer_encodings(target, encoding, config)
    applied = _install(model, target, encodings)
    if rescale:
        try:
            applied.set_scaling(scaling)
        except PosencError:
            applied.remove()
            raise
    return applied


@dataclass
class _Target:
    """What :func:`apply` reads from a transformers model (and checks) before changing it."""

    hf_config: Any  # the text config
    family: Family
    cfg: dict[str, Any]  # the config as a dict (posenc.hf.config_dict)
    rotary: tuple[nn.Module, nn.Module]  # (parent, the model's own rotary embedding)
    layers: list[nn.Module]  # the attention module of every layer
    layer_types: list[str | None]  # per layer (None: the family has no layer types)
    own_config: dict[str | None, dict[str, Any]]  # posenc's RoPE arguments per layer type
    own: dict[str | None, RotaryEncoding]  # posenc's RoPE per layer type, probed against the model's
    device: torch.device

    @property
    def num_heads(self) -> int:
        return int(self.hf_config.num_attention_heads)


def _read_model(model: nn.Module) -> _Target:
    """The model's family, layers and own RoPE; refuses a model whose rotary tables posenc's
    would not reproduce (:func:`probe_tables`)."""
    import transformers  # the optional peer: a model of it is at hand

    hf_config = text_config(model)
    _, family = family_of(cast(Any, model).config, type(model).__name__, transformers.__version__)
    _check_version()
    cfg = config_dict(hf_config)
    num_layers = int(hf_config.num_hidden_layers)
    parent, stock = _rotary_slot(model, family.label)
    layers = _attention_layers(model, num_layers, family.label)
    layer_types: list[str | None] = (
        [hf_config.layer_types[i] for i in range(num_layers)] if family.layer_types else [None] * num_layers
    )
    own_config = {t: own_rope(family, cfg, t) for t in dict.fromkeys(layer_types)}
    own = {t: cast(RotaryEncoding, build(family.encoding, **rope)) for t, rope in own_config.items()}
    probe_tables(family, stock, own, cfg, hf_config)
    device = next(model.parameters()).device
    return _Target(hf_config, family, cfg, (parent, stock), layers, layer_types, own_config, own, device)


def _layer_encodings(target: _Target, encoding: Any, config: dict[str, Any]) -> list[PositionalEncoding]:
    """One built encoding per layer (see :func:`apply`'s ``encoding``), each checked against its
    layer and moved to the model's device."""
    family, layer_types, own = target.family, target.layer_types, target.own

    def rope_defaults(index: int, layer: LayerEncoding) -> dict[str, Any]:
        if layer.encoding != family.encoding:
            return {}
        rope = dict(target.own_config[layer_types[index]])
        del rope["head_dim"]  # the model's, filled in by build_for_model
        return rope

    key = family.rotary_layers_key
    plan = _layer_schedule(
        family.encoding if encoding is None else encoding, len(layer_types), config,
        target.cfg.get(key) if key else None,
    )  # fmt: skip
    if isinstance(plan, Schedule):
        encodings = plan.build(
            d_model=int(target.hf_config.hidden_size), num_heads=target.num_heads,
            head_dim=own[layer_types[0]].config.head_dim, causal=True, defaults=rope_defaults,
        )  # fmt: skip
    else:
        encodings = plan
    given = isinstance(encoding, PositionalEncoding) or (
        isinstance(encoding, Sequence) and not isinstance(encoding, str)
    )  # the caller's own instances are used as given
    if family.layer_types and not given:
        encodings = _one_per_layer_type(encodings, layer_types)
    for index, enc in enumerate(encodings):
        check_layer(index, enc, own[layer_types[index]], family, target.cfg, target.num_heads)
        enc.to(target.device)
    return list(encodings)


def _install(model: nn.Module, target: _Target, encodings: list[PositionalEncoding]) -> Applied:
    """Put :class:`RotaryTables` in the model's rotary slot, a pick hook on each layer whose type
    takes several tables, bias encodings on their layers and posenc's attention function."""
    layer_types, family = target.layer_types, target.family
    sources: list[RotaryEncoding] = []
    for enc in encodings:
        if enc.kind == "rotary" and not any(enc is s for s in sources):
            sources.append(cast(RotaryEncoding, enc))
    route = [
        next(i for i, s in enumerate(sources) if s is enc) if enc.kind == "rotary" else IDENTITY
        for enc in encodings
    ]
    routes = {t: tuple(dict.fromkeys(r for r, lt in zip(route, layer_types) if lt == t)) for t in target.own}
    pairs = {t: rotary_dim(enc) // 2 for t, enc in target.own.items()}
    parent, _ = target.rotary
    applied = Applied(model, family, encodings, layer_types, target.layers, target.rotary)
    setattr(
        parent, ROTARY, RotaryTables(family.tables, sources, routes, pairs, family.axes).to(target.device)
    )
    for index, attn in enumerate(target.layers):
        choices = routes[layer_types[index]]
        if len(choices) > 1:
            pick = pick_hook(choices.index(route[index]), family.label)
            applied.hooks.append(attn.register_forward_pre_hook(pick, with_kwargs=True))
        if encodings[index].kind == "bias":
            attn.posenc_encoding = encodings[index]  # a submodule: learned biases train with the model
    if any(enc.kind == "bias" for enc in encodings):
        register()
        applied.attn_implementation = target.hf_config._attn_implementation or "sdpa"
        cast(Any, model).set_attn_implementation(ATTENTION)
    model.__dict__["_posenc_applied"] = applied
    return applied


def _check_model(model: Any) -> None:
    """Refuse, by name, what is not a transformers model (before any attribute of it is read)."""
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise PosencTypeError(
            "model must be a loaded transformers model (a torch.nn.Module with a .config, e.g. from "
            f"AutoModelForCausalLM.from_pretrained), got {type(model).__name__}"
        )


def remove(model: nn.Module) -> None:
    """Undo :func:`apply` on ``model`` (nothing to do if it was not applied)."""
    _check_model(model)
    applied = model.__dict__.get("_posenc_applied")
    if applied is not None:
        applied.remove()


__all__ = [
    "ATTENTION",
    "Applied",
    "RotaryTables",
    "apply",
    "format_tables",
    "own_rope",
    "remove",
]
