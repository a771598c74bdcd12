"""Reading a profile: a TOML file (a shipped name or a path) with what it ``extends`` under it, then
``--set KEY=VALUE`` items and the command line's options on top (:class:`ProfileOptions`), every
value typed from the dataclasses' own annotations (:mod:`posenc.core.datafiles`), its range
checked (:data:`~posenc.compare.profile.definition.RANGES`) and then everything the types cannot
say (:func:`~posenc.compare.profile.profile_checks.checked`): :func:`load_profile`.

The shipped profiles (``posenc/compare/profiles/NAME.toml``) are :data:`PROFILES`, each read when
it is first asked for.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from posenc import presets
from posenc.compare.profile.definition import (
    ALL,
    ELEMENT_RANGES,
    FILE_KEYS,
    MAX_FILE_BYTES,
    OWN_KEYS,
    POSITIVE,
    RANGES,
    TRAIN_TABLES,
    Bounds,
    KeySources,
    Profile,
    dotted,
)
from posenc.compare.profile.profile_checks import checked
from posenc.core import untrusted
from posenc.core.checks import check_choice, did_you_mean
from posenc.core.datafiles import MISSING, Where, check_keys, typed
from posenc.core.dotted_keys import parse_set, set_key
from posenc.core.errors import PosencError
from posenc.records.spec import ModelSpec
from posenc.tasks.task_registry import sequence_task_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (the cli extra installs it)
    import tomli as tomllib


def _read_table(text: str, where: Where) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PosencError(f"{where.source}: not a valid TOML file ({exc})") from None


def shipped_dir():
    """The directory of the shipped profile files (an importlib.resources traversable)."""
    return resources.files("posenc.compare").joinpath("profiles")


def shipped_names() -> tuple[str, ...]:
    """The names of the shipped profiles (their file names without ``.toml``), sorted."""
    return tuple(sorted(p.name[: -len(".toml")] for p in shipped_dir().iterdir() if p.name.endswith(".toml")))


def _source(ref: str | os.PathLike, relative_to: Path | None) -> tuple[str, str, str, Path | None]:
    """``(name, text, label for errors, directory)`` of a shipped name or a file path."""
    if isinstance(ref, str) and not ref.endswith(".toml") and os.sep not in ref and "/" not in ref:
        if ref not in shipped_names():
            raise PosencError(
                f"no shipped profile {ref!r}; shipped: {list(shipped_names())}{did_you_mean(ref, shipped_names())}"
            )
        return ref, shipped_dir().joinpath(f"{ref}.toml").read_text(encoding="utf-8"), f"{ref}.toml", None
    path = Path(ref)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    try:
        # a regular file only (a FIFO would block the open, a device read forever), and bounded
        with untrusted.open_regular(path) as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        if exc.strerror == "not a regular file" or not os.path.isfile(path):
            raise PosencError(f"cannot read profile file {path}: {untrusted.what_is(path)}") from None
        raise PosencError(f"cannot read profile file {path}: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise PosencError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB, not a profile file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PosencError(f"{path}: not a text file (UTF-8)") from None
    return path.stem, text, str(path), path.parent


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: tables merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _table_of(
    ref: str | os.PathLike, relative_to: Path | None, seen: tuple[str, ...]
) -> tuple[str, str, dict[str, Any]]:
    """``(name, label, merged table)`` of a profile file, with what it extends under it."""
    name, text, label, directory = _source(ref, relative_to)
    if label in seen:
        raise PosencError(f"{label}: extends itself (through {' -> '.join(seen)})")
    where = Where(label)
    table = _read_table(text, where)
    check_keys(table, Profile, where, extra=FILE_KEYS)  # in this file's own table, before merging
    parent = table.pop("extends", None)
    if parent is None:
        return name, label, table
    if not isinstance(parent, str):
        raise where.error("extends", parent, "must be a shipped profile name or a path to a .toml file")
    _, _, base = _table_of(parent, directory, (*seen, label))
    return name, label, _merge({k: v for k, v in base.items() if k not in OWN_KEYS}, table)


# ---------------------------------------------------------------------------
# What changes a file: ``--set KEY=VALUE`` items, then options (``--seeds``, ...).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """A command-line option that sets one key of a profile, on top of the file and ``--set``;
    an error about the key names the option: ``--seeds: seeds = [-1]: every value must be >= 0 ...``."""

    flag: str  # the option as the user wrote it, e.g. "--seeds"
    key: str  # the dotted key it sets, e.g. "seeds", "eval.sliding_stride"
    value: Any  # as a file writes it (a list for list keys)
    add: bool = False  # a list key: the values join the profile's own (once each) instead of replacing them


#: The options of ``posenc compare`` that set a key of the profile, by :class:`ProfileOptions`
#: field: ``(flag, dotted key, add)``; ``add``: a list key whose values join the profile's own.
OPTION_KEYS: dict[str, tuple[str, str, bool]] = {
    "encodings": ("--encodings", "encodings", False),
    "tasks": ("--tasks", "tasks", False),
    "seeds": ("--seeds", "seeds", False),
    "workers": ("--workers", "workers", False),
    "variants": ("--variants", "variants", True),
    "schedules": ("--schedules", "schedules", True),
    "scalings": ("--scalings", "scalings", False),
    "kv_heads": ("--kv-heads", "model.num_kv_heads", False),
    "finetune": ("--finetune", "finetune", False),
    "lm_protocol": ("--lm-protocol", "eval.lm_protocol", False),
    "sliding_stride": ("--sliding-stride", "eval.sliding_stride", False),
    "device": ("--device", "device", False),
    "precision": ("--precision", "precision", False),
}
#: Keys an option sets that mean something only with another key's value: ``key -> (key, value)``.
OPTION_NEEDS: dict[str, tuple[str, Any]] = {"eval.sliding_stride": ("eval.lm_protocol", "sliding")}


@dataclass(frozen=True)
class ProfileOptions:
    """The options of ``posenc compare`` that change a profile, parsed (lists split) but not
    checked: :func:`load_profile` applies them on top of the file and ``--set`` and checks every
    value once, and an error about a key one of them set names it
    (``--seeds: seeds = [-1]: every value must be >= 0 and <= ...``). None: not given."""

    encodings: Sequence[str] | None = None
    tasks: Sequence[str] | None = None
    seeds: Sequence[int] | None = None
    workers: int | None = None
    variants: Sequence[str] | None = None  # added to the profile's own
    schedules: Sequence[str] | None = None  # added to the profile's own
    scalings: Sequence[str] | None = None  # RoPE scalings, "yarn:4" (replace the profile's own)
    kv_heads: int | str | None = None  # a divisor of model.num_heads, or a preset name (its grouping)
    finetune: int | None = None
    lm_protocol: str | None = None
    sliding_stride: int | None = None  # needs lm_protocol "sliding"
    device: str | None = None
    precision: str | None = None

    def options(self) -> list[Option]:
        """One :class:`Option` per option given, in the order of :data:`OPTION_KEYS`."""
        out = []
        for name, (flag, key, add) in OPTION_KEYS.items():
            value = getattr(self, name)
            if value is not None:
                value = list(value) if isinstance(value, (list, tuple)) else value
                out.append(Option(flag, key, value, add))
        return out

    def flags(self) -> dict[str, str]:
        """``{key: flag}`` of the options given, to name them in errors raised after loading
        (the device's, by :func:`posenc.compare.compare`)."""
        return {option.key: option.flag for option in self.options()}


def _set_keys(items: Sequence[str]) -> list[str]:
    """The dotted keys ``--set`` items set, as errors name them."""
    return [dotted(*set_key(item)[0]) for item in items]


def _apply_options(table: dict[str, Any], options: Sequence[Option]) -> dict[str, Any]:
    """``table`` with each option's value at its key (added to a list key's, with ``add``)."""
    table = _merge(table, {})
    for option in options:
        *path, last = option.key.split(".")
        node = table
        for part in path:
            child = node.get(part, {})
            if not isinstance(child, dict):
                raise Where(option.flag).error(part, child, f"must be a table to hold {option.key}")
            node[part] = node = dict(child)
        if option.add:
            current = node.get(last, [])
            if not isinstance(current, list):
                raise Where(option.flag).error(option.key, current, "must be a list to add to")
            added = list(current)
            for value in option.value:
                if value not in added:
                    added.append(value)
            node[last] = added
        else:
            node[last] = option.value
    return table


def load_profile(
    source: str | os.PathLike,
    overrides: tuple[str, ...] | list[str] = (),
    options: Sequence[Option] | ProfileOptions = (),
) -> Profile:
    """The profile in ``source``: a shipped name (``"quick"``) or the path of a TOML file, with
    ``overrides`` (``--set KEY=VALUE`` items, :func:`parse_set`) and then ``options`` (the command
    line's, :class:`ProfileOptions`) on top, every value checked (see the module's doc); an error
    about a key an override or an option set names it. The profile holds what the checks resolved
    (:attr:`Profile.resolved`: each encoding's class, each scaling and variant parsed)."""
    if isinstance(options, ProfileOptions):
        options = options.options()
    name, label, table = _table_of(source, None, ())
    if overrides:
        changes = parse_set(overrides)
        check_keys(changes, Profile, Where("--set"), extra=())
        table = _merge(table, changes)
    setters = [(key, "--set") for key in _set_keys(overrides)]
    if options:
        table = _apply_options(table, options)
        setters += [(option.key, option.flag) for option in options]
    where = KeySources(label, setters)
    table = _preset_kv_heads({"name": name, "description": "", "why": "", **_one_rate(table)}, where)
    table = {"model": {}, "task_train": {}, "lm_train": {}, "eval": {}, **_raw(table, where)}
    profile = typed(
        Profile, table, where, check=lambda cls, key, value, raw: _ranges(cls, key, value, raw, where)
    )
    if profile.eval.scales and "lengths" in table["eval"]:
        raise where.error(
            "eval.lengths", table["eval"]["lengths"],
            "set either eval.lengths (n for every task) or eval.scales (multiples of each task's trained "
            "length in tokens), not both; a file extending one that sets scales writes scales = [] to give lengths",
        )  # fmt: skip
    profile = checked(profile, where)
    _check_needs(profile, options)
    return profile


def _check_needs(profile: Profile, options: Sequence[Option]) -> None:
    """An option whose key means something only with another key's value (:data:`OPTION_NEEDS`)."""
    flags = {key: flag for flag, key, _ in OPTION_KEYS.values()}
    for option in options:
        if option.key not in OPTION_NEEDS:
            continue
        key, value = OPTION_NEEDS[option.key]
        found = _value_at(profile, key)
        if found != value:
            how = f"{flags[key]} {value}" if key in flags else f"{key} = {value!r}"
            raise PosencError(f"{option.flag} needs {how} ({key} is {found!r})")


def _value_at(obj: Any, key: str) -> Any:
    """The value of dotted ``key`` (``eval.lm_protocol``) in a profile."""
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _preset_kv_heads(table: dict[str, Any], where: Where) -> dict[str, Any]:
    """``model.num_kv_heads`` given as a preset name -> the key/value heads of the table's
    ``model.num_heads`` grouped as the preset's (:func:`posenc.presets.kv_heads`)."""
    model = table.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("num_kv_heads"), str):
        return table
    name = model["num_kv_heads"]
    num_heads = model.get("num_heads", ModelSpec.num_heads)
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        return table  # the check of num_heads names it
    try:
        heads = presets.kv_heads(name.strip(), num_heads)
    except PosencError as exc:
        known = name.strip() in presets.PRESETS  # a preset whose grouping does not fit num_heads
        why = (
            str(exc)
            if known
            else f"must be an integer (a divisor of model.num_heads) or a preset name: {exc}"
        )
        raise where.error("model.num_kv_heads", name, why) from None
    return {**table, "model": {**model, "num_kv_heads": heads}}


