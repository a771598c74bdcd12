"""Architecture variants: *how* position is added, for additive encodings only.

A variant is written ``key=value``, with ``+`` joining settings of one variant:
``combine=concat``, ``inject=every_layer``, ``position_warmup=200`` (the additive signal ramps
from 0 to 1 over 200 steps), ``scale_embeddings=true`` (token embeddings times sqrt(d_model),
Vaswani et al. 3.4), ``inject=every_layer+position_warmup=200``.
"""

from __future__ import annotations

from typing import Any

from posenc.core.checks import check_choice
from posenc.core.errors import PosencError
from posenc.nn.transformer import COMBINES, INJECTS


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise PosencError(f"{name} must be a positive integer (steps), got {text!r}")
    return value


#: Architecture-variant keys: ``key -> (spec part, field, parse value)``.
VARIANT_KEYS: dict[str, tuple[str, str, Any]] = {
    "combine": ("model", "combine", lambda v: check_choice("combine", v, COMBINES)),
    "inject": ("model", "inject", lambda v: check_choice("inject", v, INJECTS)),
    "position_warmup": ("train", "position_warmup_steps", lambda v: _positive_int("position_warmup", v)),
    "scale_embeddings": (
        "model",
        "scale_embeddings",
        lambda v: check_choice("scale_embeddings", v, ("true", "false")) == "true",
    ),
}


def parse_variant(text: str) -> dict[str, dict[str, Any]]:
    """``"inject=every_layer+position_warmup=200"`` -> ``{"model": {...}, "train": {...}}`` overrides."""
    out: dict[str, dict[str, Any]] = {"model": {}, "train": {}}
    for setting in text.split("+"):
        key, sep, value = (part.strip() for part in setting.partition("="))
        if not sep or not value:
            raise PosencError(
                f"variant {text!r}: expected key=value (keys: {', '.join(VARIANT_KEYS)}), "
                "e.g. combine=concat,inject=every_layer,position_warmup=200"
            )
        part, field_name, parse = VARIANT_KEYS[check_choice("variant key", key, tuple(VARIANT_KEYS))]
        out[part][field_name] = parse(value)
    model = out["model"]
    if model.get("combine") == "concat" and model.get("inject") == "every_layer":
        raise PosencError(f"variant {text!r}: inject=every_layer requires combine=add")
    return out


def parse_variants(text: str | None) -> tuple[str, ...]:
    """``--variants`` text -> validated variant strings (comma-separated, ``+`` within one)."""
    if not text or not text.strip():
        return ()
    items = tuple(item.strip() for item in text.split(","))
    if any(not item for item in items):
        raise PosencError(f"--variants has an empty item: {text!r} (e.g. combine=concat,position_warmup=200)")
    for item in items:
        parse_variant(item)
    return items
