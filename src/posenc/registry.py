"""The registry: every encoding posenc can build, by name. Everything iterates over it.

Three ways in, one lookup (:func:`get_encoding_class`):

1. **Built-ins**, the literal dict :data:`BUILTINS` below.
2. **Registered** at run time: ``posenc.register("mine", MyEncoding)`` (a notebook, a test).
3. **Entry points** of the group ``posenc.encodings``, which an installed package declares
   (``[project.entry-points."posenc.encodings"] mine = "mypkg.pe:MyEncoding"``); they are
   read lazily, only when a name is not found otherwise or when every encoding is listed.

Wherever a name is accepted, an import spec ``"package.module:Class"`` is too (``posenc.build``,
``build_for_model``, ``TransformerConfig``, schedules, ``posenc.hf.apply``). :func:`encoding_spec`
gives back what rebuilds a class in a fresh process (a spawned benchmark worker): its name when
every process knows it (built-in, entry point), else ``"module:qualname"``.

CLI listings, the README table, the contract tests, the report and the benchmark read
:func:`encodings` (``posenc.ENCODINGS`` is a read-only live view of it); nothing else
lists encodings by hand.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, overload

from posenc import (
    absolute,
    bias,
    contextual,
    hierarchical,
    multiaxis,
    multiaxis_bias,
    multiaxis_rotary,
    relative,
    rotary,
)
from posenc.checks import did_you_mean
from posenc.config import EncodingConfig
from posenc.encoding import KINDS, PositionalEncoding
from posenc.errors import PosencError, PosencTypeError

#: The entry-point group an installed package declares its encodings in.
ENTRY_POINT_GROUP = "posenc.encodings"

BUILTINS: dict[str, type[PositionalEncoding]] = {
    # --- absolute (additive): sinusoidal, scaled_sinusoidal, learned, hybrid, complex_order, integer_index ---
    **absolute.ENCODINGS,
    "hierarchical": hierarchical.Hierarchical,
    # --- none ---
    "nope": absolute.NoPE,
    # --- rotary ---
    "rope": rotary.RoPE,
    "xpos": rotary.XPos,
    # --- bias ---
    "alibi": bias.ALiBi,
    "t5": bias.T5RelativeBias,
    "kerple_log": bias.KerpleLog,
    "kerple_power": bias.KerplePower,
    "fire": bias.FIRE,
    "sandwich": bias.Sandwich,
    # --- relative ---
    "shaw": relative.Shaw,
    "transformer_xl": relative.TransformerXL,
    # --- contextual ---
    "cope": contextual.CoPE,
    # --- multi-axis positions (images, video, multimodal): additive sincos_axial, learned_axial;
    # --- rotary rope_axial, rope_mixed, mrope; bias alibi_2d ---
    **multiaxis.ENCODINGS,
    **multiaxis_rotary.ENCODINGS,
    **multiaxis_bias.ENCODINGS,
}

_registered: dict[str, type[PositionalEncoding]] = {}  # posenc.register(name, cls)
_entry_points: dict[str, importlib.metadata.EntryPoint] | None = None  # read once, see _discover
_entry_points_path: tuple[str, ...] = ()  # sys.path they were read under
_loaded: dict[str, type[PositionalEncoding]] = {}  # entry points already imported

E = TypeVar("E", bound=type[PositionalEncoding])


# ---------------------------------------------------------------------------
# What an encoding class must be.
# ---------------------------------------------------------------------------


def check_encoding_class(cls: Any, *, source: str) -> type[PositionalEncoding]:
    """Return ``cls`` if it is a concrete encoding class, else raise naming ``source``.

    Concrete: a subclass of :class:`~posenc.encoding.PositionalEncoding` with a ``kind`` in
    :data:`~posenc.encoding.KINDS` and a ``Config`` that is a dataclass inheriting
    :class:`~posenc.config.EncodingConfig`.
    """
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PosencTypeError(
            f"{source} is {cls!r}, not an encoding class (a subclass of posenc.PositionalEncoding)"
        )
    kind = getattr(cls, "kind", None)
    if kind not in KINDS:
        raise PosencTypeError(
            f"{source} ({cls.__qualname__}) has kind {kind!r}; subclass one of the kind base classes "
            f"(posenc.encoding: AdditiveEncoding, RotaryEncoding, ...) so its kind is one of {list(KINDS)}"
        )
    config = getattr(cls, "Config", None)
    if not (
        isinstance(config, type) and issubclass(config, EncodingConfig) and dataclasses.is_dataclass(config)
    ):
        raise PosencTypeError(
            f"{source} ({cls.__qualname__}) needs a Config: a @dataclass(frozen=True) that inherits "
            f"posenc.config.EncodingConfig, got {config!r}"
        )
    return cls


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise PosencTypeError(f"encoding name must be a string, got {type(name).__name__}")
    if not name or ":" in name or any(c.isspace() for c in name):
        raise PosencError(
            f"encoding name must be a non-empty string without ':' or spaces (':' marks an import "
            f"spec 'package.module:Class'), got {name!r}"
        )
    return name


# ---------------------------------------------------------------------------
# Registering at run time.
# ---------------------------------------------------------------------------


@overload
def register_encoding(name: str, cls: E, *, replace: bool = False) -> E: ...
@overload
def register_encoding(name: str, cls: None = None, *, replace: bool = False) -> Callable[[E], E]: ...
def register_encoding(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register ``cls`` under ``name``: ``posenc.register("mine", MyEncoding)``, or as a decorator
    ``@posenc.register("mine")``. Returns the class.

    A built-in name is refused; so is a name already registered for another class unless
    ``replace=True`` (re-running a notebook cell). The class must be a concrete encoding
    (:func:`check_encoding_class`). A spawned process does not see this registration: hand it
    :func:`encoding_spec` instead, which names the class by import path.
    """
    name = _check_name(name)
    if cls is None:
        return lambda c: register_encoding(name, c, replace=replace)
    cls = check_encoding_class(cls, source=f"the class registered as {name!r}")
    if name in BUILTINS:
        raise PosencError(
            f"{name!r} is a built-in encoding ({BUILTINS[name].__qualname__}); register yours under "
            "another name"
        )
    old = _registered.get(name)
    if old is not None and old is not cls and not replace:
        raise PosencError(
            f"{name!r} is already registered for {old.__module__}:{old.__qualname__}; pass replace=True "
            "to register another class under it"
        )
    _registered[name] = cls
    return cls


