"""Numeric demonstrations of what the notes posenc was built from claim, right or wrong.

Each function computes one demonstration from the library (float64) and returns a
:class:`Demonstration`: rows to show (``(quantity, value)``), named ``facts`` (booleans
the claims table of :mod:`posenc.analysis.notes` cites) and the raw ``numbers``.
:data:`DEMONSTRATIONS` maps a key to its function; :func:`run` computes them.

The notes: lecture notes (Lecture 13, part 4), a video script, a notebook summary, an
interview answer and a widely shared tutorial ("Positional Encoding: Teaching the Model
Word Order"). The five errors the guided tour shows are :data:`TOUR_ERRATA`.
"""

from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

import posenc
from posenc import presets
from posenc.analysis import probes, properties
from posenc.analysis.signals import additive_vectors, make
from posenc.analysis.worked import TUTORIAL_TOKENS
from posenc.attention import MultiHeadAttention
from posenc.base import AdditiveEncoding, BiasEncoding, RelativeEncoding, RotaryEncoding
from posenc.errors import PosencError
from posenc.reference import bias as reference_bias
from posenc.reference import tutorial
from posenc.reference.rotary import rope_inv_freq


@dataclass(frozen=True)
class Demonstration:
    key: str
    title: str  # what is computed, one line
    rows: tuple[tuple[str, str], ...]  # (quantity, value) as a terminal or the report shows them
    facts: Mapping[str, bool]  # named findings; each claim of the notes rests on one
    numbers: Mapping[str, float] = field(default_factory=dict)  # raw numbers (tests, JSON, claim text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "rows": [list(r) for r in self.rows],
            "facts": dict(self.facts),
            "numbers": dict(self.numbers),
        }


def _g(value: float) -> str:
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e5 else f"{value:.2e}"


def _vec(values: Iterable[float], digits: int = 3) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


# ---------------------------------------------------------------------------
# Order: equivariant, not invariant.
# ---------------------------------------------------------------------------


def equivariance() -> Demonstration:
    """One bidirectional attention layer, no positions: "dog bites man" -> "man bites dog"."""
    d, heads = 16, 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, d, generator=g, dtype=torch.float64)  # "dog", "bites", "man"
    perm = torch.tensor([2, 1, 0])  # "man bites dog"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(d, heads, encoding=None, causal=False, path="plain").double().eval()
    with torch.no_grad():
        out, weights = cast(tuple[torch.Tensor, torch.Tensor], layer(x, return_weights=True))
        pout, pweights = cast(tuple[torch.Tensor, torch.Tensor], layer(x[:, perm], return_weights=True))
    equivariance_gap = float((pout - out[:, perm]).abs().max())  # |f(Px) - P f(x)|
    invariance_gap = float((pout - out).abs().max())  # |f(Px) - f(x)|
    weights_change = float((pweights - weights).abs().max())  # |A(Px) - A(x)|
    weights_permuted = float((pweights - weights[..., perm, :][..., perm]).abs().max())  # |A(Px) - P A Pᵀ|
    with_pe = probes.permutation_equivariance_gap("sinusoidal", inputs=x, permutation=perm.tolist())
    causal = probes.position_sensitivity("nope", causal=True).token_change
    bidirectional = probes.position_sensitivity("nope", causal=False).token_change
    numbers = {
        "equivariance_gap": equivariance_gap,
        "invariance_gap": invariance_gap,
        "weights_change": weights_change,
        "weights_permuted_gap": weights_permuted,
        "sinusoidal_gap": with_pe,
        "causal_change": causal,
        "bidirectional_change": bidirectional,
    }
    rows = (
        ("max |f(Px) - P f(x)|: outputs permute with the words (equivariant)", _g(equivariance_gap)),
        ("max |f(Px) - f(x)|: outputs are not unchanged (not invariant)", _g(invariance_gap)),
        ("max |A(Px) - P A(x) P^T|: attention weights permute too", _g(weights_permuted)),
        ("max |A(Px) - A(x)|: so they are not identical", _g(weights_change)),
        ("max |f(Px) - P f(x)| with sinusoidal positions added", _g(with_pe)),
        ("word-aligned output change, untrained model, no positions, bidirectional", _g(bidirectional)),
        ("the same, causal mask (the mask alone breaks the symmetry)", _g(causal)),
    )
    facts = {
        "equivariant": equivariance_gap < 1e-12,
        "invariant": invariance_gap < 1e-12,
        "words_same_vectors": equivariance_gap < 1e-12,
        "weights_identical": weights_change < 1e-12,
        "weights_permuted": weights_permuted < 1e-12,
        "pe_breaks_symmetry": with_pe > 1e-3,
        "causal_sees_order": causal > 1e-3 and bidirectional < 1e-12,
    }
    title = "Attention without positions, dog bites man -> man bites dog (one bidirectional layer, float64)"
    return Demonstration("equivariance", title, rows, facts, numbers)


# ---------------------------------------------------------------------------
# Sinusoidal: frequencies, wavelengths, the worked example, the drawings.
# ---------------------------------------------------------------------------


def _wavelength(i: int, d: int, base: float = 10000.0) -> float:
    """Wavelength of pair ``i`` (dims 2i, 2i+1): ``2 pi base^(2i/d)`` positions."""
    return 2 * math.pi * base ** (2 * i / d)


def _sign_changes(values: np.ndarray) -> int:
    return int((np.diff(np.sign(np.where(np.abs(values) < 1e-12, 1.0, values))) != 0).sum())