# ---------------------------------------------------------------------------
# Values: typed from the dataclasses' own annotations (posenc.core.datafiles), then checked.
# ---------------------------------------------------------------------------

#: What ``"all"`` stands for, per key (as the typed value's raw form).
ALL_MEANS: dict[str, Any] = {
    "encodings": None,  # every registered encoding
    "variant_encodings": None,  # every additive one
    "randomized": ["*"],  # every encoding of the grid
    "tasks": sequence_task_names,  # every task of sequences (a function: read when a file is)
}


def _raw(table: dict[str, Any], where: Where) -> dict[str, Any]:
    """The file's spellings that are not the type's own: ``"all"``, ``tune_share`` as a table."""
    out = {}
    for key, value in table.items():
        means = ALL_MEANS.get(key, value) if value == ALL else value
        out[key] = list(means()) if callable(means) else means
    share = out.get("tune_share")
    if share is not None:
        if not isinstance(share, dict) or not all(isinstance(v, str) for v in share.values()):
            raise where.error("tune_share", share, 'must be a table of strings, e.g. { passkey = "copy" }')
        out["tune_share"] = [[task, tuned_on] for task, tuned_on in share.items()]
    return out


def _one_rate(table: dict[str, Any]) -> dict[str, Any]:
    """A one-rate ``lr_grid`` is the ``lr`` of each training table that sets none (every run
    trains at that rate; :func:`_check_learning_rates` refuses a table whose ``lr`` differs)."""
    grid = table.get("lr_grid")
    if not (isinstance(grid, list) and len(grid) == 1 and _is_rate(grid[0])):
        return table  # no one rate (or not a valid one: lr_grid's own check names it)
    out = dict(table)
    for part in TRAIN_TABLES:
        train = out.get(part, {})
        if isinstance(train, dict) and "lr" not in train:
            out[part] = {**train, "lr": grid[0]}
    return out


