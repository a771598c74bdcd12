"""Demonstrations about the sinusoidal encoding: frequencies, wavelengths, the worked example, drawings."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch

import posenc
from posenc.analysis import properties
from posenc.analysis.demonstrations.demonstration import Demonstration, small, vector
from posenc.analysis.signals import additive_vectors, make
from posenc.analysis.worked import TUTORIAL_TOKENS
from posenc.core.errors import PosencError
from posenc.encoding.base import AdditiveEncoding
from posenc.reference import tutorial


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
        ("as written: [sin(1/f), cos(1/f), sin(1/f^2), cos(1/f^2)], f = 10000^(2/8) = 10", vector(written)),
        ("PE(1), dims 0..3", vector(true[:4])),
        ("PE(1), dims 2..5: the written values, one pair later", vector(true[2:6])),
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
        ("divisors 10000^(2i/8), i = 0..3", vector(divisors, 0)),
        ("PE(1)", vector(pe[1])),
        ("dog + PE(0), first 4 dims", vector(sums[0, :4])),
        ("bites + PE(1), first 4 dims", vector(sums[1, :4])),
        ("man + PE(2), first 4 dims", vector(sums[2, :4])),
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
        ("dim 126 = sin(pos / 10000^(126/128))", vector(pe[:, 126])),
        ("dim 127 = cos(pos / 10000^(126/128))", vector(pe[:, 127])),
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
        (f"least-squares residual of PE(p+{k}) = M PE(p), d_model {d}", small(fit.residual)),
        ("max |M_fit - M_closed form|", small(numbers["closed_form_error"])),
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
    rows = (("max error of PE(p+k) built from PE(p) and PE(k), p, k < 64, d_model 64", small(err)),)
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
            small(max(errors)),
        ),
        ("max |posenc's closed-form M_1 block - the script's matrix|", small(numbers["posenc_block_error"])),
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
    rows = (("max |notes' code - posenc| over 512 positions, d_model 64, float64", small(err)),)
    return Demonstration(
        "notes_code", "The notes' sinusoid code", rows, {"matches": err < 1e-9}, {"error": err}
    )


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
