"""Encoding configs: frozen dataclasses that validate themselves and round-trip to JSON.

Every encoding's ``Config`` is a ``@dataclass(frozen=True)`` that also inherits
:class:`EncodingConfig`. Field metadata says what a field means: :func:`model_field` for what
the model fills in (``d_model``, ``head_dim``, ``num_heads``, ``bidirectional``) and
:func:`length_field` for lengths in positions the benchmark sizes to its training length.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import torch

from posenc.core.checks import check_choice, did_you_mean, is_integer_dtype
from posenc.core.errors import PosencError, PosencTypeError

MAX_CONFIG_INT = 2**53  # no size or count past this can be allocated (nor is a float64 integer)


def plain_value(value: Any) -> Any:
    """NumPy scalars and 0-d integer tensors as the Python bool/int/float they hold (inside
    dicts, lists and tuples too), so that configs compare, hash and round-trip to JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and value.device.type != "meta"
        and is_integer_dtype(value.dtype)
    ):
        return int(value.item())
    if isinstance(value, dict):
        return {plain_value(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    return value


def _list_field(field: dataclasses.Field) -> bool:
    """Whether the field's annotation is ``list[...]`` or ``list[...] | None``."""
    text = field.type if isinstance(field.type, str) else str(field.type)
    text = text.replace(" ", "").removesuffix("|None").removeprefix("None|")
    return text.startswith("list[") and text.endswith("]")


def _annotated(field: dataclasses.Field, name: str) -> bool:
    """Whether the field's annotation (a string under ``from __future__ import annotations``)
    is ``name`` or ``name | None`` (``float`` fields accept ints and keep them as floats)."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return text.replace(" ", "") in (name, f"{name}|None", f"None|{name}", f"Optional[{name}]")


class EncodingConfig:
    """Mixin for every encoding's ``@dataclass(frozen=True)`` config.

    Subclasses override :meth:`validate` and raise ValueError/TypeError naming the
    field (a plain one comes out as :class:`~posenc.core.errors.PosencError` /
    :class:`~posenc.core.errors.PosencTypeError` naming the Config class too, so that the command
    line says it in one line). ``from_dict`` rejects unknown keys, suggesting the closest field.
    """

    def __post_init__(self) -> None:
        # The given values in their normal form, written as the object is made (dataclasses have no
        # converters; docs/architecture.md lists this write): plain Python values, so that configs
        # compare, hash and round-trip to JSON; an int for a float field as a float; a tuple for a
        # list field as a list.
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = plain_value(getattr(self, f.name))
            if isinstance(value, int) and not isinstance(value, bool):
                if _annotated(f, "float"):  # base=10**30 given as an int: keep the float
                    value = float(value) if abs(value) < 2**1023 else value
                elif abs(value) > MAX_CONFIG_INT:  # sizes past 2**53 only overflow inside torch
                    raise PosencError(f"{f.name} must be an integer with |{f.name}| <= 2**53, got {value}")
            elif isinstance(value, tuple) and _list_field(f):  # sections=(3, 5): [3, 5]
                value = list(value)
            object.__setattr__(self, f.name, value)
        try:
            self.validate()
        except PosencError:
            raise
        except (ValueError, TypeError) as exc:  # a plug-in's validate, as this class's docstring says
            error = PosencTypeError if isinstance(exc, TypeError) else PosencError
            raise error(f"{type(self).__qualname__}: {exc}") from exc

    def validate(self) -> None:  # pragma: no cover - overridden
        """Check every field; raise ValueError/TypeError naming the field."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def meanings(cls, key: str) -> dict[str, str]:
        """Field name -> meaning, for the fields whose metadata has ``key`` (``"model"`` or ``"length"``)."""
        return {f.name: f.metadata[key] for f in dataclasses.fields(cls) if key in f.metadata}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, owner: str | None = None):
        names = cls.field_names()
        for key in data:
            if key not in names:
                where = f" for encoding {owner!r}" if owner else ""
                raise PosencError(
                    f"unknown config key {key!r}{where}; valid keys: {names}{did_you_mean(key, names)}"
                )
        missing = [
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            where = f" for encoding {owner!r}" if owner else ""
            raise PosencError(f"missing required config key(s) {missing}{where}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))

    @classmethod
    def parameters(cls) -> dict[str, Any]:
        """Field name -> default (``"<required>"`` when there is none)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = "<required>"
        return out


# What a field means, carried as dataclass field metadata (read with EncodingConfig.meanings):
MODEL_VALUES = ("d_model", "head_dim", "num_heads", "bidirectional")  # filled by the model / attention
LENGTH_MEANINGS = (
    "trained_rows",  # rows of a table meant to be trained (positions 0 .. value-1)
    "extra_rows",  # opt-in untrained rows past the trained ones
    "context",  # the training context length (read by RoPE scalings)
    "paper_length",  # a length whose paper default assumes long training (T5 max_distance, ...)
)


def model_field(value: str, **kwargs: Any) -> Any:
    """A Config field the model fills in: ``"d_model"``, ``"head_dim"``, ``"num_heads"`` or
    ``"bidirectional"`` (``not causal``); see :func:`posenc.build_for_model`."""
    check_choice("model value", value, MODEL_VALUES)
    return dataclasses.field(metadata={"model": value}, **kwargs)


def length_field(meaning: str, **kwargs: Any) -> Any:
    """A Config field that is a length in positions, with its meaning (:data:`LENGTH_MEANINGS`);
    the benchmark sizes these to its training length."""
    check_choice("length meaning", meaning, LENGTH_MEANINGS)
    return dataclasses.field(metadata={"length": meaning}, **kwargs)
