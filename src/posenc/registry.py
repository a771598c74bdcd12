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
import importlib.metadata  # noqa: F401  (tests patch registry.importlib.metadata.entry_points)
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, overload

from posenc.core.errors import PosencTypeError
from posenc.core.fields import EncodingConfig
from posenc.core.plugins import PluginGroup, check_name, is_spec  # noqa: F401  (is_spec: public here)
from posenc.encoding import absolute, bias, contextual, none, relative, rotary
from posenc.encoding.absolute.axial import AXIAL_MEMBERS
from posenc.encoding.absolute.sequence import SEQUENCE_MEMBERS
from posenc.encoding.base import KINDS, PositionalEncoding
from posenc.encoding.bias.alibi_2d import ALIBI_2D_MEMBERS
from posenc.encoding.rotary.rope_axial import AXIAL_ROTARY_MEMBERS

#: The entry-point group an installed package declares its encodings in.
ENTRY_POINT_GROUP = "posenc.encodings"

BUILTINS: dict[str, type[PositionalEncoding]] = {
    # --- absolute (additive): sinusoidal, scaled_sinusoidal, learned, hybrid, complex_order, integer_index ---
    **SEQUENCE_MEMBERS,
    "hierarchical": absolute.Hierarchical,
    # --- none ---
    "nope": none.NoPE,
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
    # --- multi-axis positions (images, video, multimodal), each with its kind ---
    **AXIAL_MEMBERS,
    **AXIAL_ROTARY_MEMBERS,
    **ALIBI_2D_MEMBERS,
}

E = TypeVar("E", bound=type[PositionalEncoding])


# ---------------------------------------------------------------------------
# What an encoding class must be.
# ---------------------------------------------------------------------------


#: The classes :func:`check_encoding_class` has passed: a class is checked once, where it enters (a
#: registry lookup, a grid's run spec, a model's config), and every later holder trusts that verdict
#: (its kind and Config are class attributes, set when the class is made). A weak set: a class made in
#: a test or a notebook may go away.
_CHECKED: weakref.WeakSet[type] = weakref.WeakSet()


def check_encoding_class(cls: Any, *, source: str) -> type[PositionalEncoding]:
    """Return ``cls`` if it is a concrete encoding class, else raise naming ``source``.

    Concrete: a subclass of :class:`~posenc.encoding.base.PositionalEncoding` with a ``kind`` in
    :data:`~posenc.encoding.base.KINDS` and a ``Config`` that is a dataclass inheriting
    :class:`~posenc.core.fields.EncodingConfig`. A class that passed once is returned at once
    (the set ``_CHECKED``).
    """
    if isinstance(cls, type) and cls in _CHECKED:
        return cls
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PosencTypeError(
            f"{source} is {cls!r}, not an encoding class (a subclass of posenc.PositionalEncoding)"
        )
    kind = getattr(cls, "kind", None)
    if kind not in KINDS:
        raise PosencTypeError(
            f"{source} ({cls.__qualname__}) has kind {kind!r}; subclass one of the kind base classes "
            f"(posenc.encoding.base: AdditiveEncoding, RotaryEncoding, ...) so its kind is one of {list(KINDS)}"
        )
    config = getattr(cls, "Config", None)
    if not (
        isinstance(config, type) and issubclass(config, EncodingConfig) and dataclasses.is_dataclass(config)
    ):
        raise PosencTypeError(
            f"{source} ({cls.__qualname__}) needs a Config: a @dataclass(frozen=True) that inherits "
            f"posenc.core.fields.EncodingConfig, got {config!r}"
        )
    _CHECKED.add(cls)
    return cls


#: The three ways in, one lookup (posenc.core.plugins): built-ins, registered, entry points, specs.
GROUP: PluginGroup[type[PositionalEncoding]] = PluginGroup(
    ENTRY_POINT_GROUP, "encoding", BUILTINS, lambda cls, source: check_encoding_class(cls, source=source)
)
_registered = GROUP.registered  # posenc.register(name, cls)
_loaded = GROUP.loaded  # entry points already imported


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
    name = check_name(name, "encoding")
    if cls is None:
        return lambda c: register_encoding(name, c, replace=replace)
    return GROUP.register(name, cls, replace=replace)


def unregister_encoding(name: str) -> None:
    """Forget a name given to :func:`register_encoding` (built-ins and entry points stay)."""
    GROUP.unregister(name)


# ---------------------------------------------------------------------------
# Entry points and import specs.
# ---------------------------------------------------------------------------


def refresh() -> None:
    """Read the entry points again on the next lookup (after installing a package in-process)."""
    GROUP.refresh()


def resolve_spec(spec: str) -> type[PositionalEncoding]:
    """Import the class an import spec ``"package.module:Class"`` (or ``:Outer.Inner``) names."""
    return GROUP.resolve_spec(spec)


