"""RoPE context-extension scalings: an open registry of pure functions.

Axis legend: ``d`` the rotated dimension (``rotary_dim``), ``p = d/2`` rotation
pairs, ``L`` the current sequence length, ``L0`` the original (pre-training)
context length, ``s`` the scaling factor, ``b`` the RoPE base (``rope_theta``).

Every variant is one pure function with one signature, returning the inverse
frequencies and the attention scaling, so the rotary encoding (and attention)
never branches on the variant::

    fn(*, dim: int, base: float, seq_len: int | None, params: dict)
        -> (inv_freq: float64 tensor (dim/2,), attention_scaling: float)

``params`` is the scaling dict without its ``"rope_type"`` key; the keys are the
Hugging Face ``rope_scaling`` / ``rope_parameters`` keys (``factor``,
``original_max_position_embeddings``, ``beta_fast``, ...), so a Hugging Face
config maps onto posenc one to one (see :mod:`posenc.hf`). Each variant is one
:class:`RopeScaling` entry of the registry ``ROPE_SCALINGS`` (its fields and the built-ins,
``BUILTIN_SCALINGS``, are in :mod:`posenc.encoding.rotary.scaling_spec`): its function,
paper, required and optional keys, range checks, whether it depends on the current
length, its frequency bands, how Hugging Face fills its original context, and what the
benchmarks build it with (published keys, fine-tuning, how it reads at one length).
``PAPERS``, ``ROPE_SCALING_KEYS`` and ``ROPE_SCALING_VALIDATORS`` are views of the built-ins;
:func:`compute` validates, then dispatches.

The registry is open as the encodings' is (:mod:`posenc.core.plugins`): the built-ins
(:data:`BUILTIN_SCALINGS`), ``register_scaling("mine", RopeScaling(...))`` at run time (its value
may also be an import spec ``"package.module:NAME"``), and the entry points of the group
``posenc.rope_scalings`` that an installed package declares
(``[project.entry-points."posenc.rope_scalings"] mine = "mypkg.rope:MINE"``, a :class:`RopeScaling`).
:data:`ROPE_SCALINGS` is the live read-only view of all of them: a ``rope_type`` names one
wherever a scaling is taken (``RoPE.set_scaling``, ``posenc.hf.apply(...).set_scaling``,
``posenc compare --scalings`` and ``posenc extend --scalings``, whose names and help come from
:mod:`posenc.records.benchmark_scalings`). A ``rope_type`` read from a file is a name, never an
import spec: data does not choose code.

``attention_scaling`` multiplies both cos and sin (as in Hugging Face), so it
multiplies the rotated q and k and hence the attention logits by its square.

KV caches and length-dependent scalings
---------------------------------------
``depends_on_seq_len(scaling)`` is true for ``dynamic`` and ``longrope`` (their
``length_dependent`` entry): their
inv_freq is a function of the *current* length ``L = max(position) + 1``. A key
rotated at step ``t`` with ``inv_freq(L_t)`` would be wrong at step ``t + 1`` once
``inv_freq(L_{t+1})`` differs. posenc's rule: when ``depends_on_seq_len(scaling)``
is true, attention caches keys BEFORE rotation and, at every step, rotates the
whole cached key set (and the queries) with the inv_freq for the current length,
so incremental decoding equals a full recompute of the same prefix. (Hugging Face
instead keeps already-rotated keys, so its cached decode differs from a full
recompute once ``L`` crosses ``L0``.) For every other variant, keys may be
cached after rotation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from posenc.core.checks import check_float, check_int, did_you_mean
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.plugins import PluginGroup, check_name, is_spec
from posenc.core.sincos import inverse_frequencies
from posenc.encoding.base import RotaryEncoding
from posenc.encoding.rotary import scaling_checks as checks
from posenc.encoding.rotary.formulas import (
    ORIGINAL,
    Params,
    check_common,
    llama3_smooth,
    longrope_attention_factor,
    yarn_correction_range,
    yarn_mscale,
    yarn_ramp,
)
from posenc.encoding.rotary.scaling_spec import (
    BUILTIN_SCALINGS,
    PAPERS,
    ROPE_SCALING_KEYS,
    ROPE_SCALING_VALIDATORS,
    RopeScaling,
)

__all__ = [  # the formulas' public helpers are part of this module's face
    "BUILTIN_SCALINGS",
    "ENTRY_POINT_GROUP",
    "ORIGINAL",
    "SCALINGS_GROUP",
    "PAPERS",
    "ROPE_SCALINGS",
    "ROPE_SCALING_KEYS",
    "ROPE_SCALING_VALIDATORS",
    "RopeScaling",
    "Scaling",
    "apply_to_model",
    "broken_scalings",
    "compute",
    "depends_on_seq_len",
    "describe",
    "frequency_bands",
    "llama3_smooth",
    "longrope_attention_factor",
    "reference",
    "register_scaling",
    "resolve",
    "set_on",
    "split",
    "unregister_scaling",
    "validate",
    "yarn_correction_range",
    "yarn_mscale",
    "yarn_ramp",
]


def _check_keys(name: str, params: Params) -> None:
    required, optional = ROPE_SCALINGS[name].required, ROPE_SCALINGS[name].optional
    valid = list(required) + list(optional)
    for key in params:
        if key not in valid:
            extra = did_you_mean(key, valid)
            raise PosencError(
                f"unknown key {key!r} in rope scaling {name!r}; valid keys: {valid or 'none'}{extra}"
            )
    for key in required:
        if params.get(key) is None:
            hint = " (or pass max_position_embeddings)" if key == ORIGINAL else ""
            raise PosencError(
                f"rope scaling {name!r} requires key {key!r}{hint}; required keys: {list(required)}"
            )


# ---------------------------------------------------------------------------
# The registry: one spec per scaling (posenc.encoding.rotary.scaling_spec: a built-in = one entry there,
# plus its tests); yours: register_scaling.
# ---------------------------------------------------------------------------

#: The entry-point group an installed package declares its RoPE scalings in.
ENTRY_POINT_GROUP = "posenc.rope_scalings"


def check_scaling_spec(obj: Any, source: str) -> RopeScaling:
    """``obj`` if it is a :class:`RopeScaling` whose function posenc can call
    (:func:`~posenc.encoding.rotary.scaling_checks.check_signature`), else a PosencTypeError naming ``source``."""
    if not isinstance(obj, RopeScaling):
        raise PosencTypeError(
            f"{source} is {obj!r}, not a RoPE scaling: make it a posenc.encoding.rotary.scaling.RopeScaling "
            "(its function, paper and keys)"
        )
    checks.check_signature(obj.compute, source)
    return obj


#: The three ways in, one lookup (posenc.core.plugins): built-ins, registered, entry points.
SCALINGS_GROUP: PluginGroup[RopeScaling] = PluginGroup(
    ENTRY_POINT_GROUP, "rope scaling", BUILTIN_SCALINGS, check_scaling_spec
)


class _ScalingsView(Mapping[str, RopeScaling]):
    """Every RoPE scaling by ``rope_type``, live: built-ins, registered, entry points (an entry
    point is imported when its name is looked up or the view is listed). Read-only: add yours with
    :func:`register_scaling`.

    An entry point that cannot be loaded (its module does not import, it is no :class:`RopeScaling`,
    its function cannot be called as posenc calls it) is left out of the listing, alone
    (:func:`broken_scalings` says why), so that it blocks no other scaling, no listing and no help
    text; looking its name up raises the PosencError naming it."""

    def __getitem__(self, name: str) -> RopeScaling:
        if not isinstance(name, str) or is_spec(name):
            raise KeyError(name)
        found = SCALINGS_GROUP.lookup(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(SCALINGS_GROUP.all(on_error=_left_out))

    def __len__(self) -> int:
        return len(SCALINGS_GROUP.all(on_error=_left_out))

    def __repr__(self) -> str:
        return f"ROPE_SCALINGS({list(self)})"


def _left_out(message: str) -> None:
    """A broken entry point, left out of a listing (:func:`broken_scalings` says why)."""


ROPE_SCALINGS: Mapping[str, RopeScaling] = _ScalingsView()


def broken_scalings() -> dict[str, str]:
    """The entry points of ``posenc.rope_scalings`` that cannot be loaded, by name: why, in one line
    naming the entry point and its distribution (one under a built-in's name included)."""
    return SCALINGS_GROUP.broken()


def register_scaling(name: str, scaling: RopeScaling | str, *, replace: bool = False) -> RopeScaling:
    """Register a RoPE context-extension scaling under ``name`` (its ``rope_type``); returns it.

    ``scaling`` is a :class:`RopeScaling` (its function ``fn(*, dim, base, seq_len, params) ->
    (inv_freq float64 (dim/2,), attention_scaling)``, paper, required and optional keys, range
    checks) or an import spec ``"package.module:NAME"`` of one. A built-in name is refused; so is a
    name registered for another scaling unless ``replace=True``. From then on ``name`` is a
    ``rope_type`` everywhere: ``RoPE.set_scaling``, ``posenc.hf.apply(...).set_scaling``,
    ``posenc compare --scalings NAME:FACTOR`` and ``posenc extend --scalings NAME[:FACTOR]``. A
    spawned process (a benchmark worker when there are several) does not see this registration:
    declare the scaling as an entry point of the group ``posenc.rope_scalings`` for those.
    Also ``posenc.register_scaling``.
    """
    name = check_name(name, "rope scaling")
    if isinstance(scaling, str):
        scaling = SCALINGS_GROUP.resolve_spec(scaling)
    return SCALINGS_GROUP.register(name, scaling, replace=replace)


def unregister_scaling(name: str) -> None:
    """Forget a name given to :func:`register_scaling` (built-ins and entry points stay)."""
    SCALINGS_GROUP.unregister(name)


# ---------------------------------------------------------------------------
# Public entry points.
# ---------------------------------------------------------------------------


def split(scaling: Params | Scaling | None) -> tuple[str, Params]:
    """``{"rope_type": name, **params}`` (or None, or a Scaling) -> ``(name, params)``; checks the name."""
    if scaling is None:
        return "default", {}
    if isinstance(scaling, Scaling):
        return scaling.rope_type, scaling.params
    if not isinstance(scaling, dict):
        raise PosencTypeError(
            f"scaling must be a dict with key 'rope_type' or None, got {type(scaling).__name__}"
        )
    params = dict(scaling)
    name = params.pop("rope_type", "default")
    if name not in ROPE_SCALINGS:
        raise PosencError(
            f"rope_type must be one of {list(ROPE_SCALINGS)}, got {name!r}{did_you_mean(name, ROPE_SCALINGS)}"
        )
    return name, params


def resolve(scaling: Params | Scaling | None, *, max_position_embeddings: int | None = None) -> Params | None:
    """Fill what Hugging Face infers from ``max_position_embeddings`` (the model's context).

    As HF: a variant that takes ``original_max_position_embeddings`` defaults it to
    ``max_position_embeddings`` (for ``dynamic`` that is HF's only source), and
    ``longrope`` without ``factor`` uses ``max_position_embeddings / L0``.
    Returns a new dict (or None); keys already present win.
    """
    name, params = split(scaling)
    if max_position_embeddings is None or name == "default":
        if isinstance(scaling, Scaling):
            return scaling.to_dict()
        return None if scaling is None else dict(scaling)
    return {"rope_type": name, **_filled(name, params, max_position_embeddings)}


def _filled(name: str, params: Params, max_position_embeddings: int | None) -> Params:
    """``params`` (of the scaling ``name``, already split) with what :func:`resolve` fills, a new dict."""
    params = dict(params)
    if max_position_embeddings is None or name == "default":
        return params
    max_position_embeddings = check_int("max_position_embeddings", max_position_embeddings, minimum=1)
    spec = ROPE_SCALINGS[name]
    if ORIGINAL in spec.takes and params.get(ORIGINAL) is None:
        params[ORIGINAL] = max_position_embeddings
    if spec.factor_from_context and params.get("factor") is None:
        original = check_int(ORIGINAL, params[ORIGINAL], minimum=1)  # a config's value, whatever it says
        params["factor"] = max_position_embeddings / original
    return params


def validate(scaling: Params | None, *, dim: int) -> Params | None:
    """Check a scaling dict for rotated dimension ``dim``; returns it unchanged.

    Raises ValueError/TypeError naming the offending key: unknown rope_type or key,
    missing required key (e.g. the original context length), factor < 1, factor
    lists of the wrong length, beta_fast < beta_slow, high_freq_factor <=
    low_freq_factor, odd dim.
    """
    name, params = split(scaling)
    _checked(name, params, dim)
    return scaling


def _checked(name: str, params: Params, dim: int) -> None:
    """:func:`validate` of a scaling already split into ``(name, params)``."""
    check_int("dim (rotary_dim)", dim, minimum=2, even=True)
    _check_keys(name, params)
    check_common(name, params, dim)
    ROPE_SCALINGS[name].validate(params, dim=dim)


@dataclass(frozen=True)
class Scaling:
    """A RoPE scaling parsed once, where it enters, and passed on typed.

    :meth:`parse` fills what Hugging Face infers from the model's context (:func:`resolve`) and
    checks every key for the rotated dimension ``dim`` (:func:`validate`); nothing that holds a
    ``Scaling`` checks it again. :meth:`frequencies` runs the variant's formula (a dynamic
    scaling at every new length) and only checks its result for float overflow.
    """

    rope_type: str  # a key of ROPE_SCALINGS
    items: tuple[tuple[str, Any], ...]  # its keys (Hugging Face's names), resolved and checked
    dim: int  # the rotated dimension (rotary_dim) it was checked for

    @classmethod
    def parse(
        cls, scaling: Params | Scaling | None, *, dim: int, max_position_embeddings: int | None = None
    ) -> Scaling:
        """A dict (``{"rope_type": ..., **keys}``), None (plain RoPE) or a Scaling, checked for ``dim``.

        The dict is split (its name looked up) once, filled (:func:`resolve`) and checked
        (:func:`validate`); a Scaling already checked for ``dim`` is returned as it is."""
        if isinstance(scaling, Scaling):
            if scaling.dim == dim:
                return scaling
            name, params = scaling.rope_type, scaling.params  # typed: no dict round trip
        else:
            name, params = split(scaling)
        params = _filled(name, params, max_position_embeddings)
        _checked(name, params, dim)
        return cls(name, tuple(params.items()), dim)

    def __eq__(self, other: object) -> bool:
        """Equal to a Scaling of the same type, keys and rotated dimension, and to the Hugging Face
        style dict it stands for (:meth:`to_dict`): a config's ``scaling`` compares with the dict
        it was given as, whichever form it holds."""
        if isinstance(other, Scaling):
            return (self.rope_type, self.items, self.dim) == (other.rope_type, other.items, other.dim)
        if isinstance(other, dict):
            return self.to_dict() == other
        return NotImplemented

    @property
    def params(self) -> Params:
        """The keys as a new dict (without ``rope_type``)."""
        return dict(self.items)

    @property
    def spec(self) -> RopeScaling:
        return ROPE_SCALINGS[self.rope_type]

    @property
    def length_dependent(self) -> bool:
        """inv_freq follows the current length (dynamic NTK, LongRoPE): attention caches raw keys."""
        return self.spec.length_dependent

    def to_dict(self) -> Params | None:
        """The Hugging Face style dict (None for plain RoPE without keys)."""
        if self.rope_type == "default" and not self.items:
            return None
        return {"rope_type": self.rope_type, **self.params}

    def frequencies(self, *, base: float, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        """``(inv_freq float64 (dim/2,), attention_scaling)`` for RoPE base ``base`` (checked by
        the caller) at length ``seq_len`` (read by length-dependent scalings; None = within the
        original context). The inputs are not checked again; the result is
        (:func:`~posenc.encoding.rotary.scaling_checks.checked_output`): an overflowing one of
        posenc's own formulas is refused as such, and a scaling from outside posenc that raises or
        returns NaN, a wrong shape or a wrong type is refused in one line naming it."""
        builtin = self.rope_type in BUILTIN_SCALINGS
        params = self.params
        try:
            result = self.spec(dim=self.dim, base=base, seq_len=seq_len, params=params)
        except OverflowError:
            result = torch.full((self.dim // 2,), math.nan, dtype=torch.float64), math.nan
        except Exception as exc:
            if builtin:  # posenc's own formulas: a bug of posenc's, with its traceback
                raise
            where = checks.setting(dim=self.dim, base=base, seq_len=seq_len, params=params)
            raise checks.raised(self.rope_type, exc, self.spec.takes, where) from exc
        if (
            torch.compiler.is_compiling()
        ):  # a length-dependent scaling traced in a graph: checked on the device
            inv = torch.as_tensor(result[0], dtype=torch.float64)
            torch._assert_async(
                torch.isfinite(inv).all() & (inv > 0).all(),
                f"rope scaling {self.rope_type!r} overflows float64 at this length (frequencies out of range)",
            )
            return inv, result[1]
        # A factor/base so large that float64 overflows would give zero/inf frequencies or an
        # inf attention scaling (silently inf or unrotated outputs): refused, naming the keys.
        return checks.checked_output(
            result,
            name=self.rope_type,
            dim=self.dim,
            base=base,
            seq_len=seq_len,
            params=params,
            builtin=builtin,
        )

    def probe(self, *, base: float, lengths: Iterable[int | None] = (None,)) -> None:
        """Run a scaling from outside posenc at each of ``lengths`` (``seq_len``; None = within the
        original context) for RoPE base ``base``, so that one that raises or returns NaN or a wrong
        shape is refused where it is named, before any run (:meth:`frequencies` says how). posenc's
        own scalings are tested formula by formula and are not run here."""
        if self.rope_type in BUILTIN_SCALINGS:
            return
        for seq_len in dict.fromkeys(lengths):
            self.frequencies(base=base, seq_len=seq_len)

    def reference(self, *, base: float, seq_len: int | None = None) -> tuple[np.ndarray, float]:
        """:meth:`frequencies` by the variant's NumPy float64 reference."""
        fn = self.spec.reference
        if fn is None:
            raise PosencError(f"rope scaling {self.rope_type!r} has no NumPy reference")
        params = self.params
        if "seq_len" in inspect.signature(fn).parameters:
            params["seq_len"] = None if seq_len is None else int(seq_len)
        inv_freq, attention_scaling = fn(self.dim, float(base), **params)
        return np.asarray(inv_freq, dtype=np.float64), float(attention_scaling)

    def bands(self, *, base: float) -> list[str] | None:
        """The band of each pair for the variants that have bands (see :func:`frequency_bands`), else None."""
        bands = self.spec.bands
        return None if bands is None else bands(dim=self.dim, base=base, params=self.params)


def compute(
    scaling: Params | Scaling | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
):
    """Parse ``scaling`` (:meth:`Scaling.parse`) and return ``(inv_freq float64 (dim/2,), attention_scaling float)``.

    Args:
        scaling: HF-style dict with key ``"rope_type"`` (None -> plain RoPE), or a :class:`Scaling`.
        dim: rotated dimension (``rotary_dim``), even.
        base: RoPE base (``rope_theta``) > 1.
        seq_len: current length ``max(position) + 1``; read by ``dynamic`` and
            ``longrope`` only (None = within the original context).
        max_position_embeddings: the model's context; fills missing keys as HF
            does (see :func:`resolve`).
    """
    parsed = Scaling.parse(scaling, dim=dim, max_position_embeddings=max_position_embeddings)
    base = check_float("base (rope_theta)", base, minimum=1.0, exclusive_minimum=True)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len, minimum=1)
    return parsed.frequencies(base=base, seq_len=seq_len)


def reference(
    scaling: Params | Scaling | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
) -> tuple[np.ndarray, float]:
    """:func:`compute` by the NumPy float64 reference of the variant (``ROPE_SCALINGS[name].reference``):
    ``(inv_freq (dim/2,) float64 ndarray, attention_scaling)``."""
    parsed = Scaling.parse(scaling, dim=dim, max_position_embeddings=max_position_embeddings)
    return parsed.reference(base=base, seq_len=seq_len)


def depends_on_seq_len(scaling: Params | Scaling | None) -> bool:
    """True when inv_freq changes with the current sequence length (dynamic NTK, LongRoPE).

    Then attention must cache keys before rotation (see the module docstring).
    """
    if isinstance(scaling, Scaling):
        return scaling.length_dependent
    name = (scaling or {}).get("rope_type", "default")
    return name in ROPE_SCALINGS and ROPE_SCALINGS[name].length_dependent


def frequency_bands(
    scaling: Params | Scaling | None, *, dim: int, base: float, max_position_embeddings: int | None = None
) -> list[str] | None:
    """Which band each pair falls in, for the variants that have bands, else None.

    YaRN: ``extrapolate`` (ramp 0, unchanged) / ``ramp`` / ``interpolate`` (ramp 1,
    divided by s). Llama 3: ``high`` (wavelength < L0/high_freq_factor, unchanged) /
    ``mid`` / ``low`` (wavelength > L0/low_freq_factor, divided by s).
    """
    return Scaling.parse(scaling, dim=dim, max_position_embeddings=max_position_embeddings).bands(base=base)


def apply_to_model(model: nn.Module, scaling: Params | Scaling | None) -> int:
    """Set ``scaling`` on every rotary encoding in ``model``; returns how many were changed.

    Lets a model trained with plain RoPE be evaluated with any context-extension
    scaling without retraining: ``apply_to_model(model, {"rope_type": "yarn", ...})``.
    An encoding shared by several layers counts once. ``None`` restores plain RoPE.
    """
    if not isinstance(model, nn.Module):
        raise PosencTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    targets = [m for m in model.modules() if isinstance(m, RotaryEncoding) and m.supports_scaling]
    return set_on(targets, scaling)


def set_on(encodings: list[RotaryEncoding], scaling: Params | Scaling | None) -> int:
    """Set ``scaling`` on each of ``encodings`` (each instance once); returns how many.

    Everything is checked before any encoding changes. The scaling is parsed once, for the first
    encoding (its rotated dimension and context), and that typed :class:`Scaling` travels to the
    others (one of another rotated dimension checks it again for its own); a bad ``rope_type``
    fails even when there is no encoding to set.
    """
    targets = list(dict.fromkeys(encodings))
    if not targets and not isinstance(scaling, Scaling):
        split(scaling)
    checked: list[Any] = []
    typed: Scaling | None = None
    for enc in targets:
        checked.append(enc.check_scaling(scaling if typed is None else typed))
        if typed is None and isinstance(checked[-1], Scaling):
            typed = checked[-1]
    for enc, value in zip(targets, checked):
        enc.set_scaling(value)
    return len(targets)


def describe(
    scaling: Params | None,
    *,
    dim: int,
    base: float,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
) -> dict[str, Any]:
    """Per-pair summary of a scaling (what ``posenc rope inspect`` prints).

    Returns ``{"rope_type", "dim", "base", "seq_len", "attention_scaling", "pairs"}``;
    each pair: ``inv_freq`` theta_i', ``wavelength`` 2 pi / theta_i' in tokens,
    ``default_wavelength`` 2 pi / theta_i, ``scale`` theta_i / theta_i' (1 = unchanged,
    s = fully interpolated) and ``band`` (see :func:`frequency_bands`, else None).
    """
    scaling = resolve(scaling, max_position_embeddings=max_position_embeddings)
    parsed = Scaling.parse(scaling, dim=dim)  # checked once; the rest reads it
    inv_freq, attention = compute(parsed, dim=dim, base=base, seq_len=seq_len)
    plain = inverse_frequencies(dim, float(base))
    bands: list[str | None] = [None] * (dim // 2)
    bands = list(parsed.bands(base=base) or bands)
    pairs = [
        {
            "pair": i,
            "inv_freq": f,
            "wavelength": 2 * math.pi / f,
            "default_wavelength": 2 * math.pi / p,
            "scale": p / f,
            "band": band,
        }
        for i, (f, p, band) in enumerate(zip(inv_freq.tolist(), plain.tolist(), bands))
    ]
    return {
        "rope_type": parsed.rope_type,
        "scaling": scaling,
        "dim": dim,
        "base": float(base),
        "seq_len": seq_len,
        "attention_scaling": attention,
        "pairs": pairs,
    }
