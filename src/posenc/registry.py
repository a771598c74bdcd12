"""The registry: one literal dict of every encoding. Everything iterates over it.

CLI listings, the README table, the contract tests, the report and the
benchmark read ``ENCODINGS``; nothing else lists encodings by hand.
"""

from __future__ import annotations

from typing import Any

from posenc import (
    absolute,
    bias,
    contextual,
    hierarchical,
    multiaxis,
    multiaxis_bias,
    multiaxis_rotary,
    relative,
    rotary,
)
from posenc.base import PositionalEncoding, did_you_mean
from posenc.errors import PosencError, PosencTypeError

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    # --- absolute (additive): sinusoidal, scaled_sinusoidal, learned, hybrid, complex_order, integer_index ---
    **absolute.ENCODINGS,
    "hierarchical": hierarchical.Hierarchical,
    # --- none ---
    "nope": absolute.NoPE,
    # --- rotary ---
    "rope": rotary.RoPE,
    "xpos": rotary.XPos,
    # --- bias ---
    "alibi": bias.ALiBi,
    "t5": bias.T5RelativeBias,
    "kerple_log": bias.KerpleLog,
    "kerple_power": bias.KerplePower,
    "fire": bias.FIRE,
    "sandwich": bias.Sandwich,
    # --- relative ---
    "shaw": relative.Shaw,
    "transformer_xl": relative.TransformerXL,
    # --- contextual ---
    "cope": contextual.CoPE,
    # --- multi-axis positions (images, video, multimodal): additive sincos_axial, learned_axial;
    # --- rotary rope_axial, rope_mixed, mrope; bias alibi_2d ---
    **multiaxis.ENCODINGS,
    **multiaxis_rotary.ENCODINGS,
    **multiaxis_bias.ENCODINGS,
}


def get_encoding_class(name: str) -> type[PositionalEncoding]:
    """Look ``name`` up in ENCODINGS; unknown names raise ValueError with a suggestion."""
    if not isinstance(name, str):
        raise PosencTypeError(f"encoding name must be a string, got {type(name).__name__}")
    try:
        return ENCODINGS[name]
    except KeyError:
        hint = did_you_mean(name, ENCODINGS)
        raise PosencError(f"unknown encoding {name!r}{hint} (valid: {', '.join(ENCODINGS)})") from None


def build(name: str, **config: Any) -> PositionalEncoding:
    """Build a registered encoding: ``posenc.build("sinusoidal", dim=512)``."""
    cls = get_encoding_class(name)
    return cls(cls.Config.from_dict(config, owner=name))


def build_for_model(
    name: str,
    *,
    d_model: int,
    num_heads: int,
    head_dim: int | None = None,
    causal: bool | None = None,
    **config: Any,
) -> PositionalEncoding:
    """Build ``name`` filling the model-level fields it declares (dim, head_dim, num_heads).

    ``causal`` (when given) also fills ``bidirectional = not causal`` for encodings that
    have that field (bias encodings: an encoder's bias is symmetric). Explicit ``config``
    entries win over the model's values.
    """
    cls = get_encoding_class(name)
    values = {"d_model": d_model, "num_heads": num_heads, "head_dim": head_dim or d_model // num_heads}
    if causal is not None:
        values["bidirectional"] = not causal
    model = cls.Config.meanings("model")  # field -> the model value it takes
    merged = {field: values[value] for field, value in model.items() if value in values}
    merged.update(config)
    return cls(cls.Config.from_dict(merged, owner=name))


def list_encodings() -> list[dict[str, Any]]:
    """Name, kind, parameters (with defaults) and paper reference of every encoding."""
    return [
        {
            "name": name,
            "kind": cls.kind,
            "parameters": cls.Config.parameters(),
            "paper": cls.paper,
            "summary": (cls.__doc__ or "").strip().splitlines()[0],
        }
        for name, cls in ENCODINGS.items()
    ]


def encodings_markdown() -> str:
    """The README's encodings table (name | kind | parameters | paper), rendered from ENCODINGS.

    ``scripts/update_readme_table.py`` writes it between the README's
    ``<!-- encodings-table:start -->`` / ``<!-- encodings-table:end -->`` markers.
    """

    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| name | kind | parameters | paper |", "|---|---|---|---|"]
    for row in list_encodings():
        params = ", ".join(k if v == "<required>" else f"{k}={v!r}" for k, v in row["parameters"].items())
        lines.append(f"| `{row['name']}` | {row['kind']} | {cell(params) or '—'} | {cell(row['paper'])} |")
    return "\n".join(lines) + "\n"
