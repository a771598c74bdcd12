"""The checks of a profile's values that its types cannot say: names that resolve (encodings,
tasks), the model's shape, training tables whose steps and lengths agree, learning rates and
weight decay that AdamW can train with, evaluation lengths, scalings, variants, schedules and each
``[encoding_config.NAME]`` against its encoding. Each raises one
:class:`~posenc.core.errors.PosencError` naming the file (or the ``--set`` item or option that set
the key), the key, the value and what is valid.

:func:`checked` runs them all, once, when a profile is read, and gives the profile back holding
what they resolved (:class:`~posenc.compare.profile.definition.Resolved`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posenc import schedules
from posenc.compare.device import DEVICE_FORMS, PRECISIONS, check_device_text
from posenc.compare.profile.definition import (
    ARCHITECTURE,
    DEFAULT_RUN,
    MAX_COUNT,
    RANDOMIZED_MAX_LEN,
    TRAIN_TABLES,
    KeySources,
    Profile,
    Resolved,
    dotted,
)
from posenc.compare.profile.geometry import eval_length, task_eval, train_length
from posenc.compare.profile.question_checks import check_questions, fit_questions
from posenc.compare.profile.variants import parse_variant
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import MISSING, Where
from posenc.core.errors import PosencError
from posenc.core.plugins import is_spec
from posenc.encoding.base import PositionalEncoding, RotaryEncoding
from posenc.nn.attention import check_kv_heads
from posenc.nn.transformer import TransformerConfig
from posenc.records import benchmark_scalings as scalings
from posenc.records.benchmark_scalings import BenchmarkScaling
from posenc.records.spec import LM_PROTOCOLS, TrainSpec
from posenc.registry import BUILTINS as BUILTIN_ENCODINGS
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.registry import build_for_model, get_encoding_class
from posenc.tasks import synthetic
from posenc.tasks.task_registry import lengths_at_scales, max_sequence_length, task_names, validate_task


def checked(profile: Profile, where: KeySources) -> Profile:
    """``profile`` checked for what the types cannot say (names, the model's shape, lengths,
    variants, schedules, and keys that must agree with each other), holding what the checks
    resolved: each encoding's class, each scaling and variant parsed (:attr:`Profile.resolved`)."""
    classes = _check_names(profile, where)
    _check_setting(profile, where)
    for key in TRAIN_TABLES:
        _check_training(key, getattr(profile, key), where)
    _check_learning_rates(profile, where)
    for key in TRAIN_TABLES:
        _check_decay(profile, key, where)
    _check_eval(profile, where)
    parsed = {
        key: _parsed(key, values, parse, where)
        for key, values, parse in (
            ("scalings", profile.scalings, scalings.parse),
            ("variants", profile.variants, parse_variant),
            ("schedules", profile.schedules, lambda item: schedules.parse(item, profile.model.num_layers)),
        )
    }
    _check_encoding_config(profile, classes, where)
    profile, note = fit_questions(profile, where)
    check_questions(profile, where)
    _probe_scalings(profile, classes, parsed["scalings"], where)
    resolved = Resolved(
        classes=classes,
        scalings=parsed["scalings"],
        variants=parsed["variants"],
        notes=(note,) if note else (),
    )
    return dataclasses.replace(profile, resolved=resolved)


def _parsed(key: str, values: tuple[str, ...], parse: Any, where: Where) -> dict[str, Any]:
    """``{text: parse(text)}`` for each of ``values``, or one error naming ``key`` and the text."""
    out = {}
    for item in values:
        try:
            out[item] = parse(item)
        except PosencError as exc:
            raise where.error(key, item, str(exc)) from None
    return out


def _check_setting(profile: Profile, where: Where) -> None:
    """Where it runs and the model's shape: the device, the words a key takes, the seeds, the
    key/value heads and a Transformer the model's keys build."""
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


