"""Per-layer encodings: a :class:`Schedule` gives each attention layer its own encoding or config.

Recent models do not use one positional encoding for the whole stack:

* **Llama 4** (iRoPE): every 4th layer has no positional encoding (NoPE), the others RoPE
  (Meta 2025, https://ai.meta.com/blog/llama-4-multimodal-intelligence/; transformers'
  ``Llama4TextConfig.no_rope_layer_interval = 4``).
* **Gemma 3**: five local (sliding-window) layers per global one; local layers use RoPE with
  base 10,000, global layers base 1,000,000, and the context extension (linear, factor 8)
  is applied to the global layers only (Gemma Team 2025, https://arxiv.org/abs/2503.19786).

A schedule is a tuple of :class:`LayerEncoding` (registry name + config), one per layer; the
model fills in its dims (``head_dim``, ``num_heads``) and builds one encoding per distinct
entry (shared across the layers that have it when the class shares across layers, as RoPE
does). Additive encodings act once on the embeddings, not per layer, so a schedule refuses
them. Layer ``i`` counts from 0; "every k-th layer" means ``(i + 1) % k == 0``, as in
transformers' Llama 4 and Gemma 3 configs::

    from posenc import schedules
    schedules.irope(8)                      # rope, rope, rope, nope, rope, rope, rope, nope
    schedules.local_global(12, global_scaling={"rope_type": "linear", "factor": 8.0})
    TransformerConfig(vocab_size=..., num_layers=8, encoding=schedules.irope(8))

:data:`SCHEDULES` names the builders; :func:`parse` reads the short form the benchmark uses
(``"irope:2"`` = NoPE every 2nd layer, ``"local_global:3"`` = every 3rd layer global).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

from posenc.core.checks import check_int, did_you_mean
from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.base import PositionalEncoding
from posenc.registry import HoldsEncodingClass, build_for_model


@dataclass(frozen=True)
class LayerEncoding(HoldsEncodingClass):
    encoding: str  # a name in posenc.ENCODINGS (any kind but "additive")
    config: dict[str, Any] = field(default_factory=dict)  # its Config fields; the model fills its dims
    role: str = ""  # a label for tables: "local", "global", "nope", ...
    # the class of ``encoding`` where the caller has it (else looked up here, once): not data, so
    # in no ``to_dict`` or comparison; ``dataclasses.replace`` carries it while ``encoding`` stays
    encoding_class: InitVar[Any] = None

    def __post_init__(self, encoding_class: Any) -> None:
        self._hold_class(encoding_class)
        cls = self.resolved_class()  # unknown names raise, with a suggestion
        if cls.kind == "additive":
            raise PosencError(
                f"encoding {self.encoding!r} is additive: it acts once on the token embeddings, not per "
                "layer; give it as TransformerConfig(encoding=...) instead of in a schedule"
            )
        if not isinstance(self.config, Mapping):
            raise PosencTypeError(f"layer config must be a dict, got {type(self.config).__name__}")
        names = cls.Config.field_names()
        for key in self.config:
            if key not in names:
                raise PosencError(
                    f"unknown config key {key!r} for encoding {self.encoding!r} in a schedule; "
                    f"valid keys: {names}{did_you_mean(key, names)}"
                )
        # the config in its normal form, a private JSON copy (a caller's dict changed later changes no
        # schedule), written as the layer is made (docs/architecture.md lists this write)
        object.__setattr__(self, "config", json.loads(json.dumps(dict(self.config))))

    def to_dict(self) -> dict[str, Any]:
        return {"encoding": self.encoding, "config": dict(self.config), "role": self.role}


@dataclass(frozen=True)
class Schedule:
    """One :class:`LayerEncoding` per layer (layer 0 first)."""

    layers: tuple[LayerEncoding, ...]
    name: str = ""  # short form when built by a named builder, e.g. "irope:4"

    def __post_init__(self) -> None:
        layers = self.layers
        if not isinstance(layers, (list, tuple)) or not layers:
            raise PosencError("a schedule needs one LayerEncoding per layer (at least one)")
        for index, layer in enumerate(layers):
            if not isinstance(layer, LayerEncoding):
                raise PosencTypeError(
                    f"schedule layer {index} must be a posenc.schedules.LayerEncoding, got {type(layer).__name__}"
                )
        object.__setattr__(self, "layers", tuple(layers))  # a list given: a tuple (docs/architecture.md)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def encodings(self) -> tuple[str, ...]:
        """The distinct registry names, in order of first use."""
        return tuple(dict.fromkeys(layer.encoding for layer in self.layers))

    def build(
        self,
        *,
        d_model: int,
        num_heads: int,
        head_dim: int | None = None,
        causal: bool | None = None,
        share: bool | None = None,
        defaults: Mapping[str, Mapping[str, Any]]
        | Callable[[int, LayerEncoding], Mapping[str, Any]]
        | None = None,
    ) -> list[PositionalEncoding]:
        """One encoding per layer, built with :func:`posenc.build_for_model`.

        Args:
            d_model, num_heads, head_dim, causal: the model's dims (filled into each config).
            share: one instance for all layers whose configs (defaults included) are equal
                (None: the class's ``share_across_layers``; False: one instance per layer).
            defaults: config fields under each layer's own, which win: per registry name (e.g.
                the training context for every RoPE layer), or ``fn(layer index, entry)``
                (:func:`posenc.hf.apply`: the RoPE of the Hugging Face config, per layer type).
        """
        if defaults is None:
            defaults = {}
        if isinstance(defaults, Mapping):
            for name in defaults:
                if name not in self.encodings:
                    raise PosencError(
                        f"encoding_config names {name!r}, which no layer of the schedule uses "
                        f"(it uses {list(self.encodings)}); with a schedule, encoding_config maps "
                        "registry names to config defaults"
                    )
            by_name = defaults

            def by_encoding(index: int, layer: LayerEncoding) -> Mapping[str, Any]:
                return by_name.get(layer.encoding, {})

            layer_defaults: Callable[[int, LayerEncoding], Mapping[str, Any]] = by_encoding
        else:
            layer_defaults = defaults
        built: dict[str, PositionalEncoding] = {}
        out = []
        for index, layer in enumerate(self.layers):
            config = {**dict(layer_defaults(index, layer)), **layer.config}
            key = json.dumps([layer.encoding, config], sort_keys=True, default=repr)
            cls = layer.resolved_class()
            shared = cls.share_across_layers if share is None else share
            if not shared or key not in built:
                built[key] = build_for_model(
                    cls,
                    d_model=d_model,
                    num_heads=num_heads,
                    head_dim=head_dim,
                    causal=causal,
                    **config,
                )
            out.append(built[key])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layers": [layer.to_dict() for layer in self.layers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        if not isinstance(data, Mapping) or "layers" not in data:
            raise PosencError("a schedule dict needs 'layers' (a list of {'encoding', 'config', 'role'})")
        unknown = set(data) - {"name", "layers"}
        if unknown:
            raise PosencError(f"unknown schedule key(s) {sorted(unknown)}; valid: ['name', 'layers']")
        for layer in data["layers"]:
            keys = set(layer) if isinstance(layer, Mapping) else None
            if keys is None or not keys <= {"encoding", "config", "role"}:
                raise PosencError(
                    f"a schedule layer is a dict with keys 'encoding', 'config', 'role'; got {layer!r}"
                )
        layers = tuple(LayerEncoding(**dict(layer)) for layer in data["layers"])
        return cls(layers, name=str(data.get("name", "")))

    def describe(self) -> list[dict[str, Any]]:
        """One row per layer: index, role, encoding, config."""
        return [{"layer": i, **layer.to_dict()} for i, layer in enumerate(self.layers)]


# ---------------------------------------------------------------------------
# Builders.
# ---------------------------------------------------------------------------


def uniform(num_layers: int, encoding: str, **config: Any) -> Schedule:
    """The same encoding in every layer (what ``TransformerConfig(encoding=name)`` means)."""
    num_layers = check_int("num_layers", num_layers, minimum=1)
    return Schedule((LayerEncoding(encoding, config),) * num_layers, name=encoding)


def every(num_layers: int, period: int, *, on: LayerEncoding, off: LayerEncoding, name: str = "") -> Schedule:
    """``on`` in every ``period``-th layer (layers ``i`` with ``(i + 1) % period == 0``), ``off`` elsewhere."""
    num_layers = check_int("num_layers", num_layers, minimum=1)
    period = check_int("period", period, minimum=1)
    layers = tuple(on if (i + 1) % period == 0 else off for i in range(num_layers))
    return Schedule(layers, name=name)


def irope(num_layers: int, *, nope_every: int = 4, **rope: Any) -> Schedule:
    """Llama 4's interleaved RoPE: NoPE in every ``nope_every``-th layer, RoPE (``rope`` config) elsewhere.

    transformers' Llama 4: ``no_rope_layers[i] = int((i + 1) % no_rope_layer_interval != 0)``
    with ``no_rope_layer_interval = 4``. (Llama 4 also scales the queries of its NoPE layers
    by a position-dependent temperature and chunks the attention of its RoPE layers; those
    are attention changes, not part of the schedule.)
    """
    nope_every = check_int("nope_every", nope_every, minimum=1)
    return every(
        num_layers,
        nope_every,
        on=LayerEncoding("nope", {}, "nope"),
        off=LayerEncoding("rope", rope, "rope"),
        name=f"irope:{nope_every}",
    )


def local_global(
    num_layers: int,
    *,
    global_every: int = 6,
    local_base: float = 10000.0,
    global_base: float = 1000000.0,
    local_scaling: dict | None = None,
    global_scaling: dict | None = None,
    **rope: Any,
) -> Schedule:
    """Gemma 3's layers: RoPE with ``local_base`` in local layers, ``global_base`` in every
    ``global_every``-th (global) layer; each kind may carry its own scaling.

    ``global_scaling={"rope_type": "linear", "factor": 8.0}`` with ``local_scaling=None`` is
    "scaling only on global layers", as Gemma 3 extends its context. The sliding window of
    the local layers is attention, not position, and is not part of the schedule.
    """
    global_every = check_int("global_every", global_every, minimum=1)
    for key in ("base", "scaling"):
        if key in rope:
            raise PosencError(f"local_global takes local_{key} and global_{key}, not {key}")
    local = LayerEncoding("rope", {**rope, "base": local_base, "scaling": local_scaling}, "local")
    global_ = LayerEncoding("rope", {**rope, "base": global_base, "scaling": global_scaling}, "global")
    return every(num_layers, global_every, on=global_, off=local, name=f"local_global:{global_every}")


@dataclass(frozen=True)
class Builder:
    """A named schedule builder: ``fn(num_layers, **kwargs)``; ``period`` is the keyword the
    short form ``name:k`` sets (default ``default_period``)."""

    fn: Callable[..., Schedule]
    period: str
    default_period: int
    description: str


#: The named builders (the benchmark's ``--schedules``, :func:`parse`, the model presets).
SCHEDULES: dict[str, Builder] = {
    "irope": Builder(irope, "nope_every", 4, "NoPE every k-th layer, RoPE elsewhere (Llama 4)"),
    "local_global": Builder(
        local_global, "global_every", 6, "RoPE base 1e6 every k-th layer, base 1e4 elsewhere (Gemma 3)"
    ),
}


def parse(text: str, num_layers: int) -> Schedule:
    """``"irope"``, ``"irope:2"``, ``"local_global:3"`` -> the schedule for ``num_layers`` layers."""
    if not isinstance(text, str):
        raise PosencTypeError(f"schedule must be a string like 'irope:4', got {type(text).__name__}")
    name, _, period_text = text.partition(":")
    if name not in SCHEDULES:
        raise PosencError(
            f"unknown schedule {name!r}{did_you_mean(name, SCHEDULES)}; valid: {', '.join(SCHEDULES)} "
            "(optionally ':k', e.g. 'irope:4')"
        )
    builder = SCHEDULES[name]
    try:
        period = int(period_text) if period_text else builder.default_period
    except ValueError:
        raise PosencError(
            f"schedule {text!r}: the period after ':' must be an integer, e.g. {name}:4"
        ) from None
    period = check_int(f"schedule {name!r} period", period, minimum=1)
    return builder.fn(num_layers, **{builder.period: period})


__all__ = [
    "SCHEDULES",
    "Builder",
    "LayerEncoding",
    "Schedule",
    "every",
    "irope",
    "local_global",
    "parse",
    "uniform",
]