def unregister_encoding(name: str) -> None:
    """Forget a name given to :func:`register_encoding` (built-ins and entry points stay)."""
    if name not in _registered:
        raise PosencError(
            f"{name!r} was not registered with posenc.register (registered: {sorted(_registered) or 'none'})"
        )
    del _registered[name]


# ---------------------------------------------------------------------------
# Entry points and import specs.
# ---------------------------------------------------------------------------


def _discover() -> dict[str, importlib.metadata.EntryPoint]:
    """The ``posenc.encodings`` entry points of the installed distributions (not yet imported).

    Read once per ``sys.path`` (a path added later, e.g. a plugin directory, is read then);
    :func:`refresh` forgets what was read.
    """
    global _entry_points, _entry_points_path
    path = tuple(sys.path)
    if _entry_points is None or path != _entry_points_path:
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(point.name, point)  # the first on sys.path wins, as for imports
        _entry_points, _entry_points_path = found, path
        _loaded.clear()
    return _entry_points


def refresh() -> None:
    """Read the entry points again on the next lookup (after installing a package in-process)."""
    global _entry_points
    _entry_points = None
    _loaded.clear()


def _load_entry_point(name: str, point: importlib.metadata.EntryPoint) -> type[PositionalEncoding]:
    cls = _loaded.get(name)
    if cls is not None:
        return cls
    where = f"entry point {name!r} = {point.value!r} (group {ENTRY_POINT_GROUP!r}"
    dist = getattr(point, "dist", None)
    where += f", distribution {dist.name!r})" if dist is not None else ")"
    if name in BUILTINS:
        raise PosencError(f"{where} uses the name of a built-in encoding; rename it in that distribution")
    try:
        loaded = point.load()
    except Exception as exc:  # any import error of a third-party package: name the entry point
        raise PosencError(f"{where} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    cls = _loaded[name] = check_encoding_class(loaded, source=where)
    return cls


def is_spec(text: Any) -> bool:
    """Whether ``text`` is an import spec ``"package.module:Class"`` rather than a registry name."""
    return isinstance(text, str) and ":" in text


def resolve_spec(spec: str) -> type[PositionalEncoding]:
    """Import the class an import spec ``"package.module:Class"`` (or ``:Outer.Inner``) names."""
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname or ":" in qualname:
        raise PosencError(f"import spec must look like 'package.module:Class', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ModuleNotFoundError, or the module's own import failing
        raise PosencError(
            f"encoding spec {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise PosencError(f"encoding spec {spec!r}: {obj.__name__!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return check_encoding_class(obj, source=f"encoding spec {spec!r}")


def encoding_spec(encoding: str | type[PositionalEncoding] | PositionalEncoding) -> str:
    """What rebuilds this encoding's class in any fresh process (a ``spawn`` worker):
    a built-in or entry-point name as it is; a registered name, a class or an instance as
    ``"module:qualname"``.

    Refused, naming the reason: classes defined inside a function (``<locals>``) or in
    ``__main__`` (a worker imports its own ``__main__``), which no other process can import.
    """
    if isinstance(encoding, str):
        cls = get_encoding_class(encoding)
        if encoding in BUILTINS or encoding in _discover():
            return encoding
    elif isinstance(encoding, PositionalEncoding):
        cls = type(encoding)
    else:
        cls = check_encoding_class(encoding, source="encoding")
    for name, builtin in BUILTINS.items():
        if cls is builtin:
            return name
    module, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname or module in ("__main__", "__mp_main__"):
        raise PosencError(
            f"encoding class {qualname} (module {module}) cannot be imported by another process; "
            "define it at the top level of an importable module to use it in spawned workers"
        )
    spec = f"{module}:{qualname}"
    if resolve_spec(spec) is not cls:
        raise PosencError(f"import spec {spec!r} does not give back {qualname} (was the module reloaded?)")
    return spec


# ---------------------------------------------------------------------------
# Lookup and listing.
# ---------------------------------------------------------------------------


def get_encoding_class(name: str) -> type[PositionalEncoding]:
    """The class of a registry name (built-in, registered, entry point) or an import spec
    ``"package.module:Class"``; unknown names raise PosencError with a suggestion."""
    if not isinstance(name, str):
        raise PosencTypeError(f"encoding name must be a string, got {type(name).__name__}")
    cls = BUILTINS.get(name) or _registered.get(name)
    if cls is not None:
        return cls
    if is_spec(name):
        return resolve_spec(name)
    point = _discover().get(name)
    if point is not None:
        return _load_entry_point(name, point)
    names = list(BUILTINS) + list(_registered) + list(_discover())
    hint = did_you_mean(name, names)
    raise PosencError(
        f"unknown encoding {name!r}{hint} (valid: {', '.join(names)}; or an import spec 'package.module:Class')"
    )


def encodings(*, builtin_only: bool = False) -> dict[str, type[PositionalEncoding]]:
    """Every encoding by name, in order: built-ins, then registered, then entry points (loaded
    now; a broken one raises PosencError naming it). ``builtin_only``: the built-ins alone (the
    README's table). The one list that listings, the contract tests, the report and the
    benchmark iterate."""
    out = dict(BUILTINS)
    if builtin_only:
        return out
    out.update(_registered)
    for name, point in _discover().items():
        if name in BUILTINS or name not in out:  # a built-in's name taken by an entry point raises
            out[name] = _load_entry_point(name, point)
    return out


class EncodingsView(Mapping[str, type[PositionalEncoding]]):
    """``posenc.ENCODINGS``: a read-only, live mapping of :func:`encodings` (name -> class).

    Indexing takes registry names (not import specs; see :func:`get_encoding_class`). Add
    entries with :func:`register_encoding`, not by assignment.
    """

    def __getitem__(self, name: str) -> type[PositionalEncoding]:
        if not isinstance(name, str):
            raise KeyError(name)
        cls = BUILTINS.get(name) or _registered.get(name)
        if cls is not None:
            return cls
        point = _discover().get(name)
        if point is None:
            raise KeyError(name)
        return _load_entry_point(name, point)  # a broken entry point raises, naming it

    def __iter__(self) -> Iterator[str]:
        return iter(encodings())

    def __len__(self) -> int:
        return len(encodings())

    def __repr__(self) -> str:
        return f"ENCODINGS({', '.join(self)})"


ENCODINGS: Mapping[str, type[PositionalEncoding]] = EncodingsView()


# ---------------------------------------------------------------------------
# Building.
# ---------------------------------------------------------------------------


def build(name: str, **config: Any) -> PositionalEncoding:
    """Build a registered encoding (or an import spec): ``posenc.build("sinusoidal", dim=512)``."""
    cls = get_encoding_class(name)
    return cls(cls.Config.from_dict(config, owner=name))


def model_values(
    cls: type[PositionalEncoding],
    *,
    d_model: int,
    num_heads: int,
    head_dim: int | None = None,
    causal: bool | None = None,
) -> dict[str, Any]:
    """The Config fields of ``cls`` that the model fills in (its ``model_field``s) with the model's values."""
    values: dict[str, Any] = {
        "d_model": d_model,
        "num_heads": num_heads,
        "head_dim": head_dim or d_model // num_heads,
    }
    if causal is not None:
        values["bidirectional"] = not causal
    model = cls.Config.meanings("model")  # field -> the model value it takes
    return {field: values[value] for field, value in model.items() if value in values}


def build_for_model(
    name: str,
    *,
    d_model: int,
    num_heads: int,
    head_dim: int | None = None,
    causal: bool | None = None,
    **config: Any,
) -> PositionalEncoding:
    """Build ``name`` filling the model-level fields it declares (dim, head_dim, num_heads).

    ``causal`` (when given) also fills ``bidirectional = not causal`` for encodings that
    have that field (bias encodings: an encoder's bias is symmetric). Explicit ``config``
    entries win over the model's values.
    """
    cls = get_encoding_class(name)
    merged = model_values(cls, d_model=d_model, num_heads=num_heads, head_dim=head_dim, causal=causal)
    merged.update(config)
    return cls(cls.Config.from_dict(merged, owner=name))


def list_encodings(*, builtin_only: bool = False) -> list[dict[str, Any]]:
    """Name, kind, parameters (with defaults) and paper reference of every encoding."""
    return [
        {
            "name": name,
            "kind": cls.kind,
            "parameters": cls.Config.parameters(),
            "paper": cls.paper,
            "summary": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
        }
        for name, cls in encodings(builtin_only=builtin_only).items()
    ]


def encodings_markdown() -> str:
    """The README's encodings table (name | kind | parameters | paper) of the built-ins.

    ``scripts/update_readme_table.py`` writes it between the README's
    ``<!-- encodings-table:start -->`` / ``<!-- encodings-table:end -->`` markers.
    """

    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| name | kind | parameters | paper |", "|---|---|---|---|"]
    for row in list_encodings(builtin_only=True):
        params = ", ".join(k if v == "<required>" else f"{k}={v!r}" for k, v in row["parameters"].items())
        lines.append(f"| `{row['name']}` | {row['kind']} | {cell(params) or '—'} | {cell(row['paper'])} |")
    return "\n".join(lines) + "\n"