def frequency_order() -> Demonstration:
    """Which dimensions of the sinusoidal encoding vary fast: dimension 0, not the last."""
    d = 64
    pe = additive_vectors(posenc.build("sinusoidal", dim=d), np.arange(100))  # (100, d)
    first, last = _wavelength(0, d), _wavelength(d // 2 - 1, d)
    numbers = {
        "d": d,
        "wavelength_first": first,
        "wavelength_last": last,
        "crossings_first": _sign_changes(pe[:, 0]),
        "crossings_last": _sign_changes(pe[:, d - 2]),
    }
    rows = (
        ("wavelength of dims 0,1 (positions)", f"{first:.2f}"),
        (f"wavelength of dims {d - 2},{d - 1} (positions)", f"{last:,.0f}"),
        ("sign changes of dim 0 over positions 0..99", str(numbers["crossings_first"])),
        (f"sign changes of dim {d - 2} over positions 0..99", str(numbers["crossings_last"])),
    )
    facts = {"dim0_fastest": first < last, "low_dims_slow": first > last}
    return Demonstration(
        "frequency_order", f"Sinusoidal, d_model = {d}: which dimensions vary fast", rows, facts, numbers
    )


def lecture_visualization() -> Demonstration:
    """Position 1 as the lecture notes write it, ``[sin(1/f), cos(1/f), sin(1/f^2), ...]``, vs the formula."""
    d = 8
    f = 10000.0 ** (2 / d)  # the ratio between consecutive pairs' divisors
    written = np.array([math.sin(1 / f), math.cos(1 / f), math.sin(1 / f**2), math.cos(1 / f**2)])
    true = additive_vectors(posenc.build("sinusoidal", dim=d), [1])[0]  # (d,)
    numbers = {
        "f": f,
        "written_error": float(np.abs(written - true[:4]).max()),
        "shifted_error": float(np.abs(written - true[2:6]).max()),
    }
    rows = (
        ("as written: [sin(1/f), cos(1/f), sin(1/f^2), cos(1/f^2)], f = 10000^(2/8) = 10", _vec(written)),
        ("PE(1), dims 0..3", _vec(true[:4])),
        ("PE(1), dims 2..5: the written values, one pair later", _vec(true[2:6])),
    )
    facts = {
        "as_written": numbers["written_error"] < 1e-9,
        "off_by_one_pair": numbers["shifted_error"] < 1e-12,
    }
    return Demonstration(
        "lecture_visualization",
        "Position 1 in the lecture notes' picture (d_model = 8)",
        rows,
        facts,
        numbers,
    )


# A widely shared tutorial's printed numbers: the PE matrix (step 3-4, d_model = 8), step 5's
# sums (first four dimensions of each word, as printed), and its "Position 1/2" fingerprints.
TUTORIAL_PE = (
    (0.000, 1.000, 0.000, 1.000, 0.000, 1.000, 0.000, 1.000),
    (0.841, 0.540, 0.100, 0.995, 0.010, 1.000, 0.001, 1.000),
    (0.909, -0.416, 0.199, 0.980, 0.020, 1.000, 0.002, 1.000),
    (0.141, -0.990, 0.296, 0.955, 0.030, 1.000, 0.003, 1.000),
)
TUTORIAL_SUMS = ((0.500, 1.300, 0.800, 1.100), (1.041, 1.240, 0.500, 1.895), (1.809, -0.316, 0.799, 1.280))
TUTORIAL_FINGERPRINTS = ((0.84, 0.54, 0.10, 0.99, 0.01, 1.00), (0.91, -0.42, 0.20, 0.98, 0.02, 1.00))


def worked_example() -> Demonstration:
    """The tutorial's numeric example recomputed: divisors, PE table, step 5's sums, its 2-decimal rows."""
    d = 8
    enc = cast(AdditiveEncoding, posenc.build("sinusoidal", dim=d))
    pe = additive_vectors(enc, np.arange(4))  # (4, 8)
    tokens = torch.tensor(TUTORIAL_TOKENS, dtype=torch.float64)[None]  # (1, 3, 8)
    with torch.no_grad():
        sums = enc.embed(tokens)[0].numpy()  # (3, 8): tokens + PE(0..2)
    divisors = 10000.0 ** (np.arange(0, d, 2) / d)
    angles = np.arange(4)[:, None] / divisors  # (4, d/2)
    fingerprint = np.round(pe[1:3, :6], 2)
    mismatches = [
        (p + 1, k) for p in range(2) for k in range(6) if fingerprint[p, k] != TUTORIAL_FINGERPRINTS[p][k]
    ]
    numbers = {
        "pe_rounding_error": float(np.abs(np.round(pe, 3) - np.array(TUTORIAL_PE)).max()),
        "sum_rounding_error": float(np.abs(np.round(sums[:, :4], 3) - np.array(TUTORIAL_SUMS)).max()),
        "max_i": d // 2 - 1,
        "fingerprint_mismatches": len(mismatches),
        "cos_01": math.cos(0.1),
    }
    rows = (
        ("divisors 10000^(2i/8), i = 0..3", _vec(divisors, 0)),
        ("PE(1)", _vec(pe[1])),
        ("dog + PE(0), first 4 dims", _vec(sums[0, :4])),
        ("bites + PE(1), first 4 dims", _vec(sums[1, :4])),
        ("man + PE(2), first 4 dims", _vec(sums[2, :4])),
        (
            "max |printed - recomputed| (PE table; sums)",
            f"{numbers['pe_rounding_error']:g}; {numbers['sum_rounding_error']:g}",
        ),
        (
            "PE(1), dim 3 = cos(0.1) to 2 decimals (printed 0.99)",
            f"{math.cos(0.1):.6f} -> {round(math.cos(0.1), 2):.2f}",
        ),
    )
    facts = {
        "steps_1_to_4": numbers["pe_rounding_error"] == 0.0,
        "step_5": numbers["sum_rounding_error"] == 0.0,
        "even_sin_odd_cos": bool(
            np.allclose(pe[:, 0::2], np.sin(angles)) and np.allclose(pe[:, 1::2], np.cos(angles))
        ),
        "i_runs_to_half_d": numbers["max_i"] == d // 2,
        "fingerprints_2dp": not mismatches,
    }
    return Demonstration(
        "worked_example", "The tutorial's numeric example (d_model = 8), recomputed", rows, facts, numbers
    )


def wavelengths() -> Demonstration:
    """The longest wavelength is ``2 pi 10000^((d-2)/d)``: below ``10000 * 2 pi`` for every d."""
    limit = 10000 * 2 * math.pi
    dims = (8, 128, 512)
    longest = {d: _wavelength(d // 2 - 1, d) for d in dims}
    divisor_510 = 10000.0 ** (510 / 512)
    numbers = {
        "limit": limit,
        **{f"longest_{d}": w for d, w in longest.items()},
        "divisor_510": divisor_510,
        "angle_510": 1 / divisor_510,
        "cycle_510": 2 * math.pi * divisor_510,
        "cycle_0": 2 * math.pi,
    }
    rows = (
        ("shortest wavelength (dims 0,1), any d", f"{2 * math.pi:.3f}"),
        *((f"longest wavelength at d_model = {d}", f"{w:,.0f}") for d, w in longest.items()),
        ("10000 * 2 pi", f"{limit:,.0f}"),
        (
            "d_model 512, dim 510: divisor, radians per position, positions per cycle",
            f"{divisor_510:,.1f}, {1 / divisor_510:.3g}, {2 * math.pi * divisor_510:,.0f}",
        ),
    )
    facts = {
        "max_is_10000_2pi": any(abs(w - limit) < 1e-6 * limit for w in longest.values()),
        "dim510_about_60000": abs(numbers["cycle_510"] - 60000) < 2000,
        "dim0_cycle_about_6": abs(numbers["cycle_0"] - 6) < 0.5,
    }
    return Demonstration("wavelengths", "Sinusoidal wavelengths 2 pi 10000^(2i/d)", rows, facts, numbers)


def dimension_126() -> Demonstration:
    """The tutorial draws dimension 126 (d_model 128) as a flat line at +1 over positions 0..400."""
    d = 128
    positions = np.arange(0, 401, 100)
    pe = additive_vectors(posenc.build("sinusoidal", dim=d), positions)  # (5, 128)
    numbers = {
        "max_abs_126": float(np.abs(pe[:, 126]).max()),
        "min_127": float(pe[:, 127].min()),
        "period_126": _wavelength(63, d),
        "limit": 10000 * 2 * math.pi,
    }
    rows = (
        ("positions", ", ".join(str(p) for p in positions)),
        ("dim 126 = sin(pos / 10000^(126/128))", _vec(pe[:, 126])),
        ("dim 127 = cos(pos / 10000^(126/128))", _vec(pe[:, 127])),
        (
            "period of dims 126,127 (positions)",
            f"{numbers['period_126']:,.0f} (10000 * 2 pi = {numbers['limit']:,.0f})",
        ),
    )
    facts = {"drawn_at_plus_one": numbers["max_abs_126"] > 0.9, "dim127_near_one": numbers["min_127"] > 0.99}
    return Demonstration(
        "dimension_126", "Dimension 126 of sinusoidal PE at d_model = 128", rows, facts, numbers
    )


def linear_map() -> Demonstration:
    """``PE(p + k) = M_k PE(p)``: fitted by least squares and in closed form (2x2 rotations)."""
    d, k = 64, 5
    fit = properties.linear_relative_map(posenc.build("sinusoidal", dim=d), k)
    closed = properties.sinusoidal_shift_matrix(d, k)
    numbers = {"residual": fit.residual, "closed_form_error": float(np.abs(fit.matrix - closed).max())}
    rows = (
        (f"least-squares residual of PE(p+{k}) = M PE(p), d_model {d}", _g(fit.residual)),
        ("max |M_fit - M_closed form|", _g(numbers["closed_form_error"])),
    )
    facts = {"sinusoid_linear": fit.residual < 1e-9 and numbers["closed_form_error"] < 1e-6}
    return Demonstration("linear_map", "The sinusoids' shift is a fixed linear map", rows, facts, numbers)


def bilinear() -> Demonstration:
    """``PE(p + k)`` from the entries of ``PE(p)`` and ``PE(k)``: ``sin(a+b) = sin a cos b + cos a sin b``."""
    d = 64
    table = additive_vectors(posenc.build("sinusoidal", dim=d), np.arange(128))  # (128, d)
    p, k = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    sp, cp, sk, ck = table[p, 0::2], table[p, 1::2], table[k, 0::2], table[k, 1::2]  # (64, 64, d/2)
    err = max(
        float(np.abs(sp * ck + cp * sk - table[p + k, 0::2]).max()),
        float(np.abs(cp * ck - sp * sk - table[p + k, 1::2]).max()),
    )
    rows = (("max error of PE(p+k) built from PE(p) and PE(k), p, k < 64, d_model 64", _g(err)),)
    return Demonstration(
        "bilinear",
        "PE(p + k) is bilinear in PE(p) and PE(k)",
        rows,
        {"bilinear": err < 1e-12},
        {"error": err},
    )


def shift_matrix() -> Demonstration:
    """The video script's 2x2 matrix ``[[cos k, sin k], [-sin k, cos k]]`` maps ``(sin p, cos p)`` to ``p + k``."""
    p = np.arange(50, dtype=np.float64)
    errors = []
    for k in (1.0, 0.3, 7.0):
        m = np.array([[math.cos(k), math.sin(k)], [-math.sin(k), math.cos(k)]])
        moved = m @ np.stack([np.sin(p), np.cos(p)])  # (2, 50)
        errors.append(float(np.abs(moved - np.stack([np.sin(p + k), np.cos(p + k)])).max()))
    block = properties.sinusoidal_shift_matrix(8, 1)[:2, :2]  # posenc's closed form, pair 0, k = 1
    video = np.array([[math.cos(1), math.sin(1)], [-math.sin(1), math.cos(1)]])
    numbers = {"error": max(errors), "posenc_block_error": float(np.abs(block - video).max())}
    rows = (
        (
            "max error of [[cos k, sin k], [-sin k, cos k]] (sin p, cos p) vs (sin(p+k), cos(p+k))",
            _g(max(errors)),
        ),
        ("max |posenc's closed-form M_1 block - the script's matrix|", _g(numbers["posenc_block_error"])),
    )
    facts = {"video_matrix": numbers["error"] < 1e-12 and numbers["posenc_block_error"] < 1e-15}
    return Demonstration("shift_matrix", "The video script's rotation matrix", rows, facts, numbers)


def bounded_unique() -> Demonstration:
    """Bounded in [-1, 1] and unique; nearest pair among 128 and 4,096 positions (no saturation)."""
    enc = make("sinusoidal", d_model=64, num_heads=4)
    table = additive_vectors(enc, np.arange(4096))
    near_128 = properties.uniqueness(enc, 128)
    near_4096 = properties.uniqueness(enc, 4096)
    numbers = {
        "min": float(table.min()),
        "max": float(table.max()),
        "nearest_128": near_128.min_distance,
        "nearest_4096": near_4096.min_distance,
    }
    rows = (
        ("value range over positions 0..4095, d_model 64", f"[{numbers['min']:.3f}, {numbers['max']:.3f}]"),
        ("nearest pair among 128 positions", f"{near_128.min_distance:.3f} at {near_128.closest_pair}"),
        ("nearest pair among 4,096 positions", f"{near_4096.min_distance:.3f} at {near_4096.closest_pair}"),
    )
    facts = {
        "sinusoid_bounded": -1.0 <= numbers["min"] and numbers["max"] <= 1.0,
        "sinusoid_unique": near_4096.unique,
        "sinusoid_saturates": near_4096.min_distance < 0.9 * near_128.min_distance,
    }
    return Demonstration(
        "bounded_unique", "Sinusoidal, d_model 64: bounded, unique, no saturation", rows, facts, numbers
    )


def integer_index() -> Demonstration:
    """Raw integer positions: unbounded, and relative through an affine (not linear) map."""
    growth = properties.integer_index_growth(512, positions=(1000,))
    enc = make("integer_index", d_model=64)
    linear = properties.linear_relative_map(enc, 1, positions=properties.FIT_POSITIONS).residual
    affine = properties.affine_relative_map(enc, 1)
    numbers = {
        "norm_1000": float(growth.index_norm[0]),
        "token_norm": growth.token_norm,
        "linear_residual": linear,
        "affine_residual": affine,
    }
    rows = (
        (
            "||PE(1000)|| at d_model 512 vs a token embedding (N(0, 0.02^2) entries)",
            f"{numbers['norm_1000']:,.0f} vs {growth.token_norm:.2f}",
        ),
        ("least-squares PE(p+1) = M PE(p) over positions 0..255, d_model 64", _g(linear)),
        ("least-squares PE(p+1) = M PE(p) + b over the same positions", _g(affine)),
    )
    facts = {
        "unbounded": bool(numbers["norm_1000"] > 1000 * numbers["token_norm"]),
        "no_relative_map": affine > 1e-9,
        "no_linear_map": linear > 1e-6,
    }
    return Demonstration("integer_index", "Integer indices PE(p) = p: size and shift", rows, facts, numbers)


def _notes_formula(num_positions: int, d: int) -> torch.Tensor:
    """The sinusoid as the notes' PyTorch code computes it: ``div_term = exp(2i * -ln(10000) / d)``."""
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (n, 1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))  # (d/2,)
    pe = torch.zeros(num_positions, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def notes_code() -> Demonstration:
    """The PyTorch code of the lecture notes, video script and interview answer vs ``posenc.build("sinusoidal")``."""
    n, d = 512, 64
    ours = torch.from_numpy(additive_vectors(posenc.build("sinusoidal", dim=d), np.arange(n)))
    err = float((_notes_formula(n, d) - ours).abs().max())
    rows = (("max |notes' code - posenc| over 512 positions, d_model 64, float64", _g(err)),)
    return Demonstration(
        "notes_code", "The notes' sinusoid code", rows, {"matches": err < 1e-9}, {"error": err}
    )


def tutorial_code() -> Demonstration:
    """The tutorial's NumPy class: its table is right; two of its comments name the wrong arrays."""
    d = 8
    table = tutorial.PositionalEncoding(512, d).encoding_table
    ours = additive_vectors(posenc.build("sinusoidal", dim=d), np.arange(512))
    err = float(np.abs(table - ours).max())
    dim_indices = np.arange(0, d, 2)  # the class's dim_indices ("[0, 1, 2, ..., embed_dim/2 - 1]")
    named_divisors = np.exp(dim_indices * (-np.log(10000.0) / d))  # its "divisors" ("10000^(2i/d_model)")
    rows = (
        ("max |tutorial table - posenc|, 512 positions, d_model 8", _g(err)),
        ("dim_indices = np.arange(0, d, 2) (comment: [0, 1, ..., d/2 - 1])", str(dim_indices.tolist())),
        ("'divisors' as computed (comment: 10000^(2i/d) = 1, 10, 100, 1000)", _vec(named_divisors)),
    )
    facts = {
        "table": err < 1e-12,
        "comments": bool(
            np.array_equal(dim_indices, np.arange(d // 2))
            and np.allclose(named_divisors, 10.0 ** np.arange(4))
        ),
    }
    return Demonstration(
        "tutorial_code", "The tutorial's PositionalEncoding class", rows, facts, {"error": err}
    )


def tutorial_usage() -> Demonstration:
    """The tutorial's usage example and "try it yourself" block (``python -m posenc.reference.tutorial``)."""
    usage = tutorial.usage_example()
    tried = tutorial.try_it_yourself()
    sims = tried["similarities"]
    numbers = {
        "pe_min": usage["pos_range"][0],
        "pe_max": usage["pos_range"][1],
        "sim_1": sims[1],
        "sim_5": sims[5],
        "sim_9": sims[9],
    }
    rows = (
        ("shapes: token_embeds, pos_encodes, final_embeds", ", ".join(str(s) for s in usage["shapes"])),
        ("position encoding range, positions 0..2", f"[{numbers['pe_min']:.3f}, {numbers['pe_max']:.3f}]"),
        (
            "cosine similarity of position 0 with 1, 5, 9 (d_model 128)",
            f"{sims[1]:.3f}, {sims[5]:.3f}, {sims[9]:.3f}",
        ),
    )
    facts = {
        "shapes": usage["shapes"] == [(1, 3, 128), (3, 128), (1, 3, 128)],
        "closer_more_similar": sims[1] > sims[5] > sims[9],
    }
    return Demonstration(
        "tutorial_usage", "The tutorial's usage example and try-it-yourself block", rows, facts, numbers
    )


def similarity_table() -> Demonstration:
    """The tutorial's printed similarity matrix vs the true cosine similarity (d_model 128)."""
    check = properties.tutorial_similarity_check()
    true = check.computed[properties.TUTORIAL_DIM][0]
    numbers = {
        "max_difference": check.max_abs_difference[properties.TUTORIAL_DIM],
        "sign_mismatches": check.sign_mismatches[properties.TUTORIAL_DIM],
        "true_7": float(true[7]),
        "closest_dim": check.closest_dim,
        "closest_difference": check.closest_difference,
    }
    rows = (
        ("printed row 0, positions 0..7", " ".join(f"{v:.2f}" for v in properties.TUTORIAL_SIMILARITY_ROW)),
        ("true row 0 at d_model 128", " ".join(f"{v:.2f}" for v in true)),
        (
            "max |printed - true|; entries of the other sign",
            f"{numbers['max_difference']:.2f}; {numbers['sign_mismatches']}",
        ),
        (
            "closest even d_model in [2, 1024]",
            f"{check.closest_dim} (still off by {check.closest_difference:.3f})",
        ),
    )
    facts = {
        "printed_table": numbers["max_difference"] < 0.01,
        "nearby_similar": bool(np.all(np.diff(true) < 0)),
    }
    return Demonstration(
        "similarity_table", "The tutorial's position similarity matrix", rows, facts, numbers
    )


def learned_table() -> Demonstration:
    """A learned table: ``max_len x d`` parameters, N(0, 0.02^2) rows, no row past ``max_len``."""
    enc = make("learned", d_model=64, num_heads=4)
    max_len, d = enc.config.max_len, enc.config.dim
    params = sum(p.numel() for p in enc.parameters())
    try:
        cast(AdditiveEncoding, enc).embed(torch.zeros(1, 1, d), positions=torch.tensor([[max_len]]))
        refused = ""
    except PosencError as exc:
        refused = str(exc)
    std = float(torch.cat([p.detach().flatten() for p in enc.parameters()]).std())
    sinusoid_params = sum(p.numel() for p in posenc.build("sinusoidal", dim=d).parameters())
    numbers = {
        "max_len": max_len,
        "dim": d,
        "parameters": params,
        "std": std,
        "sinusoid_parameters": sinusoid_params,
    }
    rows = (
        (f"parameters of a learned table, max_len {max_len}, d_model {d}", f"{params:,} (= {max_len} x {d})"),
        ("parameters of the sinusoidal encoding", str(sinusoid_params)),
        ("std of the initial table", f"{std:.4f}"),
        (f"position {max_len}", refused.split(". ")[0] or "accepted"),
    )
    facts = {
        "params": params == max_len * d,
        "sinusoid_no_params": sinusoid_params == 0,
        "init_std_002": abs(std - 0.02) < 0.002,
        "no_row_past_max": bool(refused),
    }
    return Demonstration("learned_table", "A learned position table", rows, facts, numbers)


def model_presets() -> Demonstration:
    """What well-known models use, from ``posenc.presets`` (numbers from their configs and papers)."""
    enc = {name: presets.build(name) for name in ("bert", "gpt2", "gpt3")}  # learned tables
    table_rows = {name: e.config.max_len for name, e in enc.items()}
    refuse = {}
    for name, e in enc.items():
        n = table_rows[name]
        try:
            cast(AdditiveEncoding, e).embed(torch.zeros(1, 1, e.config.dim), positions=torch.tensor([[n]]))
            refuse[name] = False
        except PosencError:
            refuse[name] = True
    kinds = {name: presets.PRESETS[name].encoding for name in presets.PRESETS}
    contexts = [p.max_positions for p in presets.PRESETS.values() if p.max_positions]
    numbers = {
        **{f"rows_{name}": n for name, n in table_rows.items()},
        "gpt3_parameters": sum(p.numel() for p in enc["gpt3"].parameters()),
        "longest_context": max(contexts),
    }
    rows = (
        ("learned tables: BERT, GPT-2, GPT-3 rows", ", ".join(f"{n:,}" for n in table_rows.values())),
        (
            "each refuses the position just past its table",
            ", ".join("yes" if v else "no" for v in refuse.values()),
        ),
        ("GPT-3's table: parameters", f"{numbers['gpt3_parameters']:,}"),
        (
            "original Transformer, Transformer-XL, T5",
            f"{kinds['transformer']}, {kinds['transformer-xl']}, {kinds['t5']}",
        ),
        (
            "LLaMA-1, GPT-NeoX, GPT-J, BLOOM",
            f"{kinds['llama-1']}, {kinds['gpt-neox']}, {kinds['gpt-j']}, {kinds['bloom']}",
        ),
        ("context: BERT -> longest preset", f"{table_rows['bert']:,} -> {max(contexts):,}"),
    )
    facts = {
        "learned_bert_gpt": all(kinds[n] == "learned" for n in ("bert", "gpt2", "gpt3")),
        "table_models": kinds["transformer"] == "sinusoidal"
        and kinds["transformer-xl"] == "transformer_xl"
        and kinds["t5"] == "t5"
        and kinds["llama-1"] == kinds["gpt-neox"] == kinds["gpt-j"] == "rope"
        and kinds["bloom"] == "alibi",
        "rows_512_1024_2048": list(table_rows.values()) == [512, 1024, 2048],
        "gpt_extrapolates_past_table": not (refuse["gpt2"] and refuse["gpt3"]),
        "context_growth": table_rows["bert"] == 512 and max(contexts) >= 100_000,
    }
    return Demonstration(
        "model_presets",
        "Position encodings of well-known models (posenc list --presets)",
        rows,
        facts,
        numbers,
    )


# ---------------------------------------------------------------------------
# Rotary, relative, bias.
# ---------------------------------------------------------------------------


def _score(rope: RotaryEncoding, q: torch.Tensor, k: torch.Tensor, qp: int, kp: int) -> float:
    """``(R_qp q)^T (R_kp k)`` through posenc's ``rotate``."""
    qr, kr = rope.rotate(q, k, q_positions=torch.tensor([[qp]]), k_positions=torch.tensor([[kp]]))
    return float((qr * kr).sum())


def rope_sign() -> Demonstration:
    """``(R_m q)^T (R_n k)`` equals ``q^T R_{n-m} k`` (RoFormer eq. 16), not ``q^T R_{m-n} k``."""
    d, m, n = 8, 2, 7
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    found: dict[str, tuple[float, float, float, float]] = {}
    for layout in ("half", "interleaved"):
        rope = cast(RotaryEncoding, posenc.build("rope", head_dim=d, layout=layout))
        found[layout] = (
            _score(rope, q, k, m, n),  # (R_m q)^T (R_n k)
            _score(rope, q, k, 0, n - m),  # q^T R_{n-m} k
            _score(rope, q, k, n - m, 0),  # q^T R_{m-n} k = (R_{n-m} q)^T k
            _score(rope, q, k, m + 100, n + 100),  # both positions shifted
        )
    score, correct, claimed, _ = found["half"]
    rope = cast(RotaryEncoding, posenc.build("rope", head_dim=d))
    qr, _ = rope.rotate(q, k, q_positions=torch.tensor([[m]]), k_positions=torch.tensor([[n]]))
    norm_change = abs(float(qr.norm() - q.norm()))
    numbers = {
        "score": score,
        "correct": correct,
        "claimed": claimed,
        "norm_change": norm_change,
        "correct_error": max(max(abs(s - c), abs(s - t)) for s, c, _, t in found.values()),
        "claimed_error": min(abs(s - w) for s, _, w, _ in found.values()),
    }
    rows = (
        (f"(R_m q)^T (R_n k), m = {m}, n = {n}, head_dim {d}", f"{score:.6f}"),
        ("q^T R_{n-m} k", f"{correct:.6f}"),
        ("q^T R_{m-n} k (the video script's form)", f"{claimed:.6f}"),
        ("max error of R_{n-m}, and of shifting m, n by 100 (both layouts)", _g(numbers["correct_error"])),
        ("|R_m q| - |q|: a rotation keeps the length", _g(norm_change)),
    )
    facts = {
        "video_sign": numbers["claimed_error"] < 1e-12,
        "relative_only": numbers["correct_error"] < 1e-12,
        "is_rotation": norm_change < 1e-12,
    }
    return Demonstration("rope_sign", "RoPE: which relative rotation the score sees", rows, facts, numbers)


def rope_formula() -> Demonstration:
    """``x cos(pos theta) + rotate(x) sin(pos theta)`` (rotate_half) is posenc's RoPE; it acts on q and k."""
    d, n = 8, 6
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    theta = torch.from_numpy(rope_inv_freq(d))  # (d/2,)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * torch.cat([theta, theta])  # (n, d), half layout
    rotated_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    formula = x * torch.cos(angle) + rotated_half * torch.sin(angle)
    rope = posenc.build("rope", head_dim=d)
    ours, _ = cast(RotaryEncoding, rope).rotate(x, x)
    err = float((formula - ours).abs().max())
    rows = (
        ("max |x cos + rotate_half(x) sin - posenc rotate(x)|, 6 positions", _g(err)),
        (
            "where RoPE acts (kind)",
            f"{rope.kind}: rotate(q, k) in every attention layer; token embeddings untouched",
        ),
    )
    facts = {"formula": err < 1e-12, "rotates_token_embeddings": rope.kind == "additive"}
    return Demonstration("rope_formula", "The notes' RoPE formula", rows, facts, {"error": err})


def t5_snippet() -> Demonstration:
    """The interview answer's "simplified T5" snippet: names it never defines, and the sign of i - j."""
    tree = ast.parse(INTERVIEW_T5_SNIPPET)
    bound = {"torch", "math"}  # imported by the answer's earlier snippet
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound.update(a.arg for a in node.args.args)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    undefined = sorted(loaded - bound - set(dir(builtins)))
    scope: dict[str, Any] = {"torch": torch, "math": math}
    try:
        exec(compile(INTERVIEW_T5_SNIPPET, "interview-t5", "exec"), scope)  # noqa: S102 - defines a function
        scope["get_relative_position_bias"](6)
        error = "ran"
    except NameError as exc:
        error = f"NameError: {exc}"
    i, keys = 10, np.arange(11)  # one query at position 10, keys 0..10 (causal)
    t5_buckets = reference_bias.t5_relative_position_bucket(keys - i, bidirectional=False)  # j - i, as T5
    snippet_buckets = reference_bias.t5_relative_position_bucket(i - keys, bidirectional=False)  # i - j
    enc = cast(BiasEncoding, make("t5", d_model=64, num_heads=4, bidirectional=True))
    with torch.no_grad():
        b = enc.bias(8, 8)[0, 0].double()  # (i, j), T5's j - i
    table = cast(torch.Tensor, enc.table).detach().double().numpy()  # (buckets, h)
    ij = np.arange(8)[:, None] - np.arange(8)[None, :]  # the snippet's i - j
    snippet_bias = table[reference_bias.t5_relative_position_bucket(ij, True), 0]
    flipped_err = float(np.abs(snippet_bias - b.numpy().T).max())
    numbers = {
        "undefined": len(undefined),
        "t5_distinct": len(set(t5_buckets.tolist())),
        "snippet_distinct": len(set(snippet_buckets.tolist())),
        "transpose_error": flipped_err,
    }
    rows = (
        ("names used but never defined or imported", ", ".join(undefined)),
        ("running it", error),
        ("causal buckets of keys 0..10 for query 10, T5's j - i", " ".join(str(v) for v in t5_buckets)),
        ("the same with the snippet's i - j", " ".join(str(v) for v in snippet_buckets)),
        ("bidirectional: max |bias with i - j - (T5's bias)^T|", _g(flipped_err)),
    )
    facts = {"runs": error == "ran", "sign_matches_t5": numbers["snippet_distinct"] == numbers["t5_distinct"]}
    return Demonstration("t5_snippet", "The interview answer's T5 snippet", rows, facts, numbers)


# The snippet as the interview answer prints it ("Simplified T5 relative position bias").
INTERVIEW_T5_SNIPPET = """
def get_relative_position_bias(seq_len, num_buckets=32):
    relative_positions = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
    relative_buckets = relative_position_to_bucket(relative_positions, num_buckets)
    bias = nn.Embedding(num_buckets, num_heads)
    return bias(relative_buckets)
"""


def shaw_not_bias() -> Demonstration:
    """Shaw et al. add learned relative *vectors* to keys: the score term depends on the query."""
    d, n = 8, 5
    enc = cast(RelativeEncoding, make("shaw", d_model=16, num_heads=2, head_dim=d))
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(0, 1, generator=torch.Generator().manual_seed(3))  # as if trained
    g = torch.Generator().manual_seed(0)
    q1, q2, k = (torch.randn(1, 2, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    enc = enc.double()
    with torch.no_grad():
        change = float((enc.scores(q1, k) - enc.scores(q2, k)).abs().max())
    rows = (
        ("kind", enc.kind),
        ("max |term(q1, k) - term(q2, k)|: the relative term changes with the query", _g(change)),
    )
    return Demonstration(
        "shaw_not_bias",
        "Shaw et al. 2018: relative vectors, not a bias",
        rows,
        {"is_bias": change < 1e-12},
        {"change": change},
    )


def sandwich() -> Demonstration:
    """Sandwich is an attention bias built from sinusoid inner products, not PE added at more layers."""
    heads, n, dp = 4, 12, 128
    enc = cast(BiasEncoding, posenc.build("sandwich", num_heads=heads, embed_dim=dp))
    with torch.no_grad():
        bias = enc.bias(n, n)[0].double().numpy()  # (h, i, j)
    rel = np.arange(n)[:, None] - np.arange(n)[None, :]
    inner = np.cos(rel[..., None] / 10000.0 ** (2 * np.arange(1, dp // 2 + 1) / dp)).sum(-1) - dp / 2
    want = np.stack([inner * heads / (8 * h) for h in range(1, heads + 1)])
    err = float(np.abs(bias - want).max() / np.abs(want).max())  # dense biases are float32
    rows = (
        ("kind", enc.kind),
        ("max |bias - H/(8h) (p_i . p_j - d'/2)| / max |bias|, sinusoids of size 128", _g(err)),
    )
    facts = {"adds_pe_at_layers": enc.kind == "additive", "sinusoid_inner_product": err < 1e-6}
    return Demonstration("sandwich", "Sandwich (Chi et al. 2023)", rows, facts, {"error": err})


def alibi_formula() -> Demonstration:
    """posenc's bidirectional ALiBi bias is ``-m_h |i - j|`` with slopes ``2^(-8h/H)``."""
    heads, n = 8, 10
    enc = cast(BiasEncoding, posenc.build("alibi", num_heads=heads, bidirectional=True))
    with torch.no_grad():
        bias = enc.bias(n, n)[0].double().numpy()
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    want = -slopes[:, None, None] * np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    err = float(np.abs(bias - want).max())
    rows = (("max |bias + m_h |i - j||, 8 heads, slopes 2^(-8h/H)", _g(err)), ("kind", enc.kind))
    return Demonstration("alibi_formula", "ALiBi's bias", rows, {"formula": err < 1e-12}, {"error": err})


def translation() -> Demonstration:
    """Relative encodings score ``(i, j)`` the same after any shift; absolute vectors differ by position."""
    worst = {}
    for name in ("rope", "alibi", "t5"):
        worst[name] = properties.translation_residual(make(name, d_model=64, num_heads=4), 16, (1, 100)).worst
    pe = additive_vectors(posenc.build("sinusoidal", dim=64), [0, 100])
    distance = float(np.linalg.norm(pe[0] - pe[1]))
    rows = (
        *((f"{name}: max |K(m, n) - K(m+t, n+t)| / max |K|, t = 1, 100", _g(v)) for name, v in worst.items()),
        ("sinusoidal: ||PE(0) - PE(100)||", f"{distance:.3f}"),
    )
    facts = {"relative_shift_invariant": max(worst.values()) < 1e-12, "absolute_differs": distance > 0.1}
    numbers = {**{f"{k}_residual": v for k, v in worst.items()}, "distance": distance}
    return Demonstration("translation", "Absolute vs relative: what a shift changes", rows, facts, numbers)


def defined_everywhere() -> Demonstration:
    """The sinusoid is a formula: posenc encodes position 1,000,000; the tutorial's table stops at its size."""
    big = additive_vectors(posenc.build("sinusoidal", dim=128), [1000, 1_000_000])
    try:
        tutorial.PositionalEncoding(512, 128).get_encoding(1001)
        stops = ""
    except PosencError as exc:
        stops = str(exc)
    rows = (
        (
            "||PE(1000)||, ||PE(1,000,000)|| (d_model 128: sqrt(64) = 8)",
            f"{np.linalg.norm(big[0]):.3f}, {np.linalg.norm(big[1]):.3f}",
        ),
        ("the tutorial's class, 512 rows, asked for 1001", stops or "accepted"),
    )
    facts = {"formula_defined": bool(np.isfinite(big).all()), "tutorial_class_stops": bool(stops)}
    return Demonstration("defined_everywhere", "Sinusoids past any training length", rows, facts, {})


def dimension_check() -> Demonstration:
    """The encoding and the embedding must have the same size: posenc says so by name."""
    try:
        cast(AdditiveEncoding, posenc.build("sinusoidal", dim=8)).embed(torch.zeros(1, 3, 6))
        message = ""
    except PosencError as exc:
        message = str(exc)
    rows = (("sinusoidal dim 8 added to 6-dim embeddings", message or "accepted"),)
    return Demonstration(
        "dimension_check", "Dimensions must match", rows, {"mismatch_rejected": bool(message)}, {}
    )


def video_learned_code() -> Demonstration:
    """The video script's learned-embedding forward uses ``arange(len(idx))``: the batch size, not the length."""
    d = 8
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tok_emb, pos_emb = torch.nn.Embedding(16, d).double(), torch.nn.Embedding(32, d).double()
    idx = torch.tensor([[3, 1, 4, 1, 5]])  # (batch 1, seq 5)
    with torch.no_grad():
        as_written = tok_emb(idx) + pos_emb(torch.arange(len(idx)))  # arange(1): row 0 for every token
        intended = tok_emb(idx) + pos_emb(torch.arange(idx.shape[1]))
        same_position = float((as_written[0] - tok_emb(idx)[0] - pos_emb.weight[0]).abs().max())
        wrong = float((as_written - intended).abs().max())
        try:
            two = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
            tok_emb(two) + pos_emb(torch.arange(len(two)))
            batch2 = "ran"
        except RuntimeError as exc:
            batch2 = "RuntimeError: " + str(exc).split("\n")[0]
    rows = (
        ("batch of 1 sentence, 5 tokens: len(idx)", str(len(idx))),
        ("every token gets row 0 of the table: max |added - row 0|", _g(same_position)),
        ("max |as written - arange(idx.shape[1])|", _g(wrong)),
        ("batch of 2", batch2),
    )
    facts = {"as_written_ok": wrong < 1e-12}
    return Demonstration(
        "video_learned_code", "The video script's learned-embedding forward", rows, facts, {"error": wrong}
    )


def probe() -> Demonstration:
    """The interview answer's probing task ("The quick brown fox jumps" vs a permutation), on untrained models."""
    changes = {
        name: probes.position_sensitivity(name).token_change for name in ("nope", "sinusoidal", "rope")
    }
    rows = tuple((f"{name}: word-aligned output change, bidirectional", _g(v)) for name, v in changes.items())
    facts = {
        "probe_separates": changes["nope"] < 1e-12 and min(changes["sinusoidal"], changes["rope"]) > 1e-6
    }
    return Demonstration(
        "probe", "Position-sensitivity probe", rows, facts, {f"{k}_change": v for k, v in changes.items()}
    )


def citations() -> Demonstration:
    """The papers the notes cite are the papers posenc's registry cites."""
    want = {"sinusoidal": "1706.03762", "shaw": "1803.02155", "rope": "2104.09864", "alibi": "2108.12409"}
    found = {name: arxiv in posenc.get_encoding_class(name).paper for name, arxiv in want.items()}
    rows = tuple((name, f"arXiv {want[name]}: {'cited' if ok else 'missing'}") for name, ok in found.items())
    return Demonstration(
        "citations",
        "The notes' references in the registry",
        rows,
        {"registry_cites": all(found.values())},
        {},
    )


DEMONSTRATIONS: dict[str, Callable[[], Demonstration]] = {
    "equivariance": equivariance,
    "frequency_order": frequency_order,
    "lecture_visualization": lecture_visualization,
    "worked_example": worked_example,
    "wavelengths": wavelengths,
    "dimension_126": dimension_126,
    "linear_map": linear_map,
    "bilinear": bilinear,
    "shift_matrix": shift_matrix,
    "bounded_unique": bounded_unique,
    "integer_index": integer_index,
    "notes_code": notes_code,
    "tutorial_code": tutorial_code,
    "tutorial_usage": tutorial_usage,
    "similarity_table": similarity_table,
    "learned_table": learned_table,
    "model_presets": model_presets,
    "rope_sign": rope_sign,
    "rope_formula": rope_formula,
    "t5_snippet": t5_snippet,
    "shaw_not_bias": shaw_not_bias,
    "sandwich": sandwich,
    "alibi_formula": alibi_formula,
    "translation": translation,
    "defined_everywhere": defined_everywhere,
    "dimension_check": dimension_check,
    "video_learned_code": video_learned_code,
    "probe": probe,
    "citations": citations,
}

# The errors the guided tour shows first, in this order.
TOUR_ERRATA = ("frequency_order", "rope_sign", "dimension_126", "t5_snippet", "equivariance")


def demonstration_table(demo: Demonstration) -> tuple[str, list[str], list[list[str]]]:
    """``(title, columns, rows)`` of one demonstration, for a terminal table."""
    return demo.title, ["quantity", "value"], [list(row) for row in demo.rows]


def run(keys: Iterable[str] | None = None) -> dict[str, Demonstration]:
    """Compute the demonstrations ``keys`` (default: all), in :data:`DEMONSTRATIONS` order."""
    wanted = list(DEMONSTRATIONS) if keys is None else list(dict.fromkeys(keys))
    unknown = [k for k in wanted if k not in DEMONSTRATIONS]
    if unknown:
        raise PosencError(f"unknown demonstration {unknown[0]!r} (valid: {', '.join(DEMONSTRATIONS)})")
    return {key: DEMONSTRATIONS[key]() for key in wanted}


__all__ = [
    "DEMONSTRATIONS",
    "Demonstration",
    "INTERVIEW_T5_SNIPPET",
    "TOUR_ERRATA",
    "TUTORIAL_FINGERPRINTS",
    "TUTORIAL_PE",
    "TUTORIAL_SUMS",
    "demonstration_table",
    "run",
]
