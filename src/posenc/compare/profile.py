"""The profiles of ``posenc compare``: each a TOML file, loaded into a typed :class:`Profile`.

| profile | budget | grid |
|---|---|---|
| ``smoke`` | seconds | 2 encodings, copy + LM, tiny model, 3 seeds; exercises every code path (tests) |
| ``quick`` | about 9 min on 2 idle cores, figures and report included (timed from a fresh clone: the README) | the five encodings the NoPE paper ranks (the ALiBi paper's four among them) + RoPE's context extensions, copy + passkey + LM, 3 seeds |
| ``standard`` | <= 60 min on 2 cores (measured: docs/benchmark.md) | every registered encoding + randomized sinusoidal and RoPE, copy + passkey + LM, 3 seeds |
| ``notes`` | about 7 min on 2 idle cores (measured: docs/benchmark.md) | sinusoidal + learned with the architecture variants, scaled_sinusoidal, integer positions, RoPE, T5, ALiBi; copy, 3 seeds |
| ``full`` | many hours (not timed) | every encoding and task, 5 seeds, default *and* scaled variants, randomized variants, architecture variants |

The shipped files are ``posenc/compare/profiles/NAME.toml``; ``quick.toml`` sets every key
with a comment, so it is the one to copy. A profile file's keys are the fields of
:class:`Profile`, and its tables ``[model]``, ``[task_train]``, ``[lm_train]`` and ``[eval]``
the fields of :class:`~posenc.records.spec.ModelSpec`, :class:`~posenc.records.spec.TrainSpec`
and :class:`~posenc.records.spec.EvalSpec`: the same names as in every run record's
``spec``. A key left out takes its default. ``extends = "quick"`` starts from another
profile (a shipped name, or a path relative to the file): tables merge key by key, any
other value is replaced. ``"all"`` stands for every registered encoding (``encodings``),
every additive one (``variant_encodings``) or every encoding of the grid (``randomized``).
``[encoding_config.NAME]`` overrides parameters of encoding ``NAME`` in every run.
``model.num_kv_heads`` takes a divisor of ``model.num_heads`` or the name of a model preset,
whose grouping it copies (``"llama-3.1"``: 4 query heads per key/value head, so 4 heads -> 1).

The options of ``posenc compare`` that set a key (``--encodings``, ``--seeds``,
``--kv-heads``, ...) are a :class:`ProfileOptions`, applied on top of the file and ``--set``
by :func:`load_profile` and checked with them.

Everything is checked here, once, when the file is read: an unknown key, a value of the
wrong type or out of its range (every float finite; counts and lengths at most
:data:`MAX_COUNT`), a name that is not an encoding or a task (with the closest one), keys
that contradict each other (a one-rate ``lr_grid`` and a different ``lr``) raise
:class:`~posenc.core.errors.PosencError` naming the file (or the ``--set`` item or option that
set the key), the key, the value and what is valid, before any run starts. What depends on
the machine (the model's memory against the device's, the LM's bytes against the corpus)
is checked by :func:`check_fits` before the first run.

A one-rate ``lr_grid`` trains every run at that rate: it is each training table's ``lr``
where the table sets none, and a table whose ``lr`` differs is refused.

Architecture variants (*how* position is added, for additive encodings only) are written
``key=value`` with ``+`` joining settings of one variant: ``combine=concat``,
``inject=every_layer``, ``position_warmup=200`` (the additive signal ramps from 0 to 1
over 200 steps), ``scale_embeddings=true`` (token embeddings times sqrt(d_model), Vaswani
et al. 3.4), ``inject=every_layer+position_warmup=200``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tomlkit
import torch

from posenc import presets, schedules
from posenc.compare.device import DEVICE_FORMS, PRECISIONS, check_device_text
from posenc.core.checks import check_choice, did_you_mean
from posenc.core.datafiles import MISSING, Where, check_keys, typed
from posenc.core.errors import PosencError
from posenc.core.plugins import is_spec
from posenc.encoding.base import PositionalEncoding
from posenc.nn.attention import check_kv_heads
from posenc.nn.transformer import COMBINES, INJECTS, TransformerConfig
from posenc.records import benchmark_scalings as scalings
from posenc.records.spec import LM_PROTOCOLS, EvalSpec, ModelSpec, TrainSpec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.registry import build_for_model, get_encoding_class
from posenc.tasks import synthetic, text
from posenc.tasks.task_registry import (
    lengths_at_scales,
    max_sequence_length,
    sequence_task_names,
    task_names,
    validate_task,
    vocab_size,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (the cli extra installs it)
    import tomli as tomllib

#: Architecture-variant keys: ``key -> (spec part, field, parse value)``.
VARIANT_KEYS: dict[str, tuple[str, str, Any]] = {
    "combine": ("model", "combine", lambda v: check_choice("combine", v, COMBINES)),
    "inject": ("model", "inject", lambda v: check_choice("inject", v, INJECTS)),
    "position_warmup": ("train", "position_warmup_steps", lambda v: _positive_int("position_warmup", v)),
    "scale_embeddings": (
        "model",
        "scale_embeddings",
        lambda v: check_choice("scale_embeddings", v, ("true", "false")) == "true",
    ),
}
MAX_SEED = 2**32 - 1  # seeds (plus small offsets) go to torch.Generator.manual_seed
ALL = "all"  # in a file: every registered encoding / every additive one / every one of the grid
MAX_FILE_BYTES = 1 << 20  # a profile is a few KB
RANDOMIZED_MAX_LEN = ("scaled", "paper")
#: ``tune_share[ARCHITECTURE] = DEFAULT_RUN``: architecture variants take the learning-rate choice
#: of their encoding's default run (:mod:`posenc.compare.tuning`).
ARCHITECTURE = "architecture variants"
DEFAULT_RUN = "default"
TRAIN_TABLES = ("task_train", "lm_train")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    why: str  # why these numbers (what was scaled down from the full protocol, and why)
    encodings: tuple[str, ...] | None  # None = every registered encoding
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    model: ModelSpec
    task_train: TrainSpec
    lm_train: TrainSpec
    eval: EvalSpec
    randomized: tuple[str, ...] = ()  # encodings also trained with randomized positions ("*" = all)
    randomized_max_len: tuple[str, ...] = ("scaled",)  # "scaled" and/or "paper"
    scaled_variants: bool = False  # also run "@scaled" variants of the paper-length Config fields
    scalings: tuple[
        str, ...
    ] = ()  # RoPE scalings evaluated on rotary models (posenc.records.benchmark_scalings)
    finetune: int = 0  # fine-tuning steps of the scalings whose papers fine-tune (PI, YaRN, Llama 3); LM only
    variants: tuple[str, ...] = ()  # architecture variants of additive encodings, "combine=concat"
    # encodings the variants apply to (None: every additive one)
    variant_encodings: tuple[str, ...] | None = None
    schedules: tuple[str, ...] = ()  # per-layer schedules run as grid entries, "irope:2" (posenc.schedules)
    workers: int = 1  # default --workers
    # learning rates tried per encoding (posenc.compare.tuning); () = no tuning
    lr_grid: tuple[float, ...] = ()
    # Tasks that reuse another task's learning-rate choice, as (task, tuned on) pairs;
    # ("architecture variants", "default"): variants use their default run's choice.
    tune_share: tuple[tuple[str, str], ...] = ()
    # Parameter overrides per encoding, applied to every run of it (after the lengths the grid
    # sizes to the training length): {registry name: {Config field: value}}.
    encoding_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "auto"  # where runs compute: auto, cpu, cuda, cuda:N, mps (not part of a run's identity)
    precision: str = "fp32"  # "bf16": forward passes under autocast to bfloat16 (posenc.compare.device)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def encoding_class(self, name: str) -> type[PositionalEncoding]:
        """The class of encoding ``name``: the one resolved when the profile was checked (its own
        ``encodings``), else looked up now."""
        held = self.__dict__.get("_classes", {})
        return held[name] if name in held else get_encoding_class(name)


# ---------------------------------------------------------------------------
# Reading a file.
# ---------------------------------------------------------------------------

FILE_KEYS = ("extends",)  # keys of a file that are not Profile fields
#: The largest count or length a profile may set (steps, sizes, lengths, ...): far past what any
#: machine trains, and small enough that products of a few of them stay within torch's 64 bits.
MAX_COUNT = 2**31 - 1


@dataclass(frozen=True)
class Bounds:
    """The valid range of a number: ``low`` / ``high`` (None: open), each inclusive unless
    ``above`` / ``below`` says the bound itself is excluded."""

    low: float | None = None
    high: float | None = None
    above: bool = False  # low excluded: > low
    below: bool = False  # high excluded: < high

    def holds(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            return False
        return self.high is None or (value < self.high if self.below else value <= self.high)

    def text(self) -> str:
        low = None if self.low is None else f"{'>' if self.above else '>='} {self.low}"
        high = None if self.high is None else f"{'<' if self.below else '<='} {self.high}"
        return " and ".join(t for t in (low, high) if t)

    def capped(self) -> Bounds:
        """These bounds for an integer: at most :data:`MAX_COUNT` where no ``high`` is given."""
        return self if self.high is not None else dataclasses.replace(self, high=MAX_COUNT)


def _at_least(low: float) -> Bounds:
    return Bounds(low)


POSITIVE = Bounds(0, above=True)  # > 0
FRACTION = Bounds(0, 1)  # [0, 1]

#: Ranges of the numbers a file sets, per table. An integer not listed (or listed without a
#: ``high``) is at most :data:`MAX_COUNT`; every float must be finite. Fields not listed are
#: checked for their type only (and by the checks of :func:`_check`).
RANGES: dict[type, dict[str, Bounds]] = {
    ModelSpec: {"d_model": _at_least(1), "num_heads": _at_least(1), "num_layers": _at_least(1),
                "ffn_dim": _at_least(1), "num_kv_heads": _at_least(1)},
    TrainSpec: {
        "steps": _at_least(1), "batch_size": _at_least(1), "lr": POSITIVE, "weight_decay": _at_least(0),
        "warmup_steps": _at_least(0), "min_lr_ratio": FRACTION, "clip_norm": POSITIVE,
        "min_len": _at_least(1), "max_len": _at_least(1), "position_warmup_steps": _at_least(0),
        "check_every": _at_least(1), "valid_samples": _at_least(1), "converge_at": FRACTION,
        "plateau": FRACTION, "plateau_checks": _at_least(1), "plateau_after": _at_least(0),
    },
    EvalSpec: {
        "samples": _at_least(1), "lm_bytes": _at_least(1), "lastk_k": _at_least(1),
        "lastk_windows": _at_least(1), "sliding_stride": _at_least(1), "position_multiple": _at_least(1),
        "batch_size": _at_least(1), "seed": Bounds(0, MAX_SEED), "lm_files": _at_least(1),
    },
    Profile: {"finetune": Bounds(0, 100_000), "workers": _at_least(1)},
}  # fmt: skip
#: Tuples whose every element must lie in a range: AdamW's betas in [0, 1) (torch refuses 1),
#: the last-k contexts and evaluation scales (multiples of a trained length) > 0.
ELEMENT_RANGES: dict[type, dict[str, Bounds]] = {
    TrainSpec: {"betas": Bounds(0, 1, below=True)},
    EvalSpec: {
        "lengths": _at_least(1),
        "lm_lengths": _at_least(1),
        "lastk_contexts": POSITIVE,
        "scales": POSITIVE,
    },
    Profile: {"seeds": Bounds(0, MAX_SEED), "lr_grid": POSITIVE},
}


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
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)  # bounded: /dev/zero is refused, not read forever
    except OSError as exc:
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


#: Keys a file does not pass on to a file that extends it: they describe the file itself.
OWN_KEYS = ("name", "description", "why")


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


class _Sources(Where):
    """Names what set a key in an error: the last option or ``--set`` item that set it, else the file."""

    def __init__(self, source: str, setters: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(source)
        self.setters = tuple(setters)  # (dotted key, label), in the order they were applied

    def set_by(self, key: str) -> str | None:
        """The option or ``--set`` that set ``key`` (or a table holding it, or a key inside it)."""
        for given, label in reversed(self.setters):
            if key == given or key.startswith((f"{given}.", f"{given}[")) or given.startswith(f"{key}."):
                return label
        return None

    def error(self, key: str, value: Any, problem: str) -> PosencError:
        label = self.set_by(key)
        return (Where(label) if label else Where(self.source)).error(key, value, problem)


SET_FORM = "--set takes KEY=VALUE with a dotted KEY (e.g. model.d_model=128)"


def _set_key(item: str) -> tuple[tuple[str, ...], str]:
    """``(key parts, value text)`` of one ``--set`` item. The key is read by the TOML parser, so a
    part may be quoted: ``encoding_config."mypkg.pe:MyEncoding".base=2.0`` has three parts."""
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


def parse_set(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items -> a nested table (``model.d_model=128`` -> ``{"model": {"d_model": 128}}``).

    KEY is a TOML key (dotted; a part with dots or colons in quotes:
    ``'encoding_config."mypkg.pe:MyEncoding".base=2.0'``). VALUE is read as a TOML value
    (``128``, ``1e-3``, ``true``, ``["rope", "alibi"]``, ``"text"``); anything that is not one
    is a string (``--set eval.lm_protocol=sliding``).
    """
    table: dict[str, Any] = {}
    for item in items:
        parts, text = _set_key(item)
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


