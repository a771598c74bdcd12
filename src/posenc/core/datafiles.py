"""Tables that are data, read into frozen dataclasses: typed from the dataclass's own annotations.

posenc keeps its larger tables in data files next to the module that uses them (the model
presets, the notes' claims, the benchmark's claims as JSON; the benchmark profiles as
TOML). Each loader hands a parsed table to :func:`typed`, which builds the dataclass and
refuses an unknown key (suggesting the closest), a missing one, or a value of the wrong
type, with one :class:`~posenc.core.errors.PosencError` that names the file, the entry and the
key: ``presets.json: gpt2.d_model = '768': must be an integer``.

Types follow the annotations: ``int`` (not bool), ``float`` (ints accepted), ``bool``,
``str``, ``X | None`` (``null`` in JSON; a TOML file leaves the key out), ``tuple[X, ...]``
and fixed tuples (from lists), ``dict[str, X]`` and nested dataclasses (from tables);
``Any`` is taken as it is. A field made with :func:`derived` is no key of a file: it holds what
checking the data resolved from it (a class, a parsed value), in memory only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from importlib import resources
from typing import Any

from posenc.core.checks import did_you_mean
from posenc.core.errors import PosencError

MISSING: Any = object()  # a key with no value to show in a message
#: Field metadata of a field that is not data (:func:`derived`).
DERIVED = "posenc.derived"


def derived(default_factory: Any) -> Any:
    """A dataclass field that is not data: no key of a file (:func:`check_keys`, :func:`typed`),
    left out of comparisons and the repr; it holds what checking the data resolved from it, set
    by the dataclass's maker (``dataclasses.replace(value, field=...)``)."""
    return dataclasses.field(
        default_factory=default_factory, compare=False, repr=False, metadata={DERIVED: True}
    )


def data_fields(cls: Any) -> tuple[dataclasses.Field, ...]:
    """The fields of dataclass ``cls`` that are data: every one but those made with :func:`derived`."""
    return tuple(f for f in dataclasses.fields(cls) if not f.metadata.get(DERIVED))


class Where:
    """Names a value in error messages: ``quick.toml: task_train.steps = 0: must be >= 1``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, value: Any, problem: str) -> PosencError:
        shown = "" if value is MISSING else f" = {value!r}"
        return PosencError(f"{self.source}: {key}{shown}: {problem}")


def read_json(package: str, name: str) -> Any:
    """The JSON file ``name`` shipped next to the modules of ``package`` (a parse error names it)."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PosencError(f"{name}: not valid JSON ({exc})") from None


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """The field annotations of dataclass ``cls``, evaluated (once per class: every run record read
    is typed with them)."""
    return typing.get_type_hints(cls)


def check_keys(table: dict[str, Any], cls: type, where: Where, *, prefix: str = "", extra=()) -> None:
    """Refuse a key of ``table`` (and of its nested tables) that ``cls`` has no field for."""
    names = [f.name for f in data_fields(cls)]
    for key, value in table.items():
        if key in extra:
            continue
        if key not in names:
            valid = [*extra, *names]
            raise where.error(
                f"{prefix}{key}",
                MISSING,
                f"unknown key; valid keys: {', '.join(valid)}{did_you_mean(key, valid)}",
            )
        nested = hints(cls)[key]
        if dataclasses.is_dataclass(nested) and isinstance(value, dict):
            check_keys(value, nested, where, prefix=f"{prefix}{key}.")  # type: ignore[arg-type]


def typed(cls: type, table: Any, where: Where, *, prefix: str = "", check=None) -> Any:
    """``cls(**table)`` with every value typed from ``cls``'s annotations.

    ``check(cls, key, value, raw)``, if given, is called for every value set (and for those
    of nested dataclasses) to check what the type cannot say, e.g. a range.
    """
    if not isinstance(table, dict):
        raise where.error(prefix.rstrip(".") or "(top level)", table, "must be a table / JSON object")
    check_keys(table, cls, where, prefix=prefix)
    annotations = hints(cls)
    values = {}
    for f in data_fields(cls):
        key = f"{prefix}{f.name}"
        if f.name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise where.error(key, MISSING, "missing (this key has no default)")
            continue
        values[f.name] = value(annotations[f.name], table[f.name], where, key, check=check)
        if check is not None:
            check(cls, key, values[f.name], table[f.name])
    return cls(**values)


def value(hint: Any, raw: Any, where: Where, key: str, *, check=None) -> Any:
    """``raw`` (as JSON or TOML gives it) as the annotated type, or an error naming ``key``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return raw
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return value(options[0], raw, where, key, check=check)
    if dataclasses.is_dataclass(hint):
        return typed(hint, raw, where, prefix=f"{key}.", check=check)  # type: ignore[arg-type]
    scalar = _scalar(hint, raw)
    if scalar is not MISSING:
        return scalar
    if hint is float and isinstance(raw, int) and not isinstance(raw, bool):
        raise where.error(key, raw, "must be a number a float can hold (this integer is too large)")
    if hint in _SCALARS:
        raise where.error(key, raw, _SCALARS[hint])
    if origin is tuple:
        if not isinstance(raw, list):
            raise where.error(key, raw, "must be a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                value(args[0], item, where, f"{key}[{i}]", check=check) for i, item in enumerate(raw)
            )
        if len(raw) != len(args):
            raise where.error(key, raw, f"must be a list of {len(args)} values")
        return tuple(value(a, item, where, key, check=check) for a, item in zip(args, raw))
    if origin is dict:
        if not isinstance(raw, dict):
            raise where.error(key, raw, "must be a table / JSON object")
        return {name: value(args[1], item, where, f"{key}.{name}", check=check) for name, item in raw.items()}
    raise TypeError(f"no data-file form for {hint!r} ({key})")  # a new field type: teach value()


_SCALARS = {
    bool: "must be true or false",
    int: "must be an integer",
    float: "must be a number",
    str: "must be a string",
}


def _scalar(hint: Any, raw: Any) -> Any:
    """``raw`` as ``bool``/``int``/``float``/``str`` if it is one (ints are floats too), else MISSING."""
    if hint is bool and isinstance(raw, bool):
        return raw
    if hint is int and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if hint is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            return float(raw)
        except OverflowError:  # an integer past the largest float
            return MISSING
    if hint is str and isinstance(raw, str):
        return raw
    return MISSING
