"""A profile expanded into the grid of independent run specs.

Encodings come from the registry (:func:`posenc.encodings`: posenc's own, registered ones and
installed entry points) or are named by import spec (``"mypkg.pe:MyEncoding"``); tasks likewise
(:mod:`posenc.tasks.task_registry`). A name registered only in this process travels with each run
as its import spec (``RunSpec.imports``), so spawned and Ray workers register the same class
under the same name. Parameters whose paper default assumes long
training run twice in ``full`` (the protocol's fairness rule): the paper default
and ``@scaled`` to the training length. Which Config fields count as such is
their own metadata (``length_field("paper_length", ...)`` in the Config, see
:func:`posenc.core.fields.length_field`), so a new encoding declares it where the field is
defined and is scaled without being listed anywhere. A profile's own parameter
overrides (``[encoding_config.NAME]``) apply on top of those lengths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from posenc import schedules
from posenc.compare.executor import max_threads
from posenc.compare.profile.definition import MAX_SEED, Profile
from posenc.compare.profile.geometry import eval_length, task_eval, train_length
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding, RotaryEncoding
from posenc.records.provenance import imports_of
from posenc.records.spec import RunSpec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.registry import encodings
from posenc.tasks import task_registry

#: Ruoss et al. 2023 draw positions from [0, L) with L much larger than any test
#: length; "paper" uses this L, "scaled" uses the longest evaluation sequence.
RANDOMIZED_PAPER_MAX_LEN = 2048


def encoding_overrides(
    cls: type[PositionalEncoding],
    *,
    train_len: int,
    eval_len: int,
    randomized_max_len: int | None,
    scaled: bool,
) -> dict[str, Any]:
    """Config overrides making encoding class ``cls`` fit a run (by the meaning of Config fields, never by name).

    * Learned tables (``trained_rows``/``extra_rows``, e.g. ``max_len``/``extra_rows``): the
      trained rows cover the trained positions (``L_max`` when positions are randomized);
      untrained extra rows cover the rest, so the failure past the trained length is real.
    * The training ``context`` (RoPE's ``max_position_embeddings``, read only by scalings)
      = training length.
    * ``scaled``: every ``paper_length`` field = the training length (in the field's type).
    """
    config = cls.Config
    defaults = config.parameters()
    out: dict[str, Any] = {}
    trained = randomized_max_len or train_len
    for key, meaning in config.meanings("length").items():
        if meaning == "trained_rows":
            out[key] = trained
        elif meaning == "extra_rows":
            out[key] = max(0, max(eval_len, randomized_max_len or 0) - trained)
        elif meaning == "context":
            out[key] = train_len
        elif meaning == "paper_length" and scaled:
            out[key] = type(defaults[key])(train_len)  # 512.0 -> float, 128 -> int
    return out


def without_variants(profile: Profile, classes: dict[str, type[PositionalEncoding]]) -> list[str]:
    """Encodings of ``classes`` (name -> class) that the profile's architecture variants are not
    run for: every one that is not additive, and those outside ``profile.variant_encodings``."""
    only = profile.variant_encodings
    return [n for n, cls in classes.items() if cls.kind != "additive" or (only is not None and n not in only)]


def variants_note(profile: Profile) -> str | None:
    """The note saying which encodings of the grid the profile's architecture variants are not
    run for (None: every one gets them, or the profile has none)."""
    if not profile.variants:
        return None
    skipped = without_variants(profile, resolve_encodings(profile))
    if not skipped:
        return None
    scope = (
        "additive encodings only"
        if profile.variant_encodings is None
        else f"{', '.join(profile.variant_encodings)} only"
    )
    return f"note: variants {', '.join(profile.variants)} apply to {scope}; not run for: {', '.join(skipped)}"


def has_length_parameters(cls: type[PositionalEncoding]) -> bool:
    """True when ``cls``'s Config has a ``paper_length`` field (a ``@scaled`` variant differs)."""
    return "paper_length" in cls.Config.meanings("length").values()


# ---------------------------------------------------------------------------
# The grid.
# ---------------------------------------------------------------------------


def check_installation(
    encodings: Iterable[str] = (), tasks: Iterable[str] = (), *, log: Callable[[str], None] | None = None
) -> None:
    """Refuse, before any run, a grid that names a built-in encoding or task whose name an installed
    entry point also takes (the built-in is what runs; the user may have meant theirs). Such an
    entry point is left out alone: a grid without its name runs, with a note through ``log``."""
    asked = {("encoding", n) for n in encodings} | {("task", n) for n in tasks}
    for noun, group in (("encoding", ENCODING_GROUP), ("task", task_registry.GROUP)):
        for name, message in group.clashes_by_name().items():
            if (noun, name) in asked:
                raise PosencError(message)
            if log is not None:
                log(f"note: {message}")


def resolve_encodings(
    profile: Profile, requested: tuple[str, ...] | None = None
) -> dict[str, type[PositionalEncoding]]:
    """The encodings to run, as given (names or import specs), each resolved to its class once
    (the profile's own names were resolved when it was checked: :meth:`Profile.encoding_class`)."""
    if requested:
        return {name: profile.encoding_class(name) for name in dict.fromkeys(requested)}
    if profile.encodings is None:
        # "all": every sequence encoding (grid encodings, whose positions have axes, run on the grid task)
        return {n: cls for n, cls in encodings().items() if cls.position_axes == 1}
    return {name: profile.encoding_class(name) for name in dict.fromkeys(profile.encodings)}


@dataclass
class Grid:
    specs: list[RunSpec]
    skipped_variants: list[str] = field(default_factory=list)  # encodings variants do not apply to
    # registered classes no other process can import (why, per name): the grid runs in this process only
    local_only: list[str] = field(default_factory=list)


def build_grid(
    profile: Profile,
    *,
    encodings: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    threads: int = 1,
    device: str = "cpu",
    threads_option: str = "threads",
) -> Grid:
    """Expand a profile (optionally narrowed) into independent run specs; ``threads`` (checked here,
    an error naming ``threads_option``) and ``device`` (resolved:
    :func:`posenc.compare.device.resolve_device`) say where they execute."""
    check_int(threads_option, threads, minimum=1, maximum=max_threads())
    classes = resolve_encodings(profile, encodings)
    names = list(classes)
    task_list = tuple(dict.fromkeys(task_registry.validate_task(task) for task in tasks or profile.tasks))
    imports, local_only = imports_of(names, task_list)
    if seeds is not None:
        seeds = tuple(check_int("seeds", seed, minimum=0, maximum=MAX_SEED) for seed in seeds)
    changes = [profile.variant(v) for v in profile.variants]  # architecture variants, parsed when checked
    skipped = without_variants(profile, classes) if changes else []
    specs: list[RunSpec] = []
    for seed in seeds if seeds is not None else profile.seeds:
        for task in task_list:
            for name, cls in classes.items():
                runs = _encoding_runs(
                    profile, name, cls, task=task, seed=seed, threads=threads, device=device, imports=imports
                )
                if name not in skipped:  # architecture variants of the default run
                    runs += _architecture_runs(runs[0], changes, runs)
                specs += runs
            for text in profile.schedules:  # per-layer schedules: one run each, labelled by the schedule
                specs.append(
                    schedule_spec(text, profile, seed=seed, task=task, threads=threads, device=device)
                )
    return Grid(specs, skipped, local_only)


def _encoding_runs(
    profile: Profile, name: str, cls: type[PositionalEncoding], *, task: str, seed: int, **run: Any
) -> list[RunSpec]:
    """The runs of encoding ``name`` (of class ``cls``) for one task and seed: its default run first, then its
    ``@scaled`` and randomized-position variants (``run``: ``threads``, ``device`` and ``imports``,
    as :class:`~posenc.records.spec.RunSpec` takes them)."""
    train = profile.lm_train if task == "lm" else profile.task_train
    t_len, e_len = train_length(task, train), eval_length(task, train, profile.eval)
    variants: list[tuple[str, int | None]] = [("default", None)]
    if profile.scaled_variants and has_length_parameters(cls):
        variants.append(("scaled", None))
    if "*" in profile.randomized or name in profile.randomized:
        for which in profile.randomized_max_len:
            longest = e_len if which == "scaled" else max(RANDOMIZED_PAPER_MAX_LEN, e_len)
            variants.append(("default" if which == "scaled" else "paper-L", longest))
    runs = []
    for variant, l_max in variants:
        overrides = encoding_overrides(
            cls, train_len=t_len, eval_len=e_len, randomized_max_len=l_max, scaled=variant == "scaled"
        ) | profile.encoding_config.get(name, {})
        scaled_rope = issubclass(cls, RotaryEncoding) and cls.supports_scaling and l_max is None
        runs.append(
            RunSpec(
                task=task,
                encoding=name,
                seed=seed,
                variant=variant,
                encoding_config=overrides,
                randomized_max_len=l_max,
                model=profile.model,
                train=train,
                eval=task_eval(task, train, profile.eval),
                scalings=run_scalings(profile, task) if scaled_rope else (),
                finetune=run_finetune(profile, task) if scaled_rope else 0,
                profile=profile.name,
                precision=profile.precision,
                encoding_class=cls,
                **run,
            )  # fmt: skip
        )
    return runs


def _architecture_runs(
    default: RunSpec, changes: list[dict[str, dict[str, Any]]], runs: list[RunSpec]
) -> list[RunSpec]:
    """The architecture variants of a default run (``changes``: :func:`parse_variant` of each),
    each once and none that is one of ``runs`` already (``combine=add`` is the default run itself)."""
    out: list[RunSpec] = []
    for change in changes:
        spec = dataclasses.replace(
            default,
            model=dataclasses.replace(default.model, **change["model"]),
            train=dataclasses.replace(default.train, **change["train"]),
        )
        if spec not in runs and spec not in out:
            out.append(spec)
    return out


def run_scalings(profile: Profile, task: str) -> tuple[str, ...]:
    """The profile's RoPE scalings a rotary run of ``task`` evaluates: fine-tuned ones on the LM only
    (fine-tuning on longer examples of a synthetic task would train on its test lengths). Each is
    read as the profile holds it, parsed once when it was checked (:meth:`Profile.scaling`)."""
    return tuple(s for s in profile.scalings if task == "lm" or not profile.scaling(s).needs_finetune)


def run_finetune(profile: Profile, task: str) -> int:
    """Fine-tuning steps of a rotary run of ``task``: the profile's, if a scaling needs them."""
    needed = any(profile.scaling(s).needs_finetune for s in run_scalings(profile, task))
    return profile.finetune if needed else 0


def schedule_spec(
    text: str, profile: Profile, *, seed: int, task: str, threads: int, device: str = "cpu"
) -> RunSpec:
    """The run of per-layer schedule ``text`` (e.g. ``"irope:2"``): each encoding it uses gets the
    length overrides of a default run (:func:`encoding_overrides`) and the profile's own, keyed by
    its registry name."""
    schedule = schedules.parse(text, profile.model.num_layers)
    train = profile.lm_train if task == "lm" else profile.task_train
    t_len, e_len = train_length(task, train), eval_length(task, train, profile.eval)
    classes = {name: profile.encoding_class(name) for name in schedule.encodings}
    overrides = {
        name: encoding_overrides(cls, train_len=t_len, eval_len=e_len, randomized_max_len=None, scaled=False)
        | profile.encoding_config.get(name, {})
        for name, cls in classes.items()
    }
    rotary = any(issubclass(cls, RotaryEncoding) and cls.supports_scaling for cls in classes.values())
    return RunSpec(
        task=task,
        encoding=schedule.layers[0].encoding,
        seed=seed,
        encoding_config={name: config for name, config in overrides.items() if config},
        model=profile.model,
        train=train,
        eval=task_eval(task, train, profile.eval),
        scalings=run_scalings(profile, task) if rotary else (),
        finetune=run_finetune(profile, task) if rotary else 0,
        schedule=text,
        profile=profile.name,
        threads=threads,
        precision=profile.precision,
        device=device,
    )