def dotted(*parts: str) -> str:
    """A key path as TOML writes it (and errors name it): ``encoding_config."mypkg.pe:Mine".base``."""
    return tomlkit.key(list(parts)).as_string()


def _set_keys(items: Sequence[str]) -> list[str]:
    """The dotted keys ``--set`` items set, as errors name them."""
    return [dotted(*_set_key(item)[0]) for item in items]


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
    about a key an override or an option set names it."""
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
    where = _Sources(label, setters)
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
    _check(profile, where)
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


def _check(profile: Profile, where: _Sources) -> None:
    """What the types cannot say: names, the model's shape, lengths, variants, schedules, and
    keys that must agree with each other."""
    _check_names(profile, where)
    try:
        check_device_text(profile.device)
    except PosencError:
        raise where.error("device", profile.device, f"must be one of {DEVICE_FORMS}") from None
    _check_choices(profile, where)
    if not profile.seeds:
        raise where.error("seeds", [], "must name at least one seed")
    model = profile.model
    try:
        check_kv_heads(model.num_kv_heads, model.num_heads)
    except PosencError as exc:
        raise where.error(
            "model.num_kv_heads", model.num_kv_heads, f"{exc} (model.num_heads = {model.num_heads})"
        ) from None
    try:
        TransformerConfig(
            vocab_size=synthetic.VOCAB_SIZE, encoding="nope", **dataclasses.asdict(model)
        )  # d_model divisible by num_heads, kv heads dividing heads, combine, inject
    except (PosencError, TypeError) as exc:
        raise where.error("model", MISSING, str(exc)) from None
    for key in TRAIN_TABLES:
        _check_training(key, getattr(profile, key), where)
    _check_learning_rates(profile, where)
    for key in TRAIN_TABLES:
        _check_decay(profile, key, where)
    _check_eval(profile, where)
    for key, values, parse in (
        ("scalings", profile.scalings, scalings.parse),
        ("variants", profile.variants, parse_variant),
        ("schedules", profile.schedules, lambda item: schedules.parse(item, model.num_layers)),
    ):
        for item in values:
            try:
                parse(item)
            except PosencError as exc:
                raise where.error(key, item, str(exc)) from None
    _check_encoding_config(profile, where)


def _check_names(profile: Profile, where: Where) -> None:
    """Every encoding and task a key names resolves (a registry name or an import spec)."""
    if not profile.tasks:
        raise where.error("tasks", [], "must name at least one task")
    for task in profile.tasks:
        _check_name(task, "tasks", list(profile.tasks), "task", where)
    if profile.encodings is not None and not profile.encodings:
        raise where.error("encodings", [], 'must name at least one encoding (or "all")')
    classes = {}
    for name in profile.encodings or ():
        classes[name] = _check_name(name, "encodings", list(profile.encodings or ()), "encoding", where)
    object.__setattr__(profile, "_classes", classes)  # the grid reads them: one lookup per name
    for name in profile.randomized:
        if name != "*":  # "all": every encoding of the grid
            _check_name(name, "randomized", list(profile.randomized), "encoding", where)
    for name in profile.variant_encodings or ():
        _check_name(name, "variant_encodings", list(profile.variant_encodings or ()), "encoding", where)
        kind = get_encoding_class(name).kind
        if kind != "additive":
            raise where.error(
                "variant_encodings",
                list(profile.variant_encodings or ()),
                f"{name!r} is {kind}; architecture variants change how an additive encoding is added to "
                "the tokens, so they apply to additive encodings only",
            )
    for task, tuned_on in profile.tune_share:
        key = f"tune_share.{task}"
        if task == ARCHITECTURE or tuned_on == DEFAULT_RUN:
            if (task, tuned_on) != (ARCHITECTURE, DEFAULT_RUN):
                raise where.error(
                    key, tuned_on, f'only "{ARCHITECTURE}" = "{DEFAULT_RUN}" (their default run\'s choice) '
                    "shares with a run rather than a task"
                )  # fmt: skip
            continue
        _check_name(task, key, tuned_on, "task", where)
        _check_name(tuned_on, key, tuned_on, "task", where)
        if tuned_on == task:
            raise where.error(key, tuned_on, "a task shares another task's choice, not its own")
        if (task == "lm") != (tuned_on == "lm"):
            raise where.error(
                key, tuned_on, "the LM and the sequence tasks train on different data with different "
                "settings (lm_train, task_train): one cannot take the other's learning rate"
            )  # fmt: skip


def _check_choices(profile: Profile, where: Where) -> None:
    """Keys that take one of a few words: the word, or the closest one named."""
    words: list[tuple[str, Any, tuple[str, ...]]] = [
        ("precision", [profile.precision], tuple(PRECISIONS)),
        ("randomized_max_len", list(profile.randomized_max_len), RANDOMIZED_MAX_LEN),
        ("eval.lm_protocol", [profile.eval.lm_protocol], tuple(LM_PROTOCOLS)),
    ]
    for key, values, valid in words:
        for value in values:
            if value not in valid:
                shown = values[0] if len(values) == 1 and key != "randomized_max_len" else values
                raise where.error(
                    key, shown, f"must be one of {', '.join(valid)}{did_you_mean(value, valid)}"
                )


def _check_training(key: str, train: TrainSpec, where: Where) -> None:
    """A training table whose steps, lengths and checks agree."""
    if train.min_len > train.max_len:
        raise where.error(f"{key}.min_len", train.min_len, f"must be <= max_len ({train.max_len})")
    for name in ("warmup_steps", "check_every", "plateau_after"):
        value = getattr(train, name)
        if value > train.steps:
            why = {
                "warmup_steps": "",
                "check_every": ": no held-out check would run, so no run could converge",
                "plateau_after": ": the LM's convergence rule could never apply",
            }[name]
            raise where.error(f"{key}.{name}", value, f"must be <= steps ({train.steps}){why}")


def _check_learning_rates(profile: Profile, where: _Sources) -> None:
    """A one-rate ``lr_grid`` trains every run at that rate: a training table's ``lr`` may not differ."""
    if len(profile.lr_grid) != 1:
        return
    (rate,) = profile.lr_grid
    for part in TRAIN_TABLES:
        lr = getattr(profile, part).lr
        if lr == rate:
            continue
        fixes = (f"set lr_grid = [] to train each table at its own lr, {part}.lr = {rate:g}, or give lr_grid "
                 "several rates to choose from")  # fmt: skip
        if where.set_by(f"{part}.lr") or not where.set_by("lr_grid"):  # name what was set last
            raise where.error(
                f"{part}.lr",
                lr,
                f"differs from lr_grid = [{rate:g}], whose one rate every run trains at; {fixes}",
            )
        raise where.error(
            "lr_grid",
            list(profile.lr_grid),
            f"one rate, which every run trains at, but {part}.lr = {lr:g}; {fixes}",
        )


