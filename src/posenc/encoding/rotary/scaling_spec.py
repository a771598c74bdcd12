"""What posenc knows about each RoPE scaling: :class:`RopeScaling`, one spec per ``rope_type``,
and the built-ins' specs (:data:`BUILTIN_SCALINGS`).

A spec carries the formula (a pure function of :mod:`posenc.encoding.rotary.formulas`), its paper,
the keys it takes and their range checks, whether it depends on the current length, its frequency
bands, how Hugging Face fills its original context, its NumPy reference, and what the benchmarks
need to build it for a model (``posenc compare``, which trains one, and ``posenc extend``, which
reads a checkpoint): the keys its paper's released models use, whether its paper fine-tunes, why no
benchmark can choose its keys, how a length-dependent one reads at one length, and whether the
grids also take it with its factor chosen per length. :mod:`posenc.encoding.rotary.scaling` makes
the registry of them (built-ins, ``register_scaling``, entry points) and parses scalings once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from posenc.core.errors import PosencError
from posenc.encoding.rotary.formulas import (
    ORIGINAL,
    Params,
    default_freqs,
    dynamic_at,
    dynamic_freqs,
    linear_freqs,
    llama3_bands,
    llama3_freqs,
    longrope_at,
    longrope_freqs,
    ntk_freqs,
    validate_llama3,
    validate_longrope,
    validate_nothing,
    validate_ntk,
    validate_yarn,
    yarn_bands,
    yarn_freqs,
)
from posenc.reference import rotary as ref

ScalingFn = Callable[..., tuple[torch.Tensor, float]]


@dataclass(frozen=True)
class RopeScaling:
    """Everything posenc knows about one RoPE scaling, in one place (built-in or registered).

    The last five fields are what a benchmark needs to build the scaling for a model; both grids
    (``posenc compare --scalings``, ``posenc extend --scalings``) read them here and nowhere else:

    - ``published``: keys beyond the factor and the original context, with the values its paper's
      released models use (Llama 3.1's frequency bands), which a benchmark builds it with;
    - ``finetuned``: its paper fine-tunes the model at the target length with it in place before
      evaluating (``posenc compare`` does the same on the language model);
    - ``cannot_build``: why no benchmark can choose its keys (LongRoPE's factors come from a search
      made for one model); ``posenc extend`` takes them from a checkpoint's config that carries it;
    - ``at_length``: for a ``length_dependent`` scaling, ``fn(params, seq_len)`` -> the
      length-independent scaling dict (``{"rope_type": ..., **keys}``, None for plain RoPE) with its
      frequencies at a sequence of ``seq_len`` tokens (``posenc extend`` measures each length with
      the tables one pass over it uses); ``params`` has the original context filled;
    - ``dynamic_form``: the grids also take ``NAME-dynamic``, the scaling with its factor chosen
      per length, ``max(1, L / L0)`` (Dynamic-YaRN, Peng et al. 2023, sec. 3.3).
    """

    compute: ScalingFn  # fn(*, dim, base, seq_len, params) -> (inv_freq (d/2,) float64, attention_scaling)
    paper: str  # where the formula comes from
    required: tuple[str, ...] = ()  # keys of the scaling dict (Hugging Face's names) that must be given
    optional: tuple[str, ...] = ()  # keys it may have
    validate: Callable[..., None] = (
        validate_nothing  # fn(params, *, dim): range checks beyond the common ones
    )
    length_dependent: bool = (
        False  # inv_freq changes with the current length: attention caches keys unrotated
    )
    bands: Callable[..., list[str]] | None = None  # fn(*, dim, base, params) -> a band name per pair
    # Where Hugging Face reads the original context L0: "rope" (the rope dict, a top-level
    # original_max_position_embeddings winning, else max_position_embeddings) or
    # "max_position_embeddings" (that key only); None when the scaling has no L0.
    hf_original: str | None = None
    factor_from_context: bool = False  # a missing factor is max_position_embeddings / L0 (as HF)
    # The NumPy float64 reference (a rope_scaling_* of posenc.reference.rotary), fn(dim, base, **params[, seq_len]).
    reference: Callable[..., tuple[np.ndarray, float]] | None = None
    # A representative setting for rotated dim d with original context 2048 (conformance vectors).
    example: Callable[[int], Params] | None = None
    # What a benchmark builds it with (see the class docstring).
    published: Mapping[str, Any] = field(default_factory=dict)
    finetuned: bool = False
    cannot_build: str = ""
    at_length: Callable[[Params, int], Params | None] | None = None
    dynamic_form: bool = False

    def __post_init__(self) -> None:
        if self.dynamic_form and "factor" not in self.required + self.optional:
            raise PosencError(
                "a RopeScaling with dynamic_form=True takes a 'factor' key: the one chosen per length"
            )
        if self.at_length is not None and not self.length_dependent:
            raise PosencError("a RopeScaling's at_length is for a length_dependent scaling")

    def __call__(
        self, *, dim: int, base: float, seq_len: int | None, params: Params
    ) -> tuple[torch.Tensor, float]:
        return self.compute(dim=dim, base=base, seq_len=seq_len, params=params)

    @property
    def takes(self) -> tuple[str, ...]:
        """Every key it takes, required first."""
        return self.required + self.optional


BUILTIN_SCALINGS: dict[str, RopeScaling] = {
    "default": RopeScaling(
        default_freqs,
        "Su et al. 2021, RoFormer, https://arxiv.org/abs/2104.09864",
        reference=ref.rope_scaling_default,
        example=lambda dim: {},
    ),
    "linear": RopeScaling(
        linear_freqs,
        "Chen et al. 2023, Position Interpolation, https://arxiv.org/abs/2306.15595",
        ("factor",),
        reference=ref.rope_scaling_linear,
        example=lambda dim: {"factor": 4.0},
        finetuned=True,  # ~1000 steps at the target length
    ),
    "ntk": RopeScaling(
        ntk_freqs,
        "bloc97 2023, NTK-aware scaled RoPE, https://www.reddit.com/r/LocalLLaMA/comments/14lz7j5/",
        ("factor",),
        validate=validate_ntk,
        reference=ref.rope_scaling_ntk,
        example=lambda dim: {"factor": 4.0},
    ),
    "dynamic": RopeScaling(
        dynamic_freqs,
        "emozilla 2023, Dynamically scaled RoPE, https://www.reddit.com/r/LocalLLaMA/comments/14mrgpr/",
        ("factor", ORIGINAL),
        validate=validate_ntk,
        length_dependent=True,
        hf_original="max_position_embeddings",
        reference=ref.rope_scaling_dynamic,
        example=lambda dim: {"factor": 4.0, ORIGINAL: 2048},
        at_length=dynamic_at,
    ),
    "yarn": RopeScaling(
        yarn_freqs,
        "Peng et al. 2023, YaRN, https://arxiv.org/abs/2309.00071",
        ("factor", ORIGINAL),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
        validate=validate_yarn,
        bands=yarn_bands,
        hf_original="rope",
        reference=ref.rope_scaling_yarn,
        example=lambda dim: {"factor": 4.0, ORIGINAL: 2048},
        finetuned=True,  # ~400 steps at the target length
        dynamic_form=True,  # Dynamic-YaRN (sec. 3.3): no fine-tuning, s = max(1, L / L0)
    ),
    "llama3": RopeScaling(
        llama3_freqs,
        "Meta 2024, The Llama 3 Herd of Models, https://arxiv.org/abs/2407.21783",
        ("factor", ORIGINAL, "low_freq_factor", "high_freq_factor"),
        validate=validate_llama3,
        bands=llama3_bands,
        hf_original="rope",
        reference=ref.rope_scaling_llama3,
        example=lambda dim: {"factor": 8.0, ORIGINAL: 2048, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        published={"low_freq_factor": 1.0, "high_freq_factor": 4.0},  # Llama 3.1's released configs
        finetuned=True,  # long-context continued pre-training with the scaling in place
    ),
    "longrope": RopeScaling(
        longrope_freqs,
        "Ding et al. 2024, LongRoPE, https://arxiv.org/abs/2402.13753",
        ("short_factor", "long_factor", ORIGINAL),
        ("factor", "attention_factor"),
        validate=validate_longrope,
        length_dependent=True,
        hf_original="rope",
        factor_from_context=True,
        reference=ref.rope_scaling_longrope,
        example=lambda dim: {
            "short_factor": [1.0 + 0.05 * i for i in range(dim // 2)],
            "long_factor": [1.0 + 0.5 * i for i in range(dim // 2)],
            ORIGINAL: 2048,
        },
        cannot_build="LongRoPE's per-frequency factors come from a search made for one model (Ding et al. "
        "2024); posenc extend --scalings longrope measures a checkpoint whose config carries them",
        at_length=longrope_at,
    ),
}

# Views of the built-ins, by field.
PAPERS: dict[str, str] = {name: spec.paper for name, spec in BUILTIN_SCALINGS.items()}
ROPE_SCALING_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (spec.required, spec.optional) for name, spec in BUILTIN_SCALINGS.items()
}
ROPE_SCALING_VALIDATORS: dict[str, Callable[..., None]] = {
    name: spec.validate for name, spec in BUILTIN_SCALINGS.items()
}

__all__ = [
    "BUILTIN_SCALINGS",
    "PAPERS",
    "ROPE_SCALING_KEYS",
    "ROPE_SCALING_VALIDATORS",
    "RopeScaling",
    "ScalingFn",
]
