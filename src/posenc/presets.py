"""Real-model presets: the positional encoding of well-known checkpoints, as posenc configs.

Introductions to positional encoding often end with a table "position encoding in
practice" (BERT learned 512, GPT-2 learned 1024, LLaMA RoPE, ...). ``PRESETS`` is that
table made exact, kept as data (``presets.json`` next to this module, read by
:func:`load_presets` into frozen :class:`Preset` entries): each entry names a registered
encoding, its config, the model dimensions it is built for and the Hugging Face
``config.json`` the numbers were read from::

    enc = posenc.presets.build("llama-3.1")          # RoPE, head_dim 128, llama3 scaling
    enc = posenc.presets.build("gpt2", max_len=2048)  # overrides win
    layers = posenc.presets.schedule("llama-4-scout")  # Llama 4's RoPE, NoPE every 4th layer

Models whose layers differ (Llama 4, Gemma 3) record the pattern as a
:mod:`posenc.schedules` builder; ``config`` is then the main layers' encoding (RoPE layers,
global layers).

Every number in the file is a fact of the cited config (or of the model code where the
config does not say it, e.g. GPT-J's interleaved pairs, or of the paper where no
config was published: the original Transformer, GPT-3); nothing is tuned.
Dimensions: ``d_model`` is the hidden size, ``head_dim`` the per-head size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.core.checks import check_int, did_you_mean
from posenc.core.datafiles import Where, read_json, typed
from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.base import PositionalEncoding
from posenc.hf.families import FAMILIES
from posenc.registry import ENCODINGS, build_for_model
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
    # The transformers model_type whose own rotary code `posenc conform check --against hf` runs
    # this preset through (posenc.hf.families.FAMILIES); None: no transformers family with RoPE.
    hf_model_type: str | None = None

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
            "hf_model_type": self.hf_model_type,
        }


@dataclass(frozen=True)
class PresetsTable:
    """The contents of :data:`PRESETS_FILE`."""

    about: str
    presets: dict[str, Preset]


#: The presets, next to this module.
PRESETS_FILE = "presets.json"


def load_presets(data: Any = None) -> dict[str, Preset]:
    """:data:`PRESETS_FILE` (or ``data``, its parsed form) as ``{name: Preset}``, each preset's
    encoding a registered one and its per-layer builder one of :data:`posenc.schedules.SCHEDULES`."""
    where = Where(PRESETS_FILE)
    table = typed(PresetsTable, read_json("posenc", PRESETS_FILE) if data is None else data, where)
    for name, preset in table.presets.items():
        if preset.encoding not in ENCODINGS:
            valid = list(ENCODINGS)
            raise where.error(
                f"presets.{name}.encoding",
                preset.encoding,
                f"not registered{did_you_mean(preset.encoding, valid)}",
            )
        if preset.hf_model_type is not None and preset.hf_model_type not in FAMILIES:
            raise where.error(
                f"presets.{name}.hf_model_type",
                preset.hf_model_type,
                f"a verified transformers family: one of {', '.join(FAMILIES)}",
            )
        if preset.layers is not None and preset.layers[0] not in SCHEDULES:
            valid = list(SCHEDULES)
            raise where.error(
                f"presets.{name}.layers", preset.layers[0], f"a builder: one of {', '.join(valid)}"
            )
    return table.presets


#: Every preset, by name (read from :data:`PRESETS_FILE` at import).
PRESETS: dict[str, Preset] = load_presets()


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
    in a :class:`~posenc.nn.transformer.TransformerConfig` or with :func:`posenc.hf.apply`.
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