def _check_names(profile: Profile, where: Where) -> dict[str, type[PositionalEncoding]]:
    """Every encoding and task a key names resolves (a registry name or an import spec): the
    classes of the encodings, by name, each looked up once."""
    if not profile.tasks:
        raise where.error("tasks", [], "must name at least one task")
    for task in profile.tasks:
        _check_name(task, "tasks", list(profile.tasks), "task", where)
    if profile.encodings is not None and not profile.encodings:
        raise where.error("encodings", [], 'must name at least one encoding (or "all")')
    classes: dict[str, type[PositionalEncoding]] = {}
    for key, names in (
        ("encodings", profile.encodings or ()),
        ("randomized", [name for name in profile.randomized if name != "*"]),  # "*": every one of the grid
        ("variant_encodings", profile.variant_encodings or ()),
    ):
        for name in names:
            if name not in classes:
                classes[name] = _check_name(name, key, list(getattr(profile, key) or ()), "encoding", where)
            if key == "variant_encodings" and classes[name].kind != "additive":
                raise where.error(
                    "variant_encodings",
                    list(profile.variant_encodings or ()),
                    f"{name!r} is {classes[name].kind}; architecture variants change how an additive encoding "
                    "is added to the tokens, so they apply to additive encodings only",
                )
    _check_tune_share(profile, where)
    return classes


def _check_tune_share(profile: Profile, where: Where) -> None:
    """Each task that shares another's learning-rate choice names two tasks of one kind."""
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


def _check_learning_rates(profile: Profile, where: KeySources) -> None:
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


def _check_decay(profile: Profile, part: str, where: KeySources) -> None:
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


def _check_encoding_config(
    profile: Profile, classes: dict[str, type[PositionalEncoding]], where: Where
) -> None:
    """``[encoding_config.NAME]``: a known encoding, fields a profile may set, a model it builds
    (``classes``: those resolved already, by name; another one is resolved here and added)."""
    model = profile.model
    for name, config in profile.encoding_config.items():
        key = dotted("encoding_config", name)
        try:
            cls = classes[name] if name in classes else get_encoding_class(name)
            classes[name] = cls
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


def _probe_scalings(
    profile: Profile,
    classes: dict[str, type[PositionalEncoding]],
    parsed: dict[str, BenchmarkScaling],
    where: Where,
) -> None:
    """Each scaling from outside posenc run as the grid's rotary runs will evaluate it, before any
    run (:func:`posenc.records.benchmark_scalings.probe`): for each scaled rotary encoding of the
    profile (``"all"``: posenc's own), built as the grid builds it, and each task's trained length
    and evaluation lengths. One that raises or returns NaN or a wrong shape is one error naming
    ``scalings`` and the scaling."""
    if not parsed:
        return
    named = classes if profile.encodings is not None else BUILTIN_ENCODINGS
    model = profile.model
    geometries = set()
    for name, cls in named.items():
        if issubclass(cls, RotaryEncoding) and cls.supports_scaling:
            try:
                built: Any = build_for_model(cls, d_model=model.d_model, num_heads=model.num_heads, causal=True,
                                             **profile.encoding_config.get(name, {}))  # fmt: skip
            except Exception:  # noqa: BLE001  (an outside encoding that does not build: the contract says why)
                continue
            if hasattr(built, "rotary_dim") and hasattr(built.config, "base"):
                geometries.add((int(built.rotary_dim), float(built.config.base)))
    for task in profile.tasks:
        train = profile.lm_train if task == "lm" else profile.task_train
        ev = task_eval(task, train, profile.eval)
        read = ev.lm_lengths if task == "lm" else tuple(max_sequence_length(task, n) for n in ev.lengths)
        original = train_length(task, train)
        lengths = tuple(sorted({original, *read, eval_length(task, train, profile.eval)}))
        for text in (text for text, scaling in parsed.items() if task == "lm" or not scaling.needs_finetune):
            for dim, base in sorted(geometries):
                try:
                    scalings.probe(parsed[text], dim=dim, base=base, original=original, lengths=lengths)
                except PosencError as exc:
                    raise where.error("scalings", text, f"{exc} (as a {task} run evaluates it)") from None


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
