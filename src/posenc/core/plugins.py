"""Open registries: built-ins, run-time registrations, entry points and import specs, one mechanism.

posenc has two registries a user can extend, the encodings (:mod:`posenc.registry`, entry-point
group ``posenc.encodings``) and the benchmark's tasks (:mod:`posenc.tasks.task_registry`, group
``posenc.tasks``). Both take an outside class the same three ways, through a :class:`PluginGroup`:

1. registered at run time, ``group.register(name, cls)`` (a notebook, a test);
2. an import spec ``"package.module:Class"`` wherever a name is taken;
3. an entry point of an installed distribution (``[project.entry-points."posenc.tasks"]
   sort = "mypkg.tasks:Sort"``), read lazily: only when a name is not found otherwise, or
   when every entry is listed.

:func:`origin` says where a class comes from (its import spec, the distribution that installs
it and that distribution's version, a hash of the code its behaviour depends on); the benchmark
keeps it in every record, so that records of a changed class are not mixed with new ones.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from posenc.core import trust
from posenc.core.checks import did_you_mean
from posenc.core.code_hash import code_sha256
from posenc.core.errors import PosencError, PosencTypeError

T = TypeVar("T")
Check = Callable[[Any, str], Any]  # (object, where it came from) -> the checked class, or raise


def check_name(name: Any, noun: str) -> str:
    """A registry name: a non-empty string without ``:`` (which marks an import spec) or spaces."""
    if not isinstance(name, str):
        raise PosencTypeError(f"{noun} name must be a string, got {type(name).__name__}")
    if not name or ":" in name or any(c.isspace() for c in name):
        raise PosencError(
            f"{noun} name must be a non-empty string without ':' or spaces (':' marks an import "
            f"spec 'package.module:Class'), got {name!r}"
        )
    return name


def is_spec(text: Any) -> bool:
    """Whether ``text`` is an import spec ``"package.module:Class"`` rather than a registry name."""
    return isinstance(text, str) and ":" in text


def import_object(spec: str, noun: str) -> Any:
    """The object an import spec ``"package.module:Name"`` (or ``:Outer.Inner``) names; a module
    that does not import or a missing attribute raises PosencError naming the spec. While posenc
    reads data without the user's consent to its code, a spec is refused (:mod:`posenc.core.trust`)."""
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname or ":" in qualname:
        raise PosencError(f"import spec must look like 'package.module:Class', got {spec!r}")
    trust.check_import(spec, noun)
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001  (SystemExit or KeyboardInterrupt raised by the module too)
        raise PosencError(f"{noun} {spec!r}: cannot import module {module_name!r}: {_raised(exc)}") from exc
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise PosencError(f"{noun} {spec!r}: {obj.__name__!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def _raised(exc: BaseException) -> str:
    """``Type: message`` of what an import raised; a module that exits the interpreter on import
    (``sys.exit``, ``SystemExit``, ``KeyboardInterrupt``) is named as doing so."""
    if isinstance(exc, Exception):
        return f"{type(exc).__name__}: {exc}"
    return f"it raised {type(exc).__name__}({exc!s}) on import (a module must not exit the interpreter)"


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


class PluginGroup(Generic[T]):
    """One open registry: ``builtins`` (a literal dict), run-time registrations, the entry points
    of ``group`` and import specs, every lookup through :meth:`get`.

    Args:
        group: the entry-point group (``"posenc.encodings"``).
        noun: what an entry is, for messages (``"encoding"``).
        builtins: name -> class, posenc's own (never shadowed).
        extra_names: built-in names that are not classes (the tasks' ``"lm"``): listed by
            :meth:`names`, refused as names to register, never looked up here.
        check: ``check(obj, source)`` returns ``obj`` if it is an acceptable class, else raises
            naming ``source``.
    """

    def __init__(
        self,
        group: str,
        noun: str,
        builtins: Mapping[str, T],
        check: Check,
        *,
        extra_names: tuple[str, ...] = (),
    ) -> None:
        self.group = group
        self.extra_names = extra_names  # names the owner handles itself (listed, never looked up here)
        self.noun = noun
        self.builtins = builtins
        self._check = check
        self.registered: dict[str, T] = {}
        self.loaded: dict[str, T] = {}  # entry points already imported
        self._points: dict[str, importlib.metadata.EntryPoint] | None = None
        self._points_path: tuple[str, ...] = ()

    def check(self, obj: Any, source: str) -> T:
        """``obj`` if it is an acceptable class (the group's ``check``), else PosencError naming
        ``source``; a class whose metaclass raises while it is looked at (its ``repr``, an attribute,
        ``issubclass``) is refused the same way, naming what it raised, never a traceback."""
        try:
            return self._check(obj, source)
        except PosencError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (whatever a third-party metaclass raises)
            raise PosencError(
                f"{source} cannot be checked as {_article(self.noun)} class: looking at it raised {_raised(exc)}"
            ) from exc

    # -- run-time registrations ---------------------------------------------------------------

    def register(self, name: str, cls: Any, *, replace: bool = False) -> T:
        name = check_name(name, self.noun)
        cls = self.check(cls, f"the {self.noun} registered as {name!r}")
        if name in self.extra_names:
            raise PosencError(f"{name!r} is a built-in {self.noun}; register yours under another name")
        if name in self.builtins:
            builtin: Any = self.builtins[name]
            raise PosencError(
                f"{name!r} is a built-in {self.noun} ({getattr(builtin, '__qualname__', builtin)}); "
                "register yours under another name"
            )
        old: Any = self.registered.get(name)
        if old is not None and old is not cls and not replace:
            raise PosencError(
                f"{name!r} is already registered for {old.__module__}:{old.__qualname__}; pass "
                "replace=True to register another class under it"
            )
        self.registered[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        if name not in self.registered:
            raise PosencError(
                f"{name!r} was not registered (registered {self.noun}s: {sorted(self.registered) or 'none'})"
            )
        del self.registered[name]

    # -- entry points -------------------------------------------------------------------------

    def discover(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The group's entry points of the installed distributions (not yet imported), read once
        per ``sys.path`` (a path added later is read then); :meth:`refresh` forgets them."""
        path = tuple(sys.path)
        if self._points is None or path != self._points_path:
            found: dict[str, importlib.metadata.EntryPoint] = {}
            for point in importlib.metadata.entry_points(group=self.group):
                found.setdefault(point.name, point)  # the first on sys.path wins, as for imports
            self._points, self._points_path = found, path
            self.loaded.clear()
        return self._points

    def refresh(self) -> None:
        """Read the entry points again on the next lookup (after installing a package in-process)."""
        self._points = None
        self.loaded.clear()

    def describe_point(self, name: str, point: importlib.metadata.EntryPoint) -> str:
        where = f"entry point {name!r} = {point.value!r} (group {self.group!r}"
        dist = getattr(point, "dist", None)
        return where + (f", distribution {dist.name!r})" if dist is not None else ")")

    def distribution(self, name: str) -> str | None:
        """The distribution whose entry point ``name`` is (None for any other name)."""
        point = self.discover().get(name) if not is_spec(name) and name not in self.registered else None
        dist = getattr(point, "dist", None) if name not in self.builtins else None
        return None if dist is None else dist.name

    def clashes(self) -> list[str]:
        """Entry points that take a built-in's name (each one a broken installation), as messages."""
        return list(self.clashes_by_name().values())

    def clashes_by_name(self) -> dict[str, str]:
        """:meth:`clashes` by the name the entry point takes."""
        return {
            name: f"{self.describe_point(name, point)} uses the name of a built-in {self.noun}, which that "
            "name always means (the entry point is left out); rename it in that distribution"
            for name, point in self.discover().items()
            if name in self.builtins or name in self.extra_names
        }

    def load(self, name: str, point: importlib.metadata.EntryPoint) -> T:
        cls = self.loaded.get(name)
        if cls is not None:
            return cls
        where = self.describe_point(name, point)
        if name in self.builtins or name in self.extra_names:
            raise PosencError(
                f"{where} uses the name of a built-in {self.noun}; rename it in that distribution"
            )
        try:
            obj = point.load()
        except BaseException as exc:  # noqa: BLE001  (any failure of a third-party import, sys.exit too)
            raise PosencError(f"{where} cannot be loaded: {_raised(exc)}") from exc
        cls = self.loaded[name] = self.check(obj, where)
        return cls

    # -- import specs -------------------------------------------------------------------------

    def resolve_spec(self, spec: str) -> T:
        """Import the class an import spec ``"package.module:Class"`` (or ``:Outer.Inner``) names."""
        return self.check(import_object(spec, f"{self.noun} spec"), f"{self.noun} spec {spec!r}")

    def spec_of(self, cls: Any) -> str:
        """``"module:qualname"`` of ``cls``, checked to import back to it in another process."""
        module, qualname = cls.__module__, cls.__qualname__
        if "<locals>" in qualname or module in ("__main__", "__mp_main__"):
            raise PosencError(
                f"{self.noun} class {qualname} (module {module}) cannot be imported by another process; "
                "define it at the top level of an importable module to use it in spawned workers"
            )
        spec = f"{module}:{qualname}"
        if self.resolve_spec(spec) is not cls:
            raise PosencError(
                f"import spec {spec!r} does not give back {qualname} (was the module reloaded?)"
            )
        return spec

    def import_for(self, name: str) -> str | None:
        """What a fresh process (a spawned or Ray worker) needs to find ``name``: the import spec of
        a name registered only in this process; None for a name every process resolves itself (a
        built-in, an entry point, an import spec; the caller has resolved it). A registered class no
        other process can import raises PosencError saying so."""
        if name in self.registered:
            return self.spec_of(self.registered[name])
        return None

    # -- lookup -------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every name, without importing an entry point: built-ins, registered, entry points."""
        return list(dict.fromkeys([*self.builtins, *self.registered, *self.discover(), *self.extra_names]))

    def get(self, name: str) -> T:
        """The class of a name (built-in, registered, entry point) or an import spec; unknown
        names raise PosencError with a suggestion."""
        if not isinstance(name, str):
            raise PosencTypeError(f"{self.noun} name must be a string, got {type(name).__name__}")
        cls = self.builtins.get(name) or self.registered.get(name)
        if cls is not None:
            return cls
        if is_spec(name):
            return self.resolve_spec(name)
        point = self.discover().get(name)
        if point is not None:
            return self.load(name, point)
        names = self.names()
        raise PosencError(
            f"unknown {self.noun} {name!r}{did_you_mean(name, names)} (valid: {', '.join(names)}; or an "
            "import spec 'package.module:Class')"
        )

    def broken(self) -> dict[str, str]:
        """The entry points that cannot be loaded (or take a built-in's name), by name: why, in one
        line naming the entry point and its distribution. The others are loaded (and kept)."""
        out = self.clashes_by_name()
        for name, point in self.discover().items():
            if name in out or name in self.registered:
                continue
            try:
                self.load(name, point)
            except PosencError as exc:
                out[name] = str(exc)
        return out

    def lookup(self, name: str) -> T | None:
        """The class of a registry name (not a spec), or None when no entry has that name."""
        cls = self.builtins.get(name) or self.registered.get(name)
        if cls is not None:
            return cls
        point = self.discover().get(name)
        return None if point is None else self.load(name, point)

    def all(
        self, *, builtin_only: bool = False, on_error: Callable[[str], None] | None = None
    ) -> dict[str, T]:
        """Every entry by name, in order: built-ins, registered, entry points (loaded now).

        An entry point under a built-in's name is left out, alone (the built-in is what the name
        means everywhere), and said through ``on_error`` (else a warning). An entry point that
        cannot be loaded raises PosencError naming it, or with ``on_error`` is said there and
        left out, so that one broken package does not hide the others.
        """
        out = dict(self.builtins)
        if builtin_only:
            return out
        out.update(self.registered)
        for message in self.clashes():
            if on_error is not None:
                on_error(message)
            else:
                warnings.warn(message, stacklevel=3)
        for name, point in self.discover().items():
            if name in out or name in self.extra_names:  # built-ins and registrations come first
                continue
            try:
                out[name] = self.load(name, point)
            except PosencError as exc:
                if on_error is None:
                    raise
                on_error(str(exc))
        return out


# ---------------------------------------------------------------------------
# Where a class comes from (kept in every benchmark record).
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _source_sha256(module: Any) -> str | None:
    try:
        path = inspect.getsourcefile(module)
    except TypeError:  # a built-in module
        return None
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def origin(cls: Any, distribution: str | None = None) -> dict[str, Any]:
    """Where ``cls`` comes from: ``{"class": "module:qualname", "distribution": name | None,
    "version": version | None, "source_sha256": sha256 of its module's source file | None,
    "code_sha256": sha256 of what its behaviour depends on | None}``.

    The distribution is ``distribution`` when given (an entry point's), else the installed one
    that provides the class's top-level module (None for a module found on ``sys.path`` only).
    ``code_sha256`` (:func:`posenc.core.code_hash.code_sha256`) changes with an edit of the class, of
    the definitions of its module it uses, of its bases outside posenc or of a module of its own
    package it imports, and not with an edit elsewhere in its file; so an edited class in an
    editable install is told from the one a record was made with. ``source_sha256`` is the whole
    file's (what records kept before ``code_sha256``).
    """
    module_name = cls.__module__
    if distribution is None:
        dists = _distributions().get(module_name.split(".")[0]) or []
        distribution = dists[0] if dists else None
    version = None
    own: frozenset[str] = frozenset()
    if distribution is not None:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = None
        own = frozenset(top for top, dists in _distributions().items() if distribution in dists)
    return {
        "class": f"{module_name}:{cls.__qualname__}",
        "distribution": distribution,
        "version": version,
        "source_sha256": _source_sha256(sys.modules.get(module_name)),
        "code_sha256": code_sha256(cls, own),
    }


def forget_distributions() -> None:
    """Read the installed distributions again on the next :func:`origin` (after an install)."""
    _distributions.cache_clear()