def _check_decay(profile: Profile, part: str, where: _Sources) -> None:
    """AdamW's decoupled weight decay multiplies each decayed weight by ``1 - lr x weight_decay``
    per step (Loshchilov & Hutter 2019): at 1 or more it zeroes the weights or flips their sign,
    so no rate a run of ``part`` may train at (its ``lr``, which a run falls back to when tuning
    fails, and each of ``lr_grid``) may reach it."""
    train = getattr(profile, part)
    rates = {f"{part}.lr": train.lr, **{f"lr_grid[{i}]": rate for i, rate in enumerate(profile.lr_grid)}}
    rate_key, rate = max(rates.items(), key=lambda item: item[1])
    decay = train.weight_decay
    if rate * decay < 1:
        return
    rule = (
        f"lr x weight_decay must be < 1 for every rate {part} may train at ({part}.lr and each of "
        "lr_grid): AdamW's decoupled decay multiplies each weight by 1 - lr x weight_decay per step, "
        "which at 1 or more zeroes the weights or flips their sign"
    )
    if where.set_by(f"{part}.weight_decay") or not where.set_by(rate_key.split("[")[0]):
        raise where.error(
            f"{part}.weight_decay", decay,
            f"times {rate_key} = {rate:g} is {rate * decay:g}; {rule}, so {part}.weight_decay must be < {1 / rate:g}",
        )  # fmt: skip
    in_grid = rate_key.startswith("lr_grid")
    raise where.error(
        rate_key.split("[")[0], list(profile.lr_grid) if in_grid else rate,
        f"{f'{rate_key} = {rate:g} ' if in_grid else ''}times {part}.weight_decay ({decay:g}) is "
        f"{rate * decay:g}; {rule}, so every rate must be < {1 / decay:g}",
    )  # fmt: skip


