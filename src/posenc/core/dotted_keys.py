"""``KEY=VALUE`` items with a dotted TOML key, read into a nested table: the ``--set`` of
``posenc compare`` (a profile) and ``posenc extend`` (a protocol).

``model.d_model=128`` -> ``{"model": {"d_model": 128}}``. KEY is read by the TOML parser, so a part
may be quoted (``encoding_config."mypkg.pe:MyEncoding".base=2.0`` has three parts); VALUE is read
as a TOML value, and anything that is not one is a string. What the keys mean, and whether a
value fits, is for the file's own loader to check.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from posenc.core.errors import PosencError

SET_FORM = "--set takes KEY=VALUE with a dotted KEY (e.g. model.d_model=128)"


def _toml() -> ModuleType:
    """The TOML parser: the standard library's, or on Python 3.10 the same one as a package (the cli
    extra installs it; imported here, when an item is read, so that the library needs none)."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli


def set_key(item: str) -> tuple[tuple[str, ...], str]:
    """``(key parts, value text)`` of one ``KEY=VALUE`` item. The key is read by the TOML parser, so a
    part may be quoted: ``encoding_config."mypkg.pe:MyEncoding".base=2.0`` has three parts."""
    tomllib = _toml()
    for index, char in enumerate(item):
        if char != "=":
            continue
        key_text = item[:index]
        if not key_text.strip() or "\n" in key_text or "\r" in key_text:
            break
        try:
            node: Any = tomllib.loads(f"{key_text} = 0")
        except tomllib.TOMLDecodeError:
            continue  # an "=" inside a quoted part: the key goes on
        parts: list[str] = []
        while isinstance(node, dict) and len(node) == 1:
            ((part, node),) = node.items()
            parts.append(part)
        if node == 0 and parts:
            return tuple(parts), item[index + 1 :]
    raise PosencError(f"{SET_FORM}, got {item!r}")


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items -> a nested table (``model.d_model=128`` -> ``{"model": {"d_model": 128}}``).

    KEY is a TOML key (dotted; a part with dots or colons in quotes:
    ``'encoding_config."mypkg.pe:MyEncoding".base=2.0'``). VALUE is read as a TOML value
    (``128``, ``1e-3``, ``true``, ``["rope", "alibi"]``, ``"text"``); anything that is not one
    is a string (``--set eval.lm_protocol=sliding``).
    """
    tomllib = _toml()
    table: dict[str, Any] = {}
    for item in items:
        parts, text = set_key(item)
        try:
            parsed = tomllib.loads(f"value = {text}")
            value = parsed["value"] if set(parsed) == {"value"} else text.strip()
        except tomllib.TOMLDecodeError:
            value = text.strip()
        node = table
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise PosencError(f"--set {item!r}: {part!r} is set to a value and used as a table")
            node = child
        node[parts[-1]] = value
    return table


__all__ = ["SET_FORM", "parse_set", "set_key"]
