"""A profile as a file again (``posenc compare --print-config``): :func:`dump_profile` writes every
key with tomlkit, and reading the text back gives the same profile, hence the same run ids."""

from __future__ import annotations

import dataclasses
from typing import Any

import tomlkit

from posenc.compare.profile.definition import ALL, Profile
from posenc.core.datafiles import data_fields
from posenc.core.errors import PosencError


def _file_value(key: str, value: Any) -> Any:
    """A typed value in the form a file writes it (the inverse of the loader's reading)."""
    if value is None:
        raise PosencError(f"{key} = None has no TOML form (a file leaves such a key out)")
    if isinstance(value, tuple):
        return [_file_value(key, item) for item in value]
    if isinstance(value, dict):
        return {k: _file_value(f"{key}.{k}", v) for k, v in value.items()}
    return value


def _file_table(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A dataclass as a file's table: None fields (whose default is None) left out, and fields
    that are not data (a profile's ``resolved``)."""
    out: dict[str, Any] = {}
    for f in data_fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out[f.name] = _file_table(value, f"{key}.")
        elif f.name in ("encodings", "variant_encodings") and value is None:
            out[f.name] = ALL
        elif f.name == "randomized" and value == ("*",):
            out[f.name] = ALL
        elif f.name == "tune_share":
            out[f.name] = {task: tuned_on for task, tuned_on in value}
        elif value is not None or f.default is not None:
            out[f.name] = _file_value(key, value)
    return out


#: Arrays longer than this are built in one call (tomlkit adds items one by one in quadratic time).
LONG_ARRAY = 64


def _long_arrays(value: Any) -> Any:
    """``value`` with each long flat array as a tomlkit array built in one call, in time linear in
    its size (its text ends ``..., 99,]``, a trailing comma TOML allows); the rest as it is."""
    if isinstance(value, dict):
        return {key: _long_arrays(item) for key, item in value.items()}
    if (
        isinstance(value, list)
        and len(value) > LONG_ARRAY
        and not any(isinstance(v, (list, dict)) for v in value)
    ):
        array = tomlkit.array()
        array.add_line(*value, indent="", newline=False)
        return array
    return value


def dump_profile(profile: Profile, header: str = "") -> str:
    """The TOML text of ``profile``: every key, no ``extends``; :func:`~posenc.compare.profile.load_profile`
    of it gives the same profile (its ``name`` is the file's, so ``name`` is left out). ``header``
    (lines) goes first, as comments. Written with tomlkit (compact arrays), in time linear in the
    profile's size."""
    data = _file_table(profile)
    data.pop("name")
    if profile.eval.scales:  # lengths come from scales (a file sets one or the other)
        data["eval"].pop("lengths")
    document = tomlkit.document()
    for line in header.splitlines():
        document.add(tomlkit.comment(line))
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for key, value in data.items():
        if key not in tables:
            document.add(key, _long_arrays(value))
    for key, value in tables.items():
        document.add(key, _long_arrays(value))
    return tomlkit.dumps(document)
