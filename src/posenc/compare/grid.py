"""Benchmark profiles (budget tiers) and the grid of run specs they expand to.

| profile | budget | grid |
|---|---|---|
| ``smoke`` | seconds | 2 encodings, copy + LM, tiny model, 3 seeds; exercises every code path (tests) |
| ``quick`` | <= 10 min on 2 idle cores, figures and report included (measured: docs/benchmark.md) | the encodings the papers' claims name + randomized RoPE, copy + passkey + LM, 3 seeds |
| ``standard`` | <= 60 min on 2 cores (measured: docs/benchmark.md) | every registered encoding + randomized sinusoidal and RoPE, copy + passkey + LM, 3 seeds |
| ``notes`` | about 7 min on 2 idle cores (measured: docs/benchmark.md) | sinusoidal + learned with the architecture variants, scaled_sinusoidal, integer positions, RoPE, T5, ALiBi; copy, 3 seeds |
| ``full`` | many hours (not timed) | every encoding and task, 5 seeds, default *and* scaled variants, randomized variants, architecture variants |

Encodings always come from the registry (:data:`posenc.ENCODINGS`); a profile
may only *name a subset* of it. Parameters whose paper default assumes long
training run twice in ``full`` (the protocol's fairness rule): the paper default
and ``@scaled`` to the training length. Which Config fields count as such is
their own metadata (``length_field("paper_length", ...)`` in the Config, see
:func:`posenc.base.length_field`), so a new encoding declares it where the field is
defined and is scaled without being listed anywhere.

Architecture variants (*how* position is added, for additive encodings
only) are written ``key=value`` with ``+`` joining settings of one variant:
``combine=concat``, ``inject=every_layer``, ``position_warmup=200`` (the additive
signal ramps from 0 to 1 over 200 steps), ``scale_embeddings=true`` (token embeddings
times sqrt(d_model), Vaswani et al. 3.4), ``inject=every_layer+position_warmup=200``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from posenc import schedules
from posenc.base import check_choice, check_int
from posenc.bench import scalings
from posenc.bench.executor import max_threads
from posenc.bench.spec import EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.errors import PosencError
from posenc.model import COMBINES, INJECTS
from posenc.registry import ENCODINGS
from posenc.tasks import ALL_TASKS, max_sequence_length

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

#: Ruoss et al. 2023 draw positions from [0, L) with L much larger than any test
#: length; "paper" uses this L, "scaled" uses the longest evaluation sequence.
RANDOMIZED_PAPER_MAX_LEN = 2048


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
    scalings: tuple[str, ...] = ()  # RoPE scalings evaluated on rotary models (posenc.bench.scalings)
    finetune: int = 0  # fine-tuning steps of the scalings whose papers fine-tune (PI, YaRN); LM only
    variants: tuple[str, ...] = ()  # architecture variants of additive encodings, "combine=concat"
    variant_encodings: tuple[str, ...] | None = (
        None  # encodings the variants apply to (None: every additive one)
    )
    schedules: tuple[str, ...] = ()  # per-layer schedules run as grid entries, "irope:2" (posenc.schedules)
    workers: int = 1  # default --workers
    lr_grid: tuple[float, ...] = ()  # learning rates tried per encoding (posenc.bench.tuning); () = no tuning
    # Tasks that reuse another task's learning-rate choice, as (task, tuned on) pairs;
    # ("architecture variants", "default"): variants use their default run's choice.
    tune_share: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PAPER_EVAL = EvalSpec()
#: quick and standard train alike (so standard shares quick's learning-rate choices):
#: copy-like tasks on n <= 8, batch 32, step cap 1500, a held-out check every 50 steps;
#: the byte LM on 64-byte windows, batch 16, step cap 1000, a check every 100 steps,
#: converged once 100 steps improve the held-out loss by less than 2%, from step 600 on.
#: (Measured: these LMs never flatten to 1% over 200 steps within 1000 steps, at any rate of
#: the grid, while the loss before step 600 can stall for a few hundred steps before the
#: model starts to use context.)
QUICK_TASK_TRAIN = TrainSpec(steps=1500, batch_size=32, warmup_steps=50, max_len=8, check_every=50)
QUICK_LM_TRAIN = TrainSpec(
    steps=1000,
    batch_size=16,
    warmup_steps=50,
    max_len=64,
    check_every=100,
    plateau=0.02,
    plateau_checks=1,
    plateau_after=600,
)
QUICK_EVAL = EvalSpec(
    lengths=(4, 8, 10, 12, 16, 24, 32),
    samples=128,
    lm_lengths=(32, 64, 96, 128, 192, 256, 512),
    lm_bytes=6144,
    lastk_contexts=(1.0, 1.25, 1.5, 2.0, 4.0, 8.0),
    lastk_k=32,
    lastk_windows=32,
    position_multiple=8,
)
STANDARD_SCALINGS = ("dynamic:2", "dynamic:4", "yarn-dynamic", "ntk:4", "linear:4", "yarn:4")
ALL_SCALINGS = (
    *(f"{t}:{s}" for t in ("linear", "ntk", "dynamic", "yarn") for s in (2, 4, 8)),
    scalings.DYNAMIC_YARN,
)

#: The default profile. Standard and notes derive from it (``dataclasses.replace``), so the
#: three train and evaluate alike and share quick's learning-rate choices.
QUICK = Profile(
    name="quick",
    description="<= 10 min on 2 idle CPU cores, figures and report included: 6 encodings + randomized RoPE "
    "x (copy + passkey + LM), 3 seeds, RoPE's context extensions",
    why=(
        "The encodings the ALiBi and NoPE papers rank and the notes make claims about; KERPLE and FIRE "
        "(measured: 145 s and 174 s of the 1241 s of run time with them, 10 min 51 s end to end) run in "
        "standard, which has every encoding."
    ),
    encodings=("learned", "sinusoidal", "nope", "rope", "alibi", "t5"),
    tasks=("copy", "passkey", "lm"),
    seeds=(0, 1, 2),
    model=ModelSpec(),
    task_train=QUICK_TASK_TRAIN,
    lm_train=QUICK_LM_TRAIN,
    eval=QUICK_EVAL,
    randomized=("rope",),
    scalings=("dynamic:4", "yarn-dynamic", "linear:4", "yarn:4"),
    finetune=100,
    lr_grid=(1e-3, 2e-3, 4e-3),
    workers=2,
)
STANDARD = dataclasses.replace(
    QUICK,
    name="standard",
    description="every registered encoding x (copy + passkey + LM), 3 seeds (<= 60 min on 2 cores)",
    why=(
        "Quick's training settings (so it shares quick's learning-rate choices) for every encoding; "
        "the four other synthetic tasks would take it past an hour on 2 cores (full runs them)."
    ),
    encodings=None,
    randomized=("sinusoidal", "rope"),
    scalings=STANDARD_SCALINGS,
)
NOTES = dataclasses.replace(
    STANDARD,
    name="notes",
    description=(
        "the notes' claims about trained models: extrapolation of the encodings they name, and "
        "their open questions (add vs concatenate, position at every layer, PE warm-up, scaling) "
        "as variants of sinusoidal and learned; copy, 3 seeds (measured: see docs/benchmark.md)"
    ),
    why=(
        "Standard's model, training and evaluation (so its default runs are standard's runs); "
        "the variants on the two additive encodings the notes discuss, plus scaled_sinusoidal (a "
        "learned gain on the sinusoid), and raw integer positions, RoPE, T5 and ALiBi for the "
        "notes' extrapolation claims; one task (copy). Every variant is tuned on its own (the same learning-rate grid, "
        "held-out in-distribution checks), so each arm of an open question runs at its best rate: "
        "sinusoidal learns copy at none of the three rates, and an ablation at its rate would only "
        "repeat that."
    ),
    encodings=("sinusoidal", "learned", "scaled_sinusoidal", "integer_index", "rope", "t5", "alibi"),
    tasks=("copy",),
    randomized=(),
    variants=("combine=concat", "inject=every_layer", "position_warmup=200", "scale_embeddings=true"),
    variant_encodings=("sinusoidal", "learned"),
)

PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        description="seconds; for tests: tiny model, a few steps, every code path",
        why="Exercises tuning, training, every evaluation, scalings, storage and the report; numbers are meaningless.",
        encodings=("sinusoidal", "nope"),
        tasks=("copy", "lm"),
        seeds=(0, 1, 2),
        model=ModelSpec(d_model=16, num_heads=2, num_layers=1, ffn_dim=32),
        task_train=TrainSpec(
            steps=6, batch_size=8, warmup_steps=2, max_len=6, check_every=3, valid_samples=16
        ),
        lm_train=TrainSpec(
            steps=6,
            batch_size=4,
            warmup_steps=2,
            max_len=16,
            check_every=2,
            valid_samples=4,
            plateau_checks=1,
        ),
        eval=EvalSpec(
            lengths=(4, 6, 9, 12, 24),
            samples=8,
            lm_lengths=(8, 16, 32, 64),
            lm_bytes=128,
            lastk_contexts=(1.0, 2.0),
            lastk_k=8,
            lastk_windows=2,
            position_multiple=4,
        ),
        scalings=("dynamic:2", "yarn-dynamic", "yarn:2"),
        finetune=2,
        lr_grid=(1e-3,),  # one rate: nothing to tune (tests give it a grid to exercise tuning)
        workers=1,
    ),
    "quick": QUICK,
    "standard": STANDARD,
    "notes": NOTES,
    "full": Profile(
        name="full",
        description=(
            "The protocol in full: 5 seeds, every task and encoding, default and scaled variants, "
            "architecture variants of additive encodings (not timed: many hours)"
        ),
        why="The protocol as written (step caps of 1500 task / 2000 LM steps, 256 examples per length).",
        encodings=None,
        tasks=ALL_TASKS,
        seeds=(0, 1, 2, 3, 4),
        model=ModelSpec(),
        task_train=TrainSpec(steps=3000),
        lm_train=TrainSpec(steps=4000, batch_size=16, max_len=128, check_every=100),
        eval=PAPER_EVAL,
        randomized=("*",),
        randomized_max_len=("scaled", "paper"),
        scaled_variants=True,
        scalings=ALL_SCALINGS,
        finetune=400,
        variants=("combine=concat", "inject=every_layer", "position_warmup=200"),
        lr_grid=(5e-4, 1e-3, 2e-3, 4e-3),
        workers=2,
    ),
}


def get_profile(name: str) -> Profile:
    return PROFILES[check_choice("profile", name, tuple(PROFILES))]


# ---------------------------------------------------------------------------
# Lengths a run trains and evaluates at (tokens per sequence).
# ---------------------------------------------------------------------------


def train_length(task: str, train: TrainSpec) -> int:
    """Tokens in the longest training sequence the model reads."""
    return train.max_len if task == "lm" else max_sequence_length(task, train.max_len)


def eval_length(task: str, train: TrainSpec, ev: EvalSpec) -> int:
    """Tokens in the longest sequence any evaluation feeds the model."""
    if task == "lm":
        longest_context = max(ev.lastk_contexts) * train.max_len
        return int(max(max(ev.lm_lengths), longest_context, ev.position_multiple * train.max_len))
    return max(max_sequence_length(task, n) for n in ev.lengths)


def encoding_overrides(
    name: str, *, train_len: int, eval_len: int, randomized_max_len: int | None, scaled: bool
) -> dict[str, Any]:
    """Config overrides making ``name`` fit a run (by the meaning of Config fields, never by name).

    * Learned tables (``trained_rows``/``extra_rows``, e.g. ``max_len``/``extra_rows``): the
      trained rows cover the trained positions (``L_max`` when positions are randomized);
      untrained extra rows cover the rest, so the failure past the trained length is real.
    * The training ``context`` (RoPE's ``max_position_embeddings``, read only by scalings)
      = training length.
    * ``scaled``: every ``paper_length`` field = the training length (in the field's type).
    """
    config = ENCODINGS[name].Config
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


def without_variants(profile: Profile, names: list[str]) -> list[str]:
    """Encodings of ``names`` that the profile's architecture variants are not run for:
    every one that is not additive, and those outside ``profile.variant_encodings``."""
    only = profile.variant_encodings
    return [n for n in names if ENCODINGS[n].kind != "additive" or (only is not None and n not in only)]


def has_length_parameters(name: str) -> bool:
    """True when ``name``'s Config has a ``paper_length`` field (a ``@scaled`` variant differs)."""
    return "paper_length" in ENCODINGS[name].Config.meanings("length").values()


# ---------------------------------------------------------------------------
# The grid.
# ---------------------------------------------------------------------------


def resolve_encodings(profile: Profile, requested: tuple[str, ...] | None) -> tuple[list[str], list[str]]:
    """(encodings to run, names the profile wanted that are not registered)."""
    if requested:
        for name in requested:
            check_choice("encoding", name, tuple(ENCODINGS))
        return list(requested), []
    if profile.encodings is None:
        return list(ENCODINGS), []
    return [e for e in profile.encodings if e in ENCODINGS], [
        e for e in profile.encodings if e not in ENCODINGS
    ]


MAX_SEED = 2**32 - 1  # seeds (plus small offsets) go to torch.Generator.manual_seed


@dataclass
class Grid:
    specs: list[RunSpec]
    missing_encodings: list[str] = field(default_factory=list)  # named by the profile, not registered
    skipped_variants: list[str] = field(default_factory=list)  # encodings variants do not apply to


def build_grid(
    profile: Profile,
    *,
    encodings: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    threads: int = 1,
) -> Grid:
    """Expand a profile (optionally narrowed) into independent run specs."""
    names, missing = resolve_encodings(profile, encodings)
    task_list = tuple(tasks or profile.tasks)
    for task in task_list:
        check_choice("task", task, ALL_TASKS)
    check_int("threads", threads, minimum=1, maximum=max_threads())
    if seeds is not None:
        seeds = tuple(check_int("seeds", seed, minimum=0, maximum=MAX_SEED) for seed in seeds)
    changes = [parse_variant(v) for v in profile.variants]  # architecture variants
    skipped = without_variants(profile, names) if changes else []
    specs: list[RunSpec] = []
    for seed in seeds if seeds is not None else profile.seeds:
        for task in task_list:
            train = profile.lm_train if task == "lm" else profile.task_train
            t_len, e_len = train_length(task, train), eval_length(task, train, profile.eval)
            for name in names:
                variants: list[tuple[str, int | None]] = [("default", None)]
                if profile.scaled_variants and has_length_parameters(name):
                    variants.append(("scaled", None))
                if "*" in profile.randomized or name in profile.randomized:
                    for which in profile.randomized_max_len:
                        longest = e_len if which == "scaled" else max(RANDOMIZED_PAPER_MAX_LEN, e_len)
                        variants.append(("default" if which == "scaled" else "paper-L", longest))
                first = len(specs)  # the default run of (seed, task, name) is specs[first]
                for variant, l_max in variants:
                    overrides = encoding_overrides(
                        name,
                        train_len=t_len,
                        eval_len=e_len,
                        randomized_max_len=l_max,
                        scaled=variant == "scaled",
                    )
                    rotary = (
                        ENCODINGS[name].kind == "rotary" and "scaling" in ENCODINGS[name].Config.field_names()
                    )
                    scaled_rope = rotary and l_max is None
                    specs.append(
                        RunSpec(
                            task=task,
                            encoding=name,
                            seed=seed,
                            variant=variant,
                            encoding_config=overrides,
                            randomized_max_len=l_max,
                            model=profile.model,
                            train=train,
                            eval=profile.eval,
                            scalings=run_scalings(profile, task) if scaled_rope else (),
                            finetune=run_finetune(profile, task) if scaled_rope else 0,
                            profile=profile.name,
                            threads=threads,
                        )
                    )
                if name not in skipped:  # architecture variants of the default run
                    for change in changes:
                        default = specs[first]
                        spec = dataclasses.replace(
                            default,
                            model=dataclasses.replace(default.model, **change["model"]),
                            train=dataclasses.replace(default.train, **change["train"]),
                        )
                        if spec not in specs[first:]:  # "combine=add" is the default run itself
                            specs.append(spec)
            for text in profile.schedules:  # per-layer schedules: one run each, labelled by the schedule
                specs.append(schedule_spec(text, profile, seed=seed, task=task, threads=threads))
    return Grid(specs, missing, skipped)


def run_scalings(profile: Profile, task: str) -> tuple[str, ...]:
    """The profile's RoPE scalings a rotary run of ``task`` evaluates (fine-tuned ones: LM only)."""
    return scalings.for_task(profile.scalings, task)


def run_finetune(profile: Profile, task: str) -> int:
    """Fine-tuning steps of a rotary run of ``task``: the profile's, if a scaling needs them."""
    needed = any(scalings.parse(s).needs_finetune for s in run_scalings(profile, task))
    return profile.finetune if needed else 0


def schedule_spec(text: str, profile: Profile, *, seed: int, task: str, threads: int) -> RunSpec:
    """The run of per-layer schedule ``text`` (e.g. ``"irope:2"``): each encoding it uses gets the
    length overrides of a default run (:func:`encoding_overrides`), keyed by its registry name."""
    schedule = schedules.parse(text, profile.model.num_layers)
    train = profile.lm_train if task == "lm" else profile.task_train
    t_len, e_len = train_length(task, train), eval_length(task, train, profile.eval)
    overrides = {
        name: encoding_overrides(name, train_len=t_len, eval_len=e_len, randomized_max_len=None, scaled=False)
        for name in schedule.encodings
    }
    rotary = any("scaling" in ENCODINGS[name].Config.field_names() for name in schedule.encodings)
    return RunSpec(
        task=task,
        encoding=schedule.layers[0].encoding,
        seed=seed,
        encoding_config={name: config for name, config in overrides.items() if config},
        model=profile.model,
        train=train,
        eval=profile.eval,
        scalings=run_scalings(profile, task) if rotary else (),
        finetune=run_finetune(profile, task) if rotary else 0,
        schedule=text,
        profile=profile.name,
        threads=threads,
    )