def _is_rate(value: Any) -> bool:
    """A number that can be a learning rate (a finite float > 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return POSITIVE.holds(value) and math.isfinite(float(value))
    except OverflowError:  # an integer past the largest float
        return False


def _ranges(cls: type, key: str, value: Any, raw: Any, where: Where) -> None:
    name = key.rsplit(".", 1)[-1]
    bad = _not_finite(value)
    if bad is not MISSING:
        path, number = bad
        raise where.error(f"{key}{path}", number, "must be a finite number (not nan or inf)")
    bounds = RANGES.get(cls, {}).get(name)
    if bounds is not None or (isinstance(value, int) and not isinstance(value, bool)):
        _in_range(value, bounds or Bounds(), where, key)
    bounds = ELEMENT_RANGES.get(cls, {}).get(name)
    if bounds is not None:
        for item in value:
            _in_range(item, bounds, where, key, whole=raw)


def _not_finite(value: Any, path: str = "") -> Any:
    """``(path inside value, number)`` of the first nan or inf in ``value``, else MISSING."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, tuple) else ()
    for index, item in items:
        found = _not_finite(item, f"{path}.{index}" if isinstance(value, dict) else f"{path}[{index}]")
        if found is not MISSING:
            return found
    return MISSING


def _in_range(value: Any, bounds: Bounds, where: Where, key: str, *, whole: Any = MISSING) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        bounds = bounds.capped()
    if not bounds.holds(value):
        what = "must be" if whole is MISSING else "every value must be"
        raise where.error(key, value if whole is MISSING else whole, f"{what} {bounds.text()}")


# ---------------------------------------------------------------------------
# The shipped profiles.
# ---------------------------------------------------------------------------


class ShippedProfiles(Mapping[str, Profile]):
    """Every shipped profile by name, each read from ``posenc/compare/profiles/NAME.toml`` when it
    is first asked for (its names need no reading): starting the command line reads none, so a
    task plug-in that cannot be imported breaks only the profiles that name it."""

    def __init__(self) -> None:
        self._loaded: dict[str, Profile] = {}

    def __getitem__(self, name: str) -> Profile:
        if name not in self._loaded:
            if name not in shipped_names():
                raise KeyError(name)
            self._loaded[name] = load_profile(name)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(shipped_names())

    def __len__(self) -> int:
        return len(shipped_names())


#: Every shipped profile, by name (read from ``posenc/compare/profiles/*.toml`` when first used).
PROFILES: Mapping[str, Profile] = ShippedProfiles()


def get_profile(name: str) -> Profile:
    return PROFILES[check_choice("profile", name, tuple(PROFILES))]