def _check_eval(profile: Profile, where: Where) -> None:
    """The evaluation's lengths agree with training (the LM's only when the LM is a task)."""
    ev = profile.eval
    for key in ("lengths", "lm_lengths", "lastk_contexts"):
        if not getattr(ev, key):
            raise where.error(f"eval.{key}", [], "must hold at least one value")
    for task in profile.tasks if ev.scales else ():
        if task != "lm":
            try:
                lengths_at_scales(task, profile.task_train.max_len, ev.scales)
            except PosencError as exc:
                raise where.error("eval.scales", list(ev.scales), str(exc)) from None
    if "lm" not in profile.tasks:
        return
    l_train = profile.lm_train.max_len
    for context in ev.lastk_contexts:
        length = context * l_train
        if length > MAX_COUNT:
            raise where.error(
                "eval.lastk_contexts", list(ev.lastk_contexts),
                f"{context:g} x lm_train.max_len ({l_train}) is longer than {MAX_COUNT} bytes",
            )  # fmt: skip
        if round(length) < ev.lastk_k:
            raise where.error(
                "eval.lastk_contexts", list(ev.lastk_contexts),
                f"{context:g} x lm_train.max_len ({l_train}) = {round(length)} bytes holds fewer than the "
                f"lastk_k ({ev.lastk_k}) bytes each window scores",
            )  # fmt: skip
    if ev.lm_protocol == "sliding" and ev.sliding_stride > max(ev.lm_lengths):
        raise where.error(
            "eval.sliding_stride", ev.sliding_stride,
            f"must be <= the longest of lm_lengths ({max(ev.lm_lengths)}): each window advances and scores "
            "at most its own length",
        )  # fmt: skip
    try:  # the test files' spans hold every window the evaluation reads
        ev.test_span(l_train)
    except PosencError as exc:
        why = f"{exc} (the last-k contexts are multiples of lm_train.max_len = {l_train})"
        raise where.error("eval", MISSING, why) from None