def encoding_spec(encoding: str | type[PositionalEncoding] | PositionalEncoding) -> str:
    """What rebuilds this encoding's class in any fresh process (a ``spawn`` worker):
    a built-in or entry-point name as it is; a registered name, a class or an instance as
    ``"module:qualname"``.

    Refused, naming the reason: classes defined inside a function (``<locals>``) or in
    ``__main__`` (a worker imports its own ``__main__``), which no other process can import.
    """
    if isinstance(encoding, str):
        cls = get_encoding_class(encoding)
        if encoding in BUILTINS or encoding in GROUP.discover():
            return encoding
    elif isinstance(encoding, PositionalEncoding):
        cls = type(encoding)
    else:
        cls = check_encoding_class(encoding, source="encoding")
    for name, builtin in BUILTINS.items():
        if cls is builtin:
            return name
    return GROUP.spec_of(cls)


# ---------------------------------------------------------------------------
# Lookup and listing.
# ---------------------------------------------------------------------------


def get_encoding_class(name: str) -> type[PositionalEncoding]:
    """The class of a registry name (built-in, registered, entry point) or an import spec
    ``"package.module:Class"``; unknown names raise PosencError with a suggestion."""
    return GROUP.get(name)


def encodings(
    *, builtin_only: bool = False, on_error: Callable[[str], None] | None = None
) -> dict[str, type[PositionalEncoding]]:
    """Every encoding by name, in order: built-ins, then registered, then entry points (loaded
    now; a broken one raises PosencError naming it, or with ``on_error`` is said there and left
    out; one under a built-in's name is left out, said there or in a warning). ``builtin_only``:
    the built-ins alone (the README's table). The one list that listings, the contract tests,
    the report and the benchmark iterate."""
    return GROUP.all(builtin_only=builtin_only, on_error=on_error)


class EncodingsView(Mapping[str, type[PositionalEncoding]]):
    """``posenc.ENCODINGS``: a read-only, live mapping of :func:`encodings` (name -> class).

    Indexing takes registry names (not import specs; see :func:`get_encoding_class`). Add
    entries with :func:`register_encoding`, not by assignment.
    """

    def __getitem__(self, name: str) -> type[PositionalEncoding]:
        cls = GROUP.lookup(name) if isinstance(name, str) else None
        if cls is None:
            raise KeyError(name)
        return cls  # a broken entry point raises, naming it

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
    name: str | type[PositionalEncoding],
    *,
    d_model: int,
    num_heads: int,
    head_dim: int | None = None,
    causal: bool | None = None,
    **config: Any,
) -> PositionalEncoding:
    """Build ``name`` (a registry name, an import spec or a class) filling the model-level fields it
    declares (dim, head_dim, num_heads).

    ``causal`` (when given) also fills ``bidirectional = not causal`` for encodings that
    have that field (bias encodings: an encoder's bias is symmetric). Explicit ``config``
    entries win over the model's values.
    """
    cls = name if isinstance(name, type) else get_encoding_class(name)
    merged = model_values(cls, d_model=d_model, num_heads=num_heads, head_dim=head_dim, causal=causal)
    merged.update(config)
    return cls(cls.Config.from_dict(merged, owner=name if isinstance(name, str) else name_of(cls)))


class HoldsEncodingClass:
    """For a frozen dataclass with an ``encoding`` name and an ``encoding_class`` InitVar: the class
    of ``encoding`` (:meth:`resolved_class`), a documented cache of its registry lookup. Its maker
    fills it where it has the class (``encoding_class=``; ``dataclasses.replace`` carries it while
    ``encoding`` stays the same, and drops it for another encoding), else the first lookup does, and
    then it is kept (a frozen holder never changes its ``encoding``). The cache is
    ``__dict__["encoding_class"]``, an ``(encoding, class)`` pair: not data, so in no ``to_dict``,
    run id or comparison, and not pickled (another process resolves the name itself)."""

    encoding: Any

    def _hold_class(self, given: Any) -> None:
        """Fill the cache with the class the maker hands over (checked: :func:`check_encoding_class`,
        once per class), or leave it empty for the first lookup."""
        if isinstance(given, tuple):  # carried over by dataclasses.replace: (encoding, class)
            given = given[1] if given[0] == self.encoding else None
        if given is not None:
            given = check_encoding_class(given, source="encoding_class")
        vars(self)["encoding_class"] = None if given is None else (self.encoding, given)

    def resolved_class(self) -> type[PositionalEncoding]:
        """The class of ``encoding``: the one handed over, else looked up once and kept (the cache)."""
        held = vars(self).get("encoding_class")
        if held is None:
            held = vars(self)["encoding_class"] = (self.encoding, get_encoding_class(self.encoding))
        return held[1]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("encoding_class", None)
        return state


def name_of(cls: type[PositionalEncoding]) -> str:
    """The name an error message gives a class: its built-in or registered name, else its qualname."""
    for table in (BUILTINS, GROUP.registered):
        for name, known in table.items():
            if known is cls:
                return name
    return cls.__qualname__


def list_encodings(
    *, builtin_only: bool = False, on_error: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Name, kind, parameters (with defaults) and paper reference of every encoding
    (``on_error``: as :func:`encodings`)."""
    return [
        {
            "name": name,
            "kind": cls.kind,
            "parameters": cls.Config.parameters(),
            "paper": cls.paper,
            "summary": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
        }
        for name, cls in encodings(builtin_only=builtin_only, on_error=on_error).items()
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
