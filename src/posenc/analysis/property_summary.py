"""One property table per registered encoding, computed through its kind's hooks.

The report and ``posenc`` commands read :func:`encoding_properties`; nothing here
lists encodings by name, so a newly registered encoding gets a table at once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posenc.analysis import probes, properties
from posenc.analysis.signals import make

# (key, label, what it means) in the order tables show them.
PROPERTY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("kind", "kind", "where the encoding acts"),
    ("parameters", "learnable parameters", "at d_model=64, 4 heads"),
    ("kv_cache", "KV cache", "decoding with a cache equals full recompute"),
    ("unique", "unique positions", "min distance between the signatures of positions 0..127"),
    ("value_range", "value range", "of the position signal over positions 0..63"),
    ("growth", "growth at 8x length", "max |signal| over 512 positions / over 64 (1 = bounded)"),
    ("translation", "translation residual", "max |K(m,n) - K(m+t,n+t)| / max |K|, t up to 1000"),
    (
        "linear_map",
        "linear map residual",
        "least-squares PE(p+1) = M PE(p) over positions 0..255, relative (additive only)",
    ),
    (
        "affine_map",
        "affine map residual",
        "least-squares PE(p+1) = M PE(p) + b over positions 0..255, relative (additive only)",
    ),
    ("sensitivity", "order sensitivity", "permuted-sentence probe: word-aligned output change, encoder"),
    ("equivariance", "equivariance gap", "one bidirectional attention layer, max abs"),
)


@dataclass
class EncodingProperties:
    name: str
    values: dict[str, Any] = field(default_factory=dict)  # key -> number / str / None (n/a)
    notes: dict[str, str] = field(default_factory=dict)  # key -> why it is n/a

    def text(self, key: str) -> str:
        """A short human-readable value for table cells."""
        value = self.values.get(key)
        if value is None:
            return "n/a"
        return format_value(value)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "inf"
        if value == 0:
            return "0"
        return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"
    if isinstance(value, tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def _try(props: EncodingProperties, key: str, fn: Callable[[], Any]) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            props.values[key] = fn()
    except (ValueError, TypeError, NotImplementedError, IndexError, RuntimeError) as exc:
        props.values[key] = None
        props.notes[key] = f"{type(exc).__name__}: {exc}"[:160]


def encoding_properties(
    name: str, *, d_model: int = 64, num_heads: int = 4, probes_enabled: bool = True
) -> EncodingProperties:
    """Every row of :data:`PROPERTY_COLUMNS` for encoding ``name`` (n/a with a note when it does not apply)."""
    enc = make(name, d_model=d_model, num_heads=num_heads)
    props = EncodingProperties(name)
    props.values["kind"] = enc.kind
    props.values["parameters"] = sum(p.numel() for p in enc.parameters() if p.requires_grad)
    props.values["kv_cache"] = bool(enc.supports_kv_cache)
    _try(props, "unique", lambda: properties.uniqueness(enc, 128, num_heads=num_heads).min_distance)

    def value_range():
        vr = properties.value_range(enc, 64, num_heads=num_heads)
        props.values["growth"] = vr.growth
        return (vr.minimum, vr.maximum)

    _try(props, "value_range", value_range)
    props.values.setdefault("growth", None)
    _try(props, "translation", lambda: properties.translation_residual(enc, num_heads=num_heads).worst)
    fit_on = properties.FIT_POSITIONS
    if enc.kind == "additive":
        _try(props, "linear_map", lambda: properties.linear_relative_map(enc, 1, positions=fit_on).residual)
        _try(props, "affine_map", lambda: properties.affine_relative_map(enc, 1, positions=fit_on))
    else:
        for key in ("linear_map", "affine_map"):
            props.values[key] = None
            props.notes[key] = f"only for additive encodings (this one is {enc.kind})"
    if probes_enabled:
        _try(props, "sensitivity", lambda: probes.position_sensitivity(name).token_change)
        _try(props, "equivariance", lambda: probes.equivariance_gap(name))
    else:
        for key in ("sensitivity", "equivariance"):
            props.values[key] = None
            props.notes[key] = "model probes not run (probes_enabled=False)"
    return props