def _check_encoding_config(profile: Profile, where: Where) -> None:
    """``[encoding_config.NAME]``: a known encoding, fields a profile may set, a model it builds."""
    model = profile.model
    for name, config in profile.encoding_config.items():
        key = dotted("encoding_config", name)
        try:
            cls = get_encoding_class(name)
        except PosencError as exc:
            names = ENCODING_GROUP.names()
            why = (
                str(exc)
                if is_spec(name)
                else f"no encoding {name!r} is registered{did_you_mean(name, names)}"
            )
            raise where.error(key, MISSING, why) from None
        filled = set(cls.Config.meanings("model"))
        for field_name in config:
            if field_name in filled:
                raise where.error(
                    f"{key}.{field_name}", config[field_name], "set by the model, not by a profile"
                )
        try:
            build_for_model(name, d_model=model.d_model, num_heads=model.num_heads, causal=True, **config)
        except (ValueError, TypeError, OverflowError) as exc:  # PosencError is a ValueError
            raise where.error(key, MISSING, str(exc)) from None


#: Per kind of name: how it resolves and every valid one (read when needed: entry points stay lazy).
_RESOLVE = {"task": (validate_task, task_names), "encoding": (get_encoding_class, ENCODING_GROUP.names)}


def _check_name(name: str, key: str, shown: Any, kind: str, where: Where) -> Any:
    """``name`` (a registry name or an import spec) resolves (to what it returns), else one error
    naming ``key`` and the closest valid name."""
    resolve, names = _RESOLVE[kind]
    try:
        return resolve(name)
    except PosencError as exc:
        if is_spec(name) or name in names():  # an import spec, or an entry point that is broken
            raise where.error(key, shown, str(exc)) from None
        valid = names()
        article = "an" if kind[0] in "aeiou" else "a"
        raise where.error(
            key,
            shown,
            f"{name!r} is not {article} {kind}{did_you_mean(name, valid)}; {kind}s: {', '.join(valid)} "
            "(or an import spec 'package.module:Class')",
        ) from None


