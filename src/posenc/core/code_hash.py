"""What a class's behaviour depends on, as one hash: :func:`code_sha256`.

A benchmark record keeps it for the classes of an outside encoding or task
(:func:`posenc.core.plugins.origin`), so that resuming a grid can tell a changed class from the one a
record was made with. What counts, read from the source files on disk:

- the class's own source (its ``class`` statement with decorators);
- the top-level definitions of its module that it names, and those they name in turn (a helper
  function, a constant, its Config);
- its bases outside posenc (and outside the standard library, torch and numpy), each the same way;
- every module of its own package (or of the distribution that installs it) that those
  definitions import, whole, and the package's modules those import in turn.

Anything else in the class's file (another class, a comment between two classes) does not count,
so an edit there does not mark the class as changed; an edit in a helper module it imports does.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: Top-level packages whose code is never hashed: posenc's own (its meaning is the benchmark
#: version), its dependencies, and the standard library.
NOT_HASHED = frozenset({"posenc", "torch", "numpy", "builtins", "__future__"}) | frozenset(
    sys.stdlib_module_names
)


def _top(module: str) -> str:
    return module.partition(".")[0]


@dataclass
class _Source:
    """One module's source text, its syntax tree and its top-level bindings (name -> statements)."""

    name: str
    text: str
    tree: ast.Module | None
    bindings: dict[str, list[ast.stmt]] = field(default_factory=dict)

    def segment(self, node: ast.stmt) -> str:
        """The statement's lines, decorators included."""
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno, *(d.lineno for d in decorators)])
        end = node.end_lineno or node.lineno
        return "\n".join(self.text.splitlines()[start - 1 : end])


def _simple_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking inside ``if`` / ``try`` / ``with`` blocks (not into defs)."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _simple_statements(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _simple_statements(handler.body)
        else:
            yield node


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Import):
        return [_bound(alias, True) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [_bound(alias, False) for alias in node.names if alias.name != "*"]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _path_of(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError, AttributeError):
            return None
        path = spec.origin if spec is not None else None
    return path if isinstance(path, str) and path.endswith(".py") else None


def _read(module_name: str, cache: dict[str, _Source | None]) -> _Source | None:
    if module_name in cache:
        return cache[module_name]
    source = None
    path = _path_of(module_name)
    if path is not None:
        try:
            with open(path, "rb") as handle:
                text = importlib.util.decode_source(handle.read())
        except (OSError, UnicodeDecodeError, SyntaxError):
            text = None
        if text is not None:
            try:
                tree: ast.Module | None = ast.parse(text)
            except SyntaxError:
                tree = None
            source = _Source(module_name, text, tree)
            if tree is not None:
                for node in _simple_statements(tree.body):
                    for name in _bound_names(node):
                        source.bindings.setdefault(name, []).append(node)
    cache[module_name] = source
    return source


def _is_module(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _bound(alias: ast.alias, dotted: bool) -> str:
    return alias.asname or (alias.name.partition(".")[0] if dotted else alias.name)


def _imported_modules(node: ast.stmt, source: _Source, name: str | None = None) -> list[str]:
    """The modules an ``import`` statement of ``source`` names (a ``from`` import of a submodule:
    the submodule); with ``name``, only those of the names it binds as ``name``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if name is None or _bound(alias, True) == name]
    if not isinstance(node, ast.ImportFrom):
        return []
    module = sys.modules.get(source.name)
    package = getattr(module, "__package__", None) or source.name.rpartition(".")[0]
    try:
        base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
    except (ImportError, ValueError):
        return []
    found = []
    for alias in node.names:
        if name is not None and _bound(alias, False) != name:
            continue
        sub = f"{base}.{alias.name}"
        found.append(sub if alias.name != "*" and _is_module(sub) else base)
    return found


class _Hasher:
    """The parts (label -> source text) a class depends on, collected from the source files."""

    def __init__(self, own: frozenset[str]) -> None:
        self.own = own  # top-level packages counted as the class's own (its package, its distribution's)
        self.parts: dict[str, str] = {}
        self.cache: dict[str, _Source | None] = {}

    def hashed(self, module: str) -> bool:
        return _top(module) not in NOT_HASHED

    def add_class(self, cls: type) -> None:
        source = _read(cls.__module__, self.cache)
        node = self._class_node(source, cls.__qualname__) if source is not None else None
        if source is None or node is None:  # no source to read the class from: its whole module
            self.add_module(cls.__module__)
            return
        self.parts[f"{cls.__module__}:{cls.__qualname__}"] = source.segment(node)
        self._add_inner_imports(source, node)
        self._add_names(source, _names_used(node))

    def _add_inner_imports(self, source: _Source, node: ast.AST) -> None:
        """The package's modules imported inside a definition (a method's ``import``)."""
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                for module in _imported_modules(inner, source):
                    if _top(module) in self.own and self.hashed(module):
                        self.add_module(module)

    @staticmethod
    def _class_node(source: _Source, qualname: str) -> ast.stmt | None:
        if source.tree is None or "<locals>" in qualname:
            return None
        body: list[ast.stmt] = source.tree.body
        node: ast.stmt | None = None
        for part in qualname.split("."):
            node = next(
                (
                    n
                    for n in _simple_statements(body)
                    if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part
                ),
                None,
            )
            if node is None:
                return None
            body = node.body
        return node

    def _add_names(self, source: _Source, names: set[str]) -> None:
        queue, seen = list(names), set(names)
        while queue:
            name = queue.pop()
            for index, node in enumerate(source.bindings.get(name, [])):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for module in _imported_modules(node, source, name):
                        if _top(module) in self.own and self.hashed(module):
                            self.add_module(module)
                    continue
                label = f"{source.name}:{name}" + (f"#{index}" if index else "")
                if label in self.parts:
                    continue
                self.parts[label] = source.segment(node)
                self._add_inner_imports(source, node)
                for used in _names_used(node) - seen:
                    seen.add(used)
                    queue.append(used)

    def add_module(self, module: str) -> None:
        if module in self.parts:
            return
        source = _read(module, self.cache)
        self.parts[module] = "" if source is None else source.text
        if source is None or source.tree is None:
            return
        for node in ast.walk(source.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _imported_modules(node, source):
                    if _top(name) in self.own and self.hashed(name):
                        self.add_module(name)


def code_sha256(cls: Any, own_packages: frozenset[str] = frozenset()) -> str | None:
    """sha256 of what ``cls``'s behaviour depends on (this module's docstring says what counts),
    or None for a class of posenc, the standard library, torch or numpy. ``own_packages``: more
    top-level packages whose modules count as the class's own (its distribution's)."""
    if not isinstance(cls, type) or _top(cls.__module__) in NOT_HASHED:
        return None
    classes = [c for c in cls.__mro__ if c is cls or _top(c.__module__) not in NOT_HASHED]
    parts: dict[str, str] = {}
    for each in classes:
        hasher = _Hasher(frozenset({_top(each.__module__)}) | own_packages)
        hasher.add_class(each)
        parts.update(hasher.parts)
    text = json.dumps(sorted(parts.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


__all__ = ["NOT_HASHED", "code_sha256"]
