"""Module paths of earlier releases that still import, for one release, with a DeprecationWarning.

posenc's ``__init__`` holds the one table (:data:`posenc.MOVED`: old module -> the module that
holds its contents now; :data:`posenc.MOVED_NAMES`: ``old.module.Name`` -> ``new.module.Name``
for a name that left its module or was renamed) and hands it to :func:`install`, which puts one
:class:`MovedModules` first on ``sys.meta_path``. It answers only the table's old paths (and
their submodules), so every other import goes to Python's own finders untouched:

- ``import posenc.rotary`` and ``from posenc.rotary import RoPE`` give the new module itself
  (``posenc.rotary is posenc.encoding.rotary``; nothing is loaded twice), or, where names left
  the module, a read-only view that finds each one where it went;
- ``posenc.rotary`` read as an attribute goes through the package's ``__getattr__`` to the
  same import.

Each old path warns once per process (a DeprecationWarning naming the new path, attributed to
the line that imported it); a name that left its module warns when it is read.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

_HERE = __file__


def _warn(message: str) -> None:
    """A DeprecationWarning attributed to the first frame outside the import machinery and posenc's
    alias code (the line that imported or read the old path)."""
    internal = (_HERE, sys.modules["posenc"].__file__, importlib.__file__)
    package = os.path.dirname(sys.modules["posenc"].__file__ or "")
    frame: types.FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            frame = frame.f_back  # warnings.warn skips the import system's frames itself
        elif name in internal or (
            frame.f_code.co_name == "__getattr__" and name.startswith(package + os.sep)
        ):
            # a package's __getattr__ that serves old paths (posenc.reference's) is alias code too
            frame, level = frame.f_back, level + 1
        else:
            break
    warnings.warn(message, DeprecationWarning, stacklevel=level)


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The finder and loader of the old module paths in ``moved`` (old -> new module) and the
    names in ``names`` (``old.module.Name`` -> ``new.module.Name``)."""

    def __init__(self, moved: Mapping[str, str], names: Mapping[str, str]) -> None:
        self.moved = moved
        self.names = names

    def target(self, fullname: str) -> str | None:
        """The module that ``fullname`` (an old path, or a submodule of one) is now, or None."""
        if fullname in self.moved:
            return self.moved[fullname]
        parent, _, leaf = fullname.rpartition(".")
        if parent in self.moved:
            return f"{self.moved[parent]}.{leaf}"
        return None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self.target(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        new = self.target(old)
        assert new is not None
        renamed = {
            name.rpartition(".")[2]: where
            for name, where in self.names.items()
            if name.rpartition(".")[0] == old
        }
        detail = ""
        if renamed:
            moved = sorted(n for n, where in renamed.items() if where.rpartition(".")[0] != new)
            detail = f" ({', '.join(moved)}: see posenc.MOVED_NAMES)" if moved else ""
        _warn(f"{old} is deprecated and will be removed in the next release; import {new}{detail}")
        found = importlib.import_module(new)
        # the import system reads the module back from sys.modules after exec_module
        sys.modules[old] = _view(old, found, renamed) if renamed else found


def _view(old: str, module: types.ModuleType, renamed: dict[str, str]) -> types.ModuleType:
    """A module ``old`` whose attributes are ``module``'s, and each name of ``renamed`` where it went."""
    view = types.ModuleType(old, f"Deprecated alias of {module.__name__} (see posenc.MOVED).")

    def __getattr__(name: str) -> Any:
        if name in renamed:
            where, _, attribute = renamed[name].rpartition(".")
            _warn(
                f"{old}.{name} is deprecated and will be removed in the next release; use {where}.{attribute}"
            )
            return getattr(importlib.import_module(where), attribute)
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(
                f"module {old!r} (now {module.__name__}) has no attribute {name!r}"
            ) from None

    def __dir__() -> list[str]:
        return sorted(set(dir(module)) | set(renamed))

    view.__getattr__ = __getattr__  # type: ignore[method-assign]
    view.__dir__ = __dir__  # type: ignore[method-assign]
    return view


def install(moved: Mapping[str, str], names: Mapping[str, str]) -> MovedModules:
    """Put one :class:`MovedModules` for this table first on ``sys.meta_path`` (once per process)."""
    for finder in sys.meta_path:
        if isinstance(finder, MovedModules) and finder.moved is moved:
            return finder
    finder = MovedModules(moved, names)
    sys.meta_path.insert(0, finder)
    return finder


def resolve(package: str, name: str, moved: Mapping[str, str]) -> types.ModuleType:
    """``package.name`` read as an attribute: the old module path imported (warning once), or
    AttributeError as for any missing attribute."""
    old = f"{package}.{name}"
    if old not in moved:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return importlib.import_module(old)


__all__ = ["MovedModules", "install", "resolve"]