# ---------------------------------------------------------------------------
# Before the first run: what depends on the machine.
# ---------------------------------------------------------------------------

#: Bytes each parameter takes while training: its float32 value, its gradient, AdamW's two moments.
TRAINING_BYTES_PER_PARAMETER = 16
FLOAT_BYTES = 4  # activations are float32 (the residual stream stays float32 under bf16 autocast)


def train_length(task: str, train: TrainSpec) -> int:
    """Tokens in the longest training sequence the model reads."""
    return train.max_len if task == "lm" else max_sequence_length(task, train.max_len)


def task_eval(task: str, train: TrainSpec, ev: EvalSpec) -> EvalSpec:
    """The evaluation settings of one task's runs: ``ev`` with ``lengths`` worked out from
    ``ev.scales`` (:func:`posenc.tasks.task_registry.lengths_at_scales`) when the profile gives scales (not for the LM,
    whose lengths are ``lm_lengths`` in bytes)."""
    if task == "lm" or not ev.scales:
        return ev
    return dataclasses.replace(ev, lengths=lengths_at_scales(task, train.max_len, ev.scales))


def eval_length(task: str, train: TrainSpec, ev: EvalSpec) -> int:
    """Tokens in the longest sequence any evaluation feeds the model."""
    if task == "lm":
        longest_context = max(ev.lastk_contexts) * train.max_len
        return int(max(max(ev.lm_lengths), longest_context, ev.position_multiple * train.max_len))
    return max(max_sequence_length(task, n) for n in task_eval(task, train, ev).lengths)


