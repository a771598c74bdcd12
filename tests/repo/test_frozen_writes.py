"""Writes that go around an object's ``__setattr__`` are listed in docs/architecture.md, with why.

A frozen dataclass is written only by its generated ``__init__``; posenc writes one in two other
ways, each listed between the ``frozen-writes`` markers of docs/architecture.md: a given value put
in its normal form as the object is made (``object.__setattr__`` in ``__post_init__``: dataclasses
have no converters), and a cache of a value derived from the fields, kept out of equality, repr and
serialisation (``vars(self)[...] = ...``; a ``functools.cached_property`` needs no entry). This test
finds every ``object.__setattr__(...)`` call and every assignment to ``vars(self)[...]`` or
``self.__dict__[...]`` in ``src/posenc`` and fails on one whose enclosing function is not listed, on
an entry without a reason and on an entry that writes nothing any more.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "posenc"
KINDS = ("normal form", "resolved value", "cache")


def allowed(text: str) -> dict[str, tuple[str, str]]:
    """``{"module:Qualname": (kind, why)}`` from the table between the ``frozen-writes`` markers."""
    block = text.split("<!-- frozen-writes:start -->")[1].split("<!-- frozen-writes:end -->")[0]
    found = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"^`([\w.]+:[\w.]+)`$", cells[0]) if cells else []
        if len(cells) >= 3 and names:
            found[names[0]] = (cells[1], cells[2])
    return found


def _writes_around_setattr(node: ast.AST) -> bool:
    """``object.__setattr__(...)``, or an assignment to ``vars(self)[...]`` / ``self.__dict__[...]``."""
    if isinstance(node, ast.Call):
        func = node.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr == "__setattr__"
            and isinstance(func.value, ast.Name)
            and func.value.id == "object"
        )
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript):
                holder = target.value
                own_vars = (
                    isinstance(holder, ast.Call)
                    and isinstance(holder.func, ast.Name)
                    and holder.func.id == "vars"
                    and [getattr(a, "id", None) for a in holder.args] == ["self"]
                )
                own_dict = (
                    isinstance(holder, ast.Attribute)
                    and holder.attr == "__dict__"
                    and isinstance(holder.value, ast.Name)
                    and holder.value.id == "self"
                )
                if own_vars or own_dict:
                    return True
    return False


def sites(source: str, module: str) -> list[tuple[str, int]]:
    """``("module:Qualname of the enclosing function", line)`` for every such write in ``source``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if _writes_around_setattr(child):
                found.append((f"{module}:{'.'.join(scope) or '<module>'}", child.lineno))
            visit(child, scope)

    visit(ast.parse(source), [])
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def every_site() -> list[tuple[str, int]]:
    return [
        site
        for path in sorted(PACKAGE.rglob("*.py"))
        for site in sites(path.read_text(encoding="utf-8"), module_name(path))
    ]


def problems(found: list[tuple[str, int]], listed: dict[str, tuple[str, str]]) -> list[str]:
    out = [
        f"{where} (line {line}) writes around __setattr__: list it in docs/architecture.md with why, or "
        "compute the value where it enters"
        for where, line in found
        if where not in listed
    ]
    written = {where for where, _ in found}
    for where, (kind, why) in sorted(listed.items()):
        if where not in written:
            out.append(f"{where} is listed but writes nothing around __setattr__: remove its row")
        if kind not in KINDS:
            out.append(f"{where} is listed as {kind!r}, not one of {KINDS}")
        if not why:
            out.append(f"{where} is listed without a reason")
    return out


def test_every_write_around_setattr_is_listed_with_why():
    listed = allowed((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    found = problems(every_site(), listed)
    assert not found, "\n".join(found)


def test_the_rule_catches_what_it_forbids():
    """The check can fail: an unlisted write (each of the three forms), a stale entry, an entry
    without a reason or of no known kind; and it names the function that writes."""
    source = (
        "class A:\n"
        "    def __post_init__(self):\n"
        "        object.__setattr__(self, 'x', 1)\n"
        "    def cache(self):\n"
        "        vars(self)['y'] = 2\n"
        "        self.__dict__['z'] = 3\n"
        "        other.__dict__['w'] = 4\n"  # another object's dict: not a write around its own
        "def f(o):\n"
        "    object.__setattr__(o, 'x', 1)\n"
    )
    found = sites(source, "posenc.m")
    assert found == [
        ("posenc.m:A.__post_init__", 3),
        ("posenc.m:A.cache", 5),
        ("posenc.m:A.cache", 6),
        ("posenc.m:f", 9),
    ]
    table = (
        "<!-- frozen-writes:start -->\n| site | kind | why |\n|---|---|---|\n"
        "| `posenc.m:A.__post_init__` | normal form | plain values |\n| `posenc.m:A.cache` | cache |  |\n"
        "| `posenc.m:gone` | cache | was here |\n| `posenc.m:f` | stash | a stash |\n<!-- frozen-writes:end -->"
    )
    listed = allowed(table)
    assert listed["posenc.m:A.__post_init__"] == ("normal form", "plain values")
    messages = problems(found, listed)
    assert "posenc.m:A.cache is listed without a reason" in messages
    assert "posenc.m:gone is listed but writes nothing around __setattr__: remove its row" in messages
    assert any(m.startswith("posenc.m:f is listed as 'stash'") for m in messages)
    assert problems(found[:1], {})[0].startswith("posenc.m:A.__post_init__ (line 3) writes around")
