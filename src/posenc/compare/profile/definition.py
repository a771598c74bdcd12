"""What a profile is: the :class:`Profile` dataclass, the constants its keys use, and the range of
every number a profile file sets (:data:`RANGES`).

A :class:`Profile`'s fields are the keys of a profile file; the one field that is not
(``resolved``) holds what checking the file resolved from its names (each encoding's class, each
scaling parsed), so that the grid reads them instead of resolving or parsing them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tomlkit

from posenc.compare.profile.variants import parse_variant
from posenc.core.datafiles import Where, data_fields, derived
from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding
from posenc.records import benchmark_scalings as scalings
from posenc.records.benchmark_scalings import BenchmarkScaling
from posenc.records.questions import Questions, SequentialSpec
from posenc.records.spec import EvalSpec, ModelSpec, TrainSpec
from posenc.registry import get_encoding_class

MAX_SEED = 2**32 - 1  # seeds (plus small offsets) go to torch.Generator.manual_seed
ALL = "all"  # in a file: every registered encoding / every additive one / every one of the grid
MAX_FILE_BYTES = 1 << 20  # a profile is a few KB
RANDOMIZED_MAX_LEN = ("scaled", "paper")
#: ``tune_share[ARCHITECTURE] = DEFAULT_RUN``: architecture variants take the learning-rate choice
#: of their encoding's default run (:mod:`posenc.compare.tuning`).
ARCHITECTURE = "architecture variants"
DEFAULT_RUN = "default"
TRAIN_TABLES = ("task_train", "lm_train")
FILE_KEYS = ("extends",)  # keys of a file that are not Profile fields
#: Keys a file does not pass on to a file that extends it: they describe the file itself (and the
#: questions it exists to answer, with its plan for deciding them: a file that extends it asks its own).
OWN_KEYS = ("name", "description", "why", "questions", "sequential")
#: The largest count or length a profile may set (steps, sizes, lengths, ...): far past what any
#: machine trains, and small enough that products of a few of them stay within torch's 64 bits.
MAX_COUNT = 2**31 - 1


@dataclass(frozen=True)
class Resolved:
    """What checking a profile resolved from its names (:func:`posenc.compare.profile.load_profile`):
    each encoding it names, by name -> class, and each of its scalings, by text -> parsed. Keyed by
    name and text, so a profile changed with ``dataclasses.replace`` finds only what still holds.
    ``notes``: what resolving set aside that the user should hear (declared questions the grid cannot
    ask), one line each."""

    classes: Mapping[str, type[PositionalEncoding]] = field(default_factory=dict)
    scalings: Mapping[str, BenchmarkScaling] = field(default_factory=dict)
    variants: Mapping[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # text -> overrides
    notes: tuple[str, ...] = ()


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
    # The primary questions (posenc.records.questions) and the plan of posenc compare --until decided
    questions: Questions = Questions()
    sequential: SequentialSpec = SequentialSpec()
    # Not data (no key of a file, left out of to_dict and comparisons): what the check resolved.
    resolved: Resolved = derived(Resolved)

    def to_dict(self) -> dict[str, Any]:
        """The profile as data: every key a file sets (``resolved`` left out)."""
        data = dataclasses.asdict(self)
        return {f.name: data[f.name] for f in data_fields(type(self))}

    def encoding_class(self, name: str) -> type[PositionalEncoding]:
        """The class of encoding ``name``: the one resolved when the profile was checked, else looked up now."""
        held = self.resolved.classes
        return held[name] if name in held else get_encoding_class(name)

    def scaling(self, text: str) -> BenchmarkScaling:
        """Scaling ``text`` of the profile, parsed: as parsed when the profile was checked, else now
        (:func:`posenc.records.benchmark_scalings.parse`)."""
        held = self.resolved.scalings
        return held[text] if text in held else scalings.parse(text)

    def variant(self, text: str) -> dict[str, dict[str, Any]]:
        """Architecture variant ``text`` of the profile as overrides (``{"model": {...}, "train": {...}}``):
        as parsed when the profile was checked, else now (:func:`~posenc.compare.profile.variants.parse_variant`)."""
        held = self.resolved.variants
        return held[text] if text in held else parse_variant(text)


def dotted(*parts: str) -> str:
    """A key path as TOML writes it (and errors name it): ``encoding_config."mypkg.pe:Mine".base``."""
    return tomlkit.key(list(parts)).as_string()


class KeySources(Where):
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


# ---------------------------------------------------------------------------
# The valid range of each number.
# ---------------------------------------------------------------------------


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
#: checked for their type only (and by the checks of :mod:`posenc.compare.profile.profile_checks`).
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
    Questions: {"alpha": Bounds(0, 1, above=True, below=True)},
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
    SequentialSpec: {"looks": Bounds(3, 1000)},
}