def parameter_count(model: ModelSpec, vocab: int) -> int:
    """At least this many parameters has the benchmark's Transformer (:class:`posenc.nn.transformer.Transformer`):
    the token embeddings (tied to the output head), every layer's attention projections and MLP;
    norms, biases and the encoding's own parameters are left out, so this is a lower bound."""
    d = model.d_model
    kv_width = d * (model.num_kv_heads or model.num_heads) // model.num_heads
    per_layer = 2 * d * d + 2 * d * kv_width + 2 * d * model.ffn_dim  # q, o; k, v; the MLP's two
    return vocab * d + model.num_layers * per_layer


def memory_needed(profile: Profile, task: str) -> tuple[int, int]:
    """``(parameters, bytes)``: at least this much memory one run of ``task`` needs, the larger of
    training (:data:`TRAINING_BYTES_PER_PARAMETER` per parameter, and each layer's input for one
    batch) and evaluating one sequence of the longest evaluation length."""
    model = profile.model
    train = profile.lm_train if task == "lm" else profile.task_train
    params = parameter_count(model, vocab_size(task))
    layer_inputs = model.num_layers * model.d_model * FLOAT_BYTES
    training = (
        params * TRAINING_BYTES_PER_PARAMETER + train.batch_size * train_length(task, train) * layer_inputs
    )
    evaluating = params * FLOAT_BYTES + eval_length(task, train, profile.eval) * layer_inputs
    return params, max(training, evaluating)


