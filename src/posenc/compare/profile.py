"""The profiles of ``posenc compare``: each a TOML file, loaded into a typed :class:`Profile`.

| profile | budget | grid |
|---|---|---|
| ``smoke`` | seconds | 2 encodings, copy + LM, tiny model, 3 seeds; exercises every code path (tests) |
| ``quick`` | <= 10 min on 2 idle cores, figures and report included (measured: docs/benchmark.md) | the encodings the papers' claims name + randomized RoPE, copy + passkey + LM, 3 seeds |
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

Everything is checked here, once, when the file is read: an unknown key, a value of the
wrong type or out of its range raises :class:`~posenc.errors.PosencError` naming the
file, the key, the value and what is valid, before any run starts.

Architecture variants (*how* position is added, for additive encodings only) are written
``key=value`` with ``+`` joining settings of one variant: ``combine=concat``,
``inject=every_layer``, ``position_warmup=200`` (the additive signal ramps from 0 to 1
over 200 steps), ``scale_embeddings=true`` (token embeddings times sqrt(d_model), Vaswani
et al. 3.4), ``inject=every_layer+position_warmup=200``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tomlkit

from posenc import schedules
from posenc.checks import check_choice, did_you_mean
from posenc.compare.device import DEVICE_FORMS, PRECISIONS, check_device_text
from posenc.datafiles import MISSING, Where, check_keys, typed
from posenc.errors import PosencError
from posenc.model import COMBINES, INJECTS, TransformerConfig
from posenc.plugins import is_spec
from posenc.records import scalings
from posenc.records.spec import LM_PROTOCOLS, EvalSpec, ModelSpec, TrainSpec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.registry import build_for_model, get_encoding_class
from posenc.tasks import synthetic
from posenc.tasks.registry import sequence_task_names, task_names, validate_task

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
    scalings: tuple[str, ...] = ()  # RoPE scalings evaluated on rotary models (posenc.records.scalings)
    finetune: int = 0  # fine-tuning steps of the scalings whose papers fine-tune (PI, YaRN); LM only
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


# ---------------------------------------------------------------------------
# Reading a file.
# ---------------------------------------------------------------------------

FILE_KEYS = ("extends",)  # keys of a file that are not Profile fields
#: Ranges of the numbers a file sets, per table (``(minimum, maximum)``, None: open). Fields
#: not listed are checked for their type only (and by the checks of :func:`_check`).
RANGES: dict[type, dict[str, tuple[float | None, float | None]]] = {
    ModelSpec: {"d_model": (1, None), "num_heads": (1, None), "num_layers": (1, None), "ffn_dim": (1, None)},
    TrainSpec: {
        "steps": (1, None), "batch_size": (1, None), "lr": (0, None), "weight_decay": (0, None),
        "warmup_steps": (0, None), "min_lr_ratio": (0, 1), "clip_norm": (0, None), "min_len": (1, None),
        "max_len": (1, None), "position_warmup_steps": (0, None), "check_every": (1, None),
        "valid_samples": (1, None), "converge_at": (0, 1), "plateau": (0, 1), "plateau_checks": (1, None),
        "plateau_after": (0, None),
    },
    EvalSpec: {
        "samples": (1, None), "lm_bytes": (1, None), "lastk_k": (1, None), "lastk_windows": (1, None),
        "sliding_stride": (1, None), "position_multiple": (1, None), "batch_size": (1, None),
        "seed": (0, MAX_SEED),
    },
    Profile: {"finetune": (0, None), "workers": (1, None)},
}  # fmt: skip
#: Tuples whose every element must lie in a range.
ELEMENT_RANGES: dict[type, dict[str, tuple[float | None, float | None]]] = {
    TrainSpec: {"betas": (0, 1)},
    EvalSpec: {"lengths": (1, None), "lm_lengths": (1, None), "lastk_contexts": (0, None)},
    Profile: {"seeds": (0, MAX_SEED), "lr_grid": (0, None)},
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


class _SetWhere(Where):
    """Names ``--set KEY=VALUE`` as the source of an error about a key it set, else the file."""

    def __init__(self, source: str, set_keys: tuple[str, ...]) -> None:
        super().__init__(source)
        self.set_keys = set_keys

    def error(self, key: str, value: Any, problem: str) -> PosencError:
        for given in self.set_keys:
            if key == given or key.startswith((f"{given}.", f"{given}[")) or given.startswith(f"{key}."):
                return Where("--set").error(key, value, problem)
        return super().error(key, value, problem)


def parse_set(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items -> a nested table (``model.d_model=128`` -> ``{"model": {"d_model": 128}}``).

    VALUE is read as a TOML value (``128``, ``1e-3``, ``true``, ``["rope", "alibi"]``,
    ``"text"``); anything that is not one is a string (``--set eval.lm_protocol=sliding``).
    """
    table: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not key or not all(parts):
            raise PosencError(
                f"--set takes KEY=VALUE with a dotted KEY (e.g. model.d_model=128), got {item!r}"
            )
        try:
            value = tomllib.loads(f"value = {text}")["value"]
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


def load_profile(source: str | os.PathLike, overrides: tuple[str, ...] | list[str] = ()) -> Profile:
    """The profile in ``source``: a shipped name (``"quick"``) or the path of a TOML file, with
    ``overrides`` (``--set KEY=VALUE`` items, :func:`parse_set`) on top; an error about a key an
    override set names the override."""
    name, label, table = _table_of(source, None, ())
    if overrides:
        changes = parse_set(overrides)
        check_keys(changes, Profile, Where("--set"), extra=())
        table = _merge(table, changes)
    set_keys = tuple(item.partition("=")[0].strip() for item in overrides)
    where = _SetWhere(label, set_keys) if set_keys else Where(label)
    table = {"name": name, "description": "", "why": "", "model": {}, "task_train": {}, "lm_train": {},
             "eval": {}, **_raw(table, where)}  # fmt: skip
    profile = typed(
        Profile, table, where, check=lambda cls, key, value, raw: _ranges(cls, key, value, raw, where)
    )
    _check(profile, where)
    return profile


