"""RoPE context-extension scalings as the grids name them and their papers use them: one vocabulary
for ``posenc compare --scalings`` (models the benchmark trains) and ``posenc extend --scalings`` (a
pretrained checkpoint).

The names are the registry's (:data:`posenc.encoding.rotary.scaling.ROPE_SCALINGS`: the built-ins,
``posenc.register_scaling`` and the ``posenc.rope_scalings`` entry points), so a scaling registered
there is a name of both grids and of both commands' help, with no list of names here. A grid writes
a scaling in one of these forms (:func:`parse_grid`, one parser for both):

=================  ==================================================================================
form               what it is
=================  ==================================================================================
``TYPE:FACTOR``    the scaling ``TYPE`` with that factor: ``yarn:4``, ``dynamic:4``, ``linear:4``
``TYPE``           ``posenc extend``: one entry per factor of its ``factors``; and a scaling that
                   takes no factor, such as ``longrope``, whose keys a checkpoint's config gives
``TYPE-dynamic``   its factor chosen per length, ``max(1, L / L0)``, for a scaling whose spec says
                   so (``yarn-dynamic``: Dynamic-YaRN, Peng et al. 2023, sec. 3.3); ``dynamic-TYPE``
                   (``dynamic-yarn``, how ``posenc extend`` once wrote it) is read as the same
``none``           ``posenc extend``: plain RoPE (``posenc compare`` always evaluates it)
=================  ==================================================================================

What a benchmark builds a scaling with is declared on its spec
(:class:`posenc.encoding.rotary.scaling.RopeScaling`), never in a table here: the factor, the
original context, the keys its paper's released models use (``published``: Llama 3.1's bands,
``low_freq_factor`` 1 and ``high_freq_factor`` 4, which count turns over the original context and
so carry over to any model), whether its paper fine-tunes (``finetuned``), why no benchmark can
choose the other keys it needs (``cannot_build``: LongRoPE's per-frequency factors, searched for one
model), and how a length-dependent one reads at one length (``at_length``).

How ``posenc compare`` evaluates each on a model trained with plain RoPE follows its paper:

| scaling | paper's use | here |
|---|---|---|
| ``dynamic`` (dynamic NTK, emozilla 2023) | no fine-tuning | applied to the trained model |
| ``yarn-dynamic`` (Peng et al. 2023, sec. 3.3) | no fine-tuning; s = max(1, L / L0) at the current length L | applied per evaluation length |
| ``ntk`` (NTK-aware, bloc97 2023) | no fine-tuning | applied to the trained model |
| ``linear`` (PI, Chen et al. 2023) | fine-tuned ~1000 steps at the target length | ``finetune`` steps at factor x L_train (LM only) |
| ``yarn`` (Peng et al. 2023) | fine-tuned ~400 steps at the target length | ``finetune`` steps at factor x L_train (LM only) |
| ``llama3`` (Meta 2024, Llama 3.1) | long-context continued pre-training with the scaling in place | ``finetune`` steps at factor x L_train (LM only), with Llama 3.1's bands |

A scaling that needs fine-tuning is never evaluated on a synthetic task (fine-tuning
on longer examples would train on the test lengths), and on the LM without
fine-tuning (``finetune=0``) it is marked as outside its regime. A scaling that needs
keys no benchmark can choose is refused when the profile is read (:func:`parse`), not
when a run evaluates it. A run's spec keeps each scaling as written (``text``), which its run id
hashes; :attr:`BenchmarkScaling.key` is the canonical spelling, the same text for every scaling
of the shipped records.

YaRN's band limits ``beta_fast`` / ``beta_slow`` count rotations of a pair over the
original context. The paper's 32 / 1 were set for Llama 2 (head_dim 128, base 10000,
L0 4096), where about a third of the pairs turn more than 32 times; a head_dim-16
model trained on 64 tokens has no pair that turns more than ~10 times, so the
defaults leave no pair unchanged. :func:`yarn_betas` expresses the limits for the
model ``posenc compare`` trains instead: the same fraction of pairs in each band as in the
paper's setting (``posenc extend`` measures real checkpoints and keeps the paper's limits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NoReturn

from posenc.core.checks import did_you_mean
from posenc.core.errors import PosencError
from posenc.encoding.rotary.scaling import ORIGINAL, ROPE_SCALINGS, RopeScaling, Scaling, broken_scalings

#: YaRN's own setting (Peng et al. 2023, Llama 2): head_dim, base, L0, beta_fast, beta_slow.
YARN_REFERENCE = (128, 10000.0, 4096, 32.0, 1.0)
DYNAMIC = "-dynamic"  # the suffix of a scaling's per-length form (yarn-dynamic)
PLAIN = "none"  # posenc extend's plain RoPE
MAX_FACTOR = 1024.0  # posenc extend's largest factor


def _known(name: str) -> bool:
    """``name`` is a scaling of the registry that loads (a broken entry point is not: it blocks no
    other name; :func:`_refuse_name` says what is wrong with it when it is the name asked for)."""
    try:
        return name in ROPE_SCALINGS
    except PosencError:
        return False


def _form(name: str) -> tuple[str, bool]:
    """``(rope_type, per length)`` of a grid name (``none`` is plain RoPE's ``default``)."""
    if name == PLAIN:
        return "default", False
    base = name.removesuffix(DYNAMIC)
    if base != name and not _known(name) and _known(base):
        return base, True
    return name, False


@dataclass(frozen=True)
class BenchmarkScaling:
    """One scaling of a grid: its name (``none``, a ``rope_type`` or ``TYPE-dynamic``) and factor.

    ``text`` is how it was written (a ``posenc compare`` run keeps it in its spec); two scalings are
    equal when their name and factor are (``yarn:2`` and ``yarn`` with the factor 2)."""

    name: str
    factor: float | None = None  # None: takes none, or chosen per length (TYPE-dynamic)
    text: str = field(default="", compare=False)

    @property
    def rope_type(self) -> str:
        """The key of :data:`posenc.encoding.rotary.scaling.ROPE_SCALINGS` (``default`` for none)."""
        return _form(self.name)[0]

    @property
    def per_length(self) -> bool:
        """Its factor is chosen per evaluation length L: ``max(1, L / L0)``."""
        return _form(self.name)[1]

    @property
    def spec(self) -> RopeScaling:
        return ROPE_SCALINGS[self.rope_type]

    @property
    def needs_finetune(self) -> bool:
        return self.spec.finetuned and self.factor is not None

    @property
    def from_checkpoint(self) -> bool:
        """Its keys are not the benchmark's to choose (:func:`missing_keys`): a checkpoint's config
        that carries the scaling gives them (``posenc extend --scalings longrope``)."""
        return bool(missing_keys(self.rope_type))

    @property
    def length_dependent(self) -> bool:
        """Its frequencies at a length depend on that length (dynamic NTK, its per-length form, LongRoPE)."""
        return self.per_length or self.spec.length_dependent

    @property
    def key(self) -> str:
        """How it is written, canonically: ``yarn:4``, ``yarn-dynamic``, ``none``."""
        return self.name if self.factor is None else f"{self.name}:{self.factor:g}"

    @property
    def label(self) -> str:
        """How a table names it: ``yarn x4``, ``yarn-dynamic``, ``none``."""
        return self.name if self.factor is None else f"{self.name} x{self.factor:g}"

    def keys(
        self, context: int, factor: float | None = None, own: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The scaling's keys (without ``rope_type``) for a model of trained context ``context``:
        ``factor`` (else its own), the original context where it takes one, its paper's published
        keys, and for a scaling whose keys come from a checkpoint, ``own`` (that config's keys)."""
        spec = self.spec
        factor = self.factor if factor is None else factor
        keys: dict[str, Any] = dict(own or {}) if self.from_checkpoint else {}
        if factor is not None:
            keys["factor"] = float(factor)
        keys.update(spec.published)
        if ORIGINAL in spec.takes:
            keys[ORIGINAL] = context
        return keys

    def at(self, length: int, context: int, own: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The length-independent scaling dict this entry is at a sequence of ``length`` tokens
        (trained context ``context``; ``own``: the checkpoint config's keys, for a scaling whose keys
        come from it); None for plain RoPE. A length-dependent scaling reads as its spec's
        ``at_length`` says (dynamic NTK past L0: NTK-aware with the factor at L); a per-length form is
        plain RoPE up to L0 and the scaling with factor L / L0 past it."""
        if self.rope_type == "default":
            return None
        if self.per_length:
            if length <= context:
                return None
            return {"rope_type": self.rope_type, **self.keys(context, length / context)}
        keys = self.keys(context, own=own)
        spec = self.spec
        if not spec.length_dependent:
            return {"rope_type": self.rope_type, **keys}
        if spec.at_length is None:
            raise PosencError(
                f"{self.key} depends on the current length and its RopeScaling has no at_length (how it "
                "reads at one length), which posenc extend measures each length with"
            )
        return spec.at_length(keys, length)

    def dynamic_dict(self, context: int, own: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """posenc's own length-dependent scaling this entry stands for (None: none, or it has no keys
        to make one from)."""
        if self.per_length or self.rope_type == "default" or not self.spec.length_dependent:
            return None
        if self.from_checkpoint and own is None:
            return None
        return {"rope_type": self.rope_type, **self.keys(context, own=own)}


def missing_keys(rope_type: str) -> list[str]:
    """The keys scaling ``rope_type`` requires that a benchmark cannot fill (it gives the factor,
    the original context and the spec's ``published`` keys)."""
    spec = ROPE_SCALINGS[rope_type]
    built = {"factor", ORIGINAL, *spec.published}
    return [key for key in spec.required if key not in built]


def types() -> list[str]:
    """The ``TYPE`` a profile's ``"TYPE:FACTOR"`` may name: every registered RoPE scaling
    (:data:`posenc.encoding.rotary.scaling.ROPE_SCALINGS`, entry points included) but plain RoPE
    and those the benchmark cannot build (:func:`missing_keys`)."""
    return [name for name in ROPE_SCALINGS if name != "default" and not missing_keys(name)]


def names(*, checkpoint: bool = False) -> list[str]:
    """Every name a grid takes, in the registry's order, each type followed by its per-length form;
    ``checkpoint`` (``posenc extend``): also ``none`` and the types whose keys a config gives."""
    listed = [name for name in ROPE_SCALINGS if name != "default" and (checkpoint or not missing_keys(name))]
    out = [PLAIN] if checkpoint else []
    for name in listed:
        out.append(name)
        if ROPE_SCALINGS[name].dynamic_form and not missing_keys(name):
            out.append(name + DYNAMIC)
    return out


def _takes_factor(rope_type: str) -> bool:
    return (
        rope_type != "default" and "factor" in ROPE_SCALINGS[rope_type].takes and not missing_keys(rope_type)
    )


def forms(*, checkpoint: bool = False) -> str:
    """The forms a grid's scaling is written in, for help text and errors: compare's
    ``TYPE:FACTOR (TYPE: ...) or yarn-dynamic``; ``checkpoint``: extend's names and which take a factor."""
    dynamic = [name for name in names() if _form(name)[1]]
    if not checkpoint:
        return f"TYPE:FACTOR (TYPE: {', '.join(types())})" + (f" or {', '.join(dynamic)}" if dynamic else "")
    factored = [
        name for name in names(checkpoint=True) if not _form(name)[1] and _takes_factor(_form(name)[0])
    ]
    return (
        f"{', '.join(names(checkpoint=True))}; NAME:FACTOR for {', '.join(factored)} (without a factor: one "
        "entry per factor of factors)"
    )


def _canonical(name: str) -> str:
    """A grid name as the vocabulary spells it: case and ``_`` as written elsewhere
    (``YaRN``, ``dynamic_yarn``) and ``dynamic-TYPE`` for ``TYPE-dynamic``."""
    if name == PLAIN or _known(name):
        return name
    name = name.lower().replace("_", "-")
    if name == PLAIN or _known(name):
        return name
    if name.startswith("dynamic-") and _known(name.removeprefix("dynamic-")):
        return name.removeprefix("dynamic-") + DYNAMIC  # dynamic-yarn: posenc extend's first spelling
    return name


def parse_grid(
    text: str, *, factors: tuple[float, ...] = (), checkpoint: bool = False, option: str = ""
) -> list[BenchmarkScaling]:
    """A grid's scaling as written -> its entries (one per factor of ``factors`` for a bare ``TYPE``
    that takes one). ``checkpoint``: ``posenc extend``'s grid (``none``, the scalings whose keys a
    checkpoint's config gives, factors in [1, 1024]); else ``posenc compare``'s (factors > 1, every
    scaling built by the benchmark). ``option`` names the option or key in errors."""
    head = f"{option}: {text!r}" if option else f"scaling {text!r}"
    raw, sep, value = str(text).strip().partition(":")
    name = _canonical(raw.strip())
    valid = names(checkpoint=checkpoint)
    if name not in valid:
        _refuse_name(head, name, valid, checkpoint)
    rope_type, per_length = _form(name)
    takes = not per_length and _takes_factor(rope_type)
    if sep and not takes:
        raise PosencError(f"{head}: {name} takes no factor{_declared(rope_type, per_length)}")
    if not takes:
        return [BenchmarkScaling(name, None, text)]
    if not sep and not factors:
        raise PosencError(
            f"{head}: {name} takes a factor, e.g. {name}:4; the forms: {forms(checkpoint=checkpoint)}"
        )
    try:
        chosen = (float(value),) if sep else tuple(float(factor) for factor in factors)
    except ValueError:
        chosen = (math.nan,)
    rule = f"in [1, {MAX_FACTOR:g}]" if checkpoint else "> 1 and finite"
    for factor in chosen:
        fits = 1.0 <= factor <= MAX_FACTOR if checkpoint else factor > 1 and math.isfinite(factor)
        if not fits:
            given = value.strip() if sep else repr(factor)
            raise PosencError(f"{head}: the factor must be a number {rule}, got {given}")
    return [BenchmarkScaling(name, factor, text) for factor in chosen]


def _declared(rope_type: str, per_length: bool) -> str:
    """Why a scaling written ``NAME:FACTOR`` takes no factor: the keys it declares."""
    if per_length:
        return " (its factor is chosen per length)"
    if rope_type == "default":
        return ""
    keys = ROPE_SCALINGS[rope_type].takes
    if "factor" in keys:  # its keys are not the benchmark's to choose (missing_keys)
        return " (its keys, the factor among them, come from a checkpoint's config that carries the scaling)"
    return f" (its RopeScaling declares {'the keys ' + ', '.join(keys) if keys else 'no keys'}, not 'factor')"


def _refuse_name(head: str, name: str, valid: list[str], checkpoint: bool) -> NoReturn:
    """A name the grid does not take, said with why (an entry point that cannot be loaded, a scaling
    no benchmark can build, plain RoPE in ``posenc compare``) or the closest valid one."""
    broken = broken_scalings().get(name)
    if broken is not None:
        raise PosencError(f"{head}: {broken}")
    if not checkpoint and name in ROPE_SCALINGS and name != "default" and missing_keys(name):
        why = ROPE_SCALINGS[name].cannot_build or "values a benchmark cannot choose for the models it trains"
        raise PosencError(
            f"{head}: {name} needs {', '.join(missing_keys(name))}: {why}; the benchmark's scalings: {forms()}"
        )
    if not checkpoint and name == PLAIN:
        raise PosencError(
            f"{head}: plain RoPE is always evaluated (the 'default' row); the scalings: {forms()}"
        )
    raise PosencError(
        f"{head}: not a scaling (valid: {forms(checkpoint=checkpoint)}){did_you_mean(name, valid)}"
    )


def parse(text: str) -> BenchmarkScaling:
    """A profile's scaling (``posenc compare``): ``"yarn:4"`` -> YaRN x4; ``"yarn-dynamic"`` -> YaRN
    with s = max(1, L / L0)."""
    (scaling,) = parse_grid(text)
    return scaling


def for_task(scalings: tuple[str, ...], task: str) -> tuple[str, ...]:
    """The scalings a run of ``task`` evaluates: fine-tuned ones on the LM only."""
    if task == "lm":
        return scalings
    return tuple(s for s in scalings if not parse(s).needs_finetune)


def yarn_betas(*, dim: int, base: float, original: int) -> tuple[float, float]:
    """``(beta_fast, beta_slow)`` putting the same fraction of rotation pairs in each YaRN band
    as the paper's 32 / 1 do for Llama 2 (:data:`YARN_REFERENCE`).

    Pair i turns r_i = L0 / (2 pi b^(2i/d)) times over the original context, so the pair
    at fraction x = 2i/d of the dimensions has r = L0 / (2 pi) * b^(-x); the reference
    puts its bands at x = ln(L0_ref / (2 pi beta)) / ln(b_ref), and the same x here gives
    beta = L0 / (2 pi) * b^(-x). (For the same base this is beta_ref * L0 / L0_ref.)
    """
    _, ref_base, ref_len, ref_fast, ref_slow = YARN_REFERENCE

    def fraction(beta: float) -> float:
        return math.log(ref_len / (2 * math.pi * beta)) / math.log(ref_base)

    def beta(x: float) -> float:
        return original / (2 * math.pi) * base ** (-x)

    return beta(fraction(ref_fast)), beta(fraction(ref_slow))


def yarn_regime(*, dim: int, base: float, original: int) -> str | None:
    """Why the paper's default bands do not fit this model (None when they do): with
    beta_fast = 32, some pair must turn more than 32 times over the original context."""
    fastest = original / (2 * math.pi)  # pair 0: theta_0 = 1 rad per token
    if fastest <= YARN_REFERENCE[3]:
        return (
            f"with head_dim {dim} and L0 {original}, the fastest pair turns {fastest:.1f} times over the "
            f"context, below YaRN's default beta_fast 32: no pair would be left unchanged; the bands are "
            "expressed for this model instead"
        )
    return None


def scaling_dict(
    scaling: BenchmarkScaling, *, dim: int, base: float, original: int, seq_len: int | None = None
) -> dict:
    """The Hugging Face style dict ``posenc compare`` gives
    :func:`posenc.encoding.rotary.scaling.apply_to_model` (a length-dependent scaling stays one: the
    model computes it at each length). ``seq_len``: the current length, for a per-length form
    (factor max(1, seq_len / L0)). YaRN's bands are expressed for the model (:func:`yarn_betas`)."""
    factor = scaling.factor
    if scaling.per_length:
        factor = max(1.0, (seq_len or original) / original)
    out: dict[str, Any] = {"rope_type": scaling.rope_type, **scaling.keys(original, factor)}
    if scaling.rope_type == "yarn":
        out["beta_fast"], out["beta_slow"] = yarn_betas(dim=dim, base=base, original=original)
    return out


def probe(
    scaling: BenchmarkScaling, *, dim: int, base: float, original: int, lengths: tuple[int, ...]
) -> None:
    """Run ``scaling`` as ``posenc compare`` builds it (:func:`scaling_dict`) for a model of rotated
    dimension ``dim``, RoPE base ``base`` and trained length ``original``, at each of ``lengths``
    (the sequence lengths its evaluation reads), so that a scaling from outside posenc that raises or
    returns NaN or a wrong shape is refused when a profile names it, before any run
    (:meth:`posenc.encoding.rotary.scaling.Scaling.probe`; posenc's own are not run here)."""
    if scaling.per_length:  # its factor, hence its keys, change with the length
        for length in lengths:
            at = scaling_dict(scaling, dim=dim, base=base, original=original, seq_len=length)
            Scaling.parse(at, dim=dim).probe(base=base)
        return
    typed = Scaling.parse(scaling_dict(scaling, dim=dim, base=base, original=original), dim=dim)
    typed.probe(base=base, lengths=(None, *lengths) if typed.length_dependent else (None,))


def finetune_length(scaling: BenchmarkScaling, train_len: int) -> int:
    """The target length a scaling is fine-tuned at: factor x L_train."""
    if scaling.factor is None:
        raise PosencError(f"{scaling.text} is not fine-tuned")
    return int(round(scaling.factor * train_len))


#: The key of a ``posenc compare`` result that holds the scalings whose evaluation failed, each with
#: why (``{"halfscale:2": "PosencError: ..."}``): such a scaling has no entry in the result's ``eval``,
#: and the run keeps every other evaluation.
FAILED_KEY = "failed_scalings"
MAX_REASON = 500  # characters of a failed evaluation's reason


def failure_reason(exc: BaseException) -> str:
    """Why one scaled evaluation failed, in one line: ``Type: message``."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


#: YaRN's per-length form, as profiles and records spell it (``yarn-dynamic``).
DYNAMIC_YARN = "yarn" + DYNAMIC


def __getattr__(name: str) -> Any:
    """The side tables earlier releases kept, as live views of what each scaling declares on its
    spec (:class:`posenc.encoding.rotary.scaling.RopeScaling`): ``NEEDS_FINETUNE`` (the names whose
    paper fine-tunes), ``PUBLISHED_KEYS`` (name -> the keys its paper's models publish) and
    ``CANNOT_BUILD`` (name -> why no benchmark can choose its keys)."""
    if name == "NEEDS_FINETUNE":
        return frozenset(key for key, spec in ROPE_SCALINGS.items() if spec.finetuned)
    if name == "PUBLISHED_KEYS":
        return {key: dict(spec.published) for key, spec in ROPE_SCALINGS.items() if spec.published}
    if name == "CANNOT_BUILD":
        return {key: spec.cannot_build for key, spec in ROPE_SCALINGS.items() if spec.cannot_build}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BenchmarkScaling",
    "DYNAMIC_YARN",
    "FAILED_KEY",
    "MAX_FACTOR",
    "YARN_REFERENCE",
    "failure_reason",
    "finetune_length",
    "for_task",
    "forms",
    "missing_keys",
    "names",
    "parse",
    "parse_grid",
    "probe",
    "scaling_dict",
    "types",
    "yarn_betas",
    "yarn_regime",
]