def device_memory(device: str) -> int | None:
    """Bytes of memory ``device`` (resolved) has: a CUDA device's own, else the machine's RAM
    (None where the platform does not say)."""
    where = torch.device(device)
    if where.type == "cuda":
        return int(torch.cuda.get_device_properties(where.index or 0).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def check_fits(profile: Profile, device: str, *, memory: int | None = None) -> None:
    """Before any run: refuse what cannot fit this machine, with one error naming the key.

    * each task's model against ``memory`` (default: :func:`device_memory` of ``device``), by a
      lower bound (:func:`memory_needed`), so a refused run could never have run;
    * with the LM among the tasks, the bytes its training, held-out checks and evaluation read
      against the corpus (Python's standard library).
    """
    where = Where(f"profile {profile.name!r}")
    memory = device_memory(device) if memory is None else memory
    if memory is not None:
        for task in profile.tasks:
            params, needed = memory_needed(profile, task)
            if needed > memory:
                raise where.error(
                    "model", MISSING,
                    f"a run of {task} needs at least {_gib(needed)} ({params:.3g} parameters: float32 "
                    f"weights, gradients and AdamW's moments, and one batch's activations) but {device} has "
                    f"{_gib(memory)}; make model.d_model, num_layers, ffn_dim or the batch size smaller",
                )  # fmt: skip
    if "lm" in profile.tasks:
        _check_corpus(profile, where)


def _check_corpus(profile: Profile, where: Where) -> None:
    """The LM's bytes (at least what :mod:`posenc.compare.trainer` and ``evaluation`` read) fit the corpus."""
    corpus = text.stdlib_corpus()
    train_bytes, valid_bytes = int(corpus.train.numel()), int(corpus.valid.numel())
    tr, ev = profile.lm_train, profile.eval
    contexts = [round(c * tr.max_len) for c in ev.lastk_contexts]
    needs = [
        ("lm_train.max_len", tr.max_len, tr.max_len + 1, train_bytes, "a training window"),
        ("lm_train.valid_samples", tr.valid_samples, tr.max_len * tr.valid_samples + 1, valid_bytes,
         "the held-out windows"),
        ("eval.lm_bytes", ev.lm_bytes, text.scored_bytes(list(ev.lm_lengths), ev.lm_bytes) + 1, valid_bytes,
         "the scored bytes (lm_bytes rounded up to a multiple of every length in lm_lengths)"),
        ("eval.lastk_contexts", list(ev.lastk_contexts), max(contexts) + ev.lastk_k * (ev.lastk_windows - 1) + 1,
         valid_bytes, "the last-k windows"),
    ]  # fmt: skip
    position_len = ev.position_multiple * tr.max_len
    if ev.lm_protocol != "nonoverlapping" or position_len not in ev.lm_lengths:  # windows of its own
        needs.append(("eval.position_multiple", ev.position_multiple, 4 * position_len + 1, valid_bytes,
                      "the loss-by-position windows"))  # fmt: skip
    for key, value, needed, have, what in needs:
        if needed > have:
            split = "training" if have == train_bytes else "validation"
            raise where.error(
                key, value, f"{what} need {needed} bytes of the LM corpus's {split} split, which has {have}"
            )


# ---------------------------------------------------------------------------
# Architecture variants.
# ---------------------------------------------------------------------------


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise PosencError(f"{name} must be a positive integer (steps), got {text!r}")
    return value


def parse_variant(text: str) -> dict[str, dict[str, Any]]:
    """``"inject=every_layer+position_warmup=200"`` -> ``{"model": {...}, "train": {...}}`` overrides."""
    out: dict[str, dict[str, Any]] = {"model": {}, "train": {}}
    for setting in text.split("+"):
        key, sep, value = (part.strip() for part in setting.partition("="))
        if not sep or not value:
            raise PosencError(
                f"variant {text!r}: expected key=value (keys: {', '.join(VARIANT_KEYS)}), "
                "e.g. combine=concat,inject=every_layer,position_warmup=200"
            )
        part, field_name, parse = VARIANT_KEYS[check_choice("variant key", key, tuple(VARIANT_KEYS))]
        out[part][field_name] = parse(value)
    model = out["model"]
    if model.get("combine") == "concat" and model.get("inject") == "every_layer":
        raise PosencError(f"variant {text!r}: inject=every_layer requires combine=add")
    return out


def parse_variants(text: str | None) -> tuple[str, ...]:
    """``--variants`` text -> validated variant strings (comma-separated, ``+`` within one)."""
    if not text or not text.strip():
        return ()
    items = tuple(item.strip() for item in text.split(","))
    if any(not item for item in items):
        raise PosencError(f"--variants has an empty item: {text!r} (e.g. combine=concat,position_warmup=200)")
    for item in items:
        parse_variant(item)
    return items


# ---------------------------------------------------------------------------
# A profile as a file again (``posenc compare --print-config``).
# ---------------------------------------------------------------------------


def _file_value(key: str, value: Any) -> Any:
    """A typed value in the form a file writes it (the inverse of :func:`_raw`)."""
    if value is None:
        raise PosencError(f"{key} = None has no TOML form (a file leaves such a key out)")
    if isinstance(value, tuple):
        return [_file_value(key, item) for item in value]
    if isinstance(value, dict):
        return {k: _file_value(f"{key}.{k}", v) for k, v in value.items()}
    return value


def _file_table(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A dataclass as a file's table: None fields (whose default is None) left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
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
    """The TOML text of ``profile``: every key, no ``extends``; :func:`load_profile` of it gives the
    same profile (its ``name`` is the file's, so ``name`` is left out). ``header`` (lines) goes
    first, as comments. Written with tomlkit (compact arrays), in time linear in the profile's size."""
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
