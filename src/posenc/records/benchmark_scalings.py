"""RoPE context-extension scalings as their papers use them, for the benchmark.

A profile names scalings as ``"type:factor"`` (``"dynamic:4"``, ``"yarn:4"``,
``"linear:4"``) or ``"yarn-dynamic"``. How each is evaluated on a model trained with
plain RoPE follows its paper:

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
fine-tuning (``finetune=0``) it is marked as outside its regime.

YaRN's band limits ``beta_fast`` / ``beta_slow`` count rotations of a pair over the
original context. The paper's 32 / 1 were set for Llama 2 (head_dim 128, base 10000,
L0 4096), where about a third of the pairs turn more than 32 times; a head_dim-16
model trained on 64 tokens has no pair that turns more than ~10 times, so the
defaults leave no pair unchanged. :func:`yarn_betas` expresses the limits for the
model instead: the same fraction of pairs in each band as in the paper's setting.

Llama 3's bands take the values of Llama 3.1's released configs (``low_freq_factor`` 1,
``high_freq_factor`` 4: pairs that turn fewer than once over the original context are
interpolated, those that turn more than 4 times are left alone), which count turns over the
original context and so carry over to any model (:data:`PUBLISHED_KEYS`). A scaling that needs
keys no benchmark can choose (LongRoPE's per-frequency factors, searched for one model; a
registered scaling's keys of its own) is refused when the profile is read (:func:`parse`), not
when a run evaluates it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from posenc.core.checks import did_you_mean
from posenc.core.errors import PosencError
from posenc.encoding.rotary.scaling import ORIGINAL, ROPE_SCALINGS

#: Scalings whose papers fine-tune at the target length before evaluating.
NEEDS_FINETUNE = frozenset({"linear", "yarn", "llama3"})
#: Keys a scaling requires beyond its factor and the original context, with the values its
#: paper's released models use (see the module's doc).
PUBLISHED_KEYS: dict[str, dict[str, float]] = {
    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},  # Llama 3.1's configs
}
#: Why a benchmark cannot build a scaling, where there is more to say than the keys it lacks.
CANNOT_BUILD = {
    "longrope": "LongRoPE's per-frequency factors come from a search made for one model (Ding et al. "
    "2024); posenc extend --scalings longrope measures a checkpoint whose config carries them",
}
#: YaRN's own setting (Peng et al. 2023, Llama 2): head_dim, base, L0, beta_fast, beta_slow.
YARN_REFERENCE = (128, 10000.0, 4096, 32.0, 1.0)
DYNAMIC_YARN = "yarn-dynamic"


@dataclass(frozen=True)
class BenchmarkScaling:
    """One parsed scaling name of a profile."""

    text: str  # as written in the profile, e.g. "yarn:4"
    rope_type: str  # a key of posenc.encoding.rotary.scaling.ROPE_SCALINGS
    factor: float | None  # None: chosen per evaluation length (yarn-dynamic)

    @property
    def needs_finetune(self) -> bool:
        return self.rope_type in NEEDS_FINETUNE and self.factor is not None

    @property
    def per_length(self) -> bool:
        return self.factor is None


def missing_keys(rope_type: str) -> list[str]:
    """The keys scaling ``rope_type`` requires that the benchmark cannot fill (it gives the
    factor, the original context and :data:`PUBLISHED_KEYS`)."""
    built = {"factor", ORIGINAL, *PUBLISHED_KEYS.get(rope_type, {})}
    return [key for key in ROPE_SCALINGS[rope_type].required if key not in built]


def types() -> list[str]:
    """The ``TYPE`` a profile's ``"TYPE:FACTOR"`` may name: every registered RoPE scaling
    (:data:`posenc.encoding.rotary.scaling.ROPE_SCALINGS`, entry points included) but plain RoPE
    and those the benchmark cannot build (:func:`missing_keys`)."""
    return [name for name in ROPE_SCALINGS if name != "default" and not missing_keys(name)]


def forms() -> str:
    """The forms a profile's scaling is written in, for help text: ``TYPE:FACTOR (TYPE: ...) or yarn-dynamic``."""
    return f"TYPE:FACTOR (TYPE: {', '.join(types())}) or {DYNAMIC_YARN}"


def parse(text: str) -> BenchmarkScaling:
    """``"yarn:4"`` -> BenchmarkScaling; ``"yarn-dynamic"`` -> YaRN with s = max(1, L / L0)."""
    if text == DYNAMIC_YARN:
        return BenchmarkScaling(text, "yarn", None)
    rope_type, sep, factor = text.partition(":")
    if rope_type in ROPE_SCALINGS and rope_type != "default" and missing_keys(rope_type):
        why = CANNOT_BUILD.get(rope_type, "values a benchmark cannot choose for the models it trains")
        raise PosencError(
            f"scaling {text!r}: {rope_type} needs {', '.join(missing_keys(rope_type))}: {why}; "
            f"the benchmark's scalings: {forms()}"
        )
    if rope_type not in ROPE_SCALINGS or rope_type == "default" or not sep:
        valid = types()
        raise PosencError(
            f"scaling {text!r}: expected TYPE:FACTOR with TYPE one of {', '.join(valid)}, or "
            f"{DYNAMIC_YARN!r}{did_you_mean(rope_type if sep else text, [*valid, DYNAMIC_YARN])}"
        )
    try:
        value = float(factor)
    except ValueError:
        value = 0.0
    if not (value > 1 and math.isfinite(value)):
        raise PosencError(f"scaling {text!r}: the factor must be a number > 1 and finite")
    return BenchmarkScaling(text, rope_type, value)


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
    """The Hugging Face style dict for :func:`posenc.encoding.rotary.scaling.apply_to_model`.

    ``seq_len``: the current length, for ``yarn-dynamic`` (factor max(1, seq_len / L0)).
    """
    factor = scaling.factor
    if factor is None:
        factor = max(1.0, (seq_len or original) / original)
    out: dict[str, Any] = {"rope_type": scaling.rope_type, "factor": float(factor)}
    out.update(PUBLISHED_KEYS.get(scaling.rope_type, {}))
    if ORIGINAL in ROPE_SCALINGS[scaling.rope_type].required:
        out[ORIGINAL] = original
    if scaling.rope_type == "yarn":
        out["beta_fast"], out["beta_slow"] = yarn_betas(dim=dim, base=base, original=original)
    return out


def finetune_length(scaling: BenchmarkScaling, train_len: int) -> int:
    """The target length a scaling is fine-tuned at: factor x L_train."""
    if scaling.factor is None:
        raise PosencError(f"{scaling.text} is not fine-tuned")
    return int(round(scaling.factor * train_len))