# ---------------------------------------------------------------------------
# Values: typed from the dataclasses' own annotations (posenc.datafiles), then checked.
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


def _ranges(cls: type, key: str, value: Any, raw: Any, where: Where) -> None:
    name = key.rsplit(".", 1)[-1]
    low_high = RANGES.get(cls, {}).get(name)
    if low_high is not None:
        _in_range(value, low_high, where, key)
    low_high = ELEMENT_RANGES.get(cls, {}).get(name)
    if low_high is not None:
        for item in value:
            _in_range(item, low_high, where, key, whole=raw)


def _in_range(value: Any, low_high, where: Where, key: str, *, whole: Any = MISSING) -> None:
    low, high = low_high
    shown = value if whole is MISSING else whole
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = " and ".join(
            t for t in (low is not None and f">= {low}", high is not None and f"<= {high}") if t
        )
        what = "must be" if whole is MISSING else "every value must be"
        raise where.error(key, shown, f"{what} {bounds}")


def _check(profile: Profile, where: Where) -> None:
    """What the types cannot say: names, the model's shape, lengths, variants, schedules."""

    def fail(key: str, value: Any, error: Exception) -> PosencError:
        return where.error(key, value, str(error))

    if not profile.tasks:
        raise where.error("tasks", [], "must name at least one task")
    for task in profile.tasks:
        _check_name(task, "tasks", list(profile.tasks), validate_task, task_names, where)
    if profile.encodings is not None:
        if not profile.encodings:
            raise where.error("encodings", [], 'must name at least one encoding (or "all")')
        for name in profile.encodings:
            _check_name(
                name, "encodings", list(profile.encodings), get_encoding_class, ENCODING_GROUP.names, where
            )
    try:
        check_device_text(profile.device)
    except PosencError:
        raise where.error("device", profile.device, f"must be one of {DEVICE_FORMS}") from None
    if profile.precision not in PRECISIONS:
        raise where.error("precision", profile.precision, f"must be one of {', '.join(PRECISIONS)}")
    if not profile.seeds:
        raise where.error("seeds", [], "must name at least one seed")
    for key in ("randomized_max_len",):
        for item in getattr(profile, key):
            if item not in RANDOMIZED_MAX_LEN:
                raise where.error(
                    key, list(getattr(profile, key)), f"values: {', '.join(RANDOMIZED_MAX_LEN)}"
                )
    model = profile.model
    try:
        TransformerConfig(
            vocab_size=synthetic.VOCAB_SIZE, encoding="nope", **dataclasses.asdict(model)
        )  # d_model divisible by num_heads, kv heads dividing heads, combine, inject
    except (PosencError, TypeError) as exc:
        raise fail("model", MISSING, exc) from None
    for key in ("task_train", "lm_train"):
        train: TrainSpec = getattr(profile, key)
        if train.min_len > train.max_len:
            raise where.error(f"{key}.min_len", train.min_len, f"must be <= max_len ({train.max_len})")
        if train.warmup_steps > train.steps:
            raise where.error(f"{key}.warmup_steps", train.warmup_steps, f"must be <= steps ({train.steps})")
    ev = profile.eval
    for key in ("lengths", "lm_lengths", "lastk_contexts"):
        if not getattr(ev, key):
            raise where.error(f"eval.{key}", [], "must hold at least one value")
    if ev.lm_protocol not in LM_PROTOCOLS:
        raise where.error("eval.lm_protocol", ev.lm_protocol, f"one of {', '.join(LM_PROTOCOLS)}")
    for text in profile.scalings:
        try:
            scalings.parse(text)
        except PosencError as exc:
            raise fail("scalings", text, exc) from None
    for text in profile.variants:
        try:
            parse_variant(text)
        except PosencError as exc:
            raise fail("variants", text, exc) from None
    for text in profile.schedules:
        try:
            schedules.parse(text, model.num_layers)
        except PosencError as exc:
            raise fail("schedules", text, exc) from None
    for name, config in profile.encoding_config.items():
        key = f"encoding_config.{name}"
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
        except (PosencError, TypeError) as exc:
            raise fail(key, MISSING, exc) from None


def _check_name(name: str, key: str, shown: Any, resolve, names, where: Where) -> None:
    """``name`` (a registry name or an import spec) resolves, else one error naming ``key``."""
    try:
        resolve(name)
    except PosencError as exc:
        if is_spec(name) or name in names():  # an import spec, or an entry point that is broken
            raise where.error(key, shown, str(exc)) from None
        noun = "a task" if key == "tasks" else "an encoding"
        valid = names()
        raise where.error(
            key,
            shown,
            f"{name!r} is not {noun}{did_you_mean(name, valid)}; {key}: {', '.join(valid)} "
            "(or an import spec 'package.module:Class')",
        ) from None


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


def dump_profile(profile: Profile, header: str = "") -> str:
    """The TOML text of ``profile``: every key, no ``extends``; :func:`load_profile` of it gives the
    same profile (its ``name`` is the file's, so ``name`` is left out). ``header`` (lines) goes
    first, as comments. Written with tomlkit (compact arrays)."""
    data = _file_table(profile)
    data.pop("name")
    document = tomlkit.document()
    for line in header.splitlines():
        document.add(tomlkit.comment(line))
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for key, value in data.items():
        if key not in tables:
            document.add(key, value)
    for key, value in tables.items():
        document.add(key, value)
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
