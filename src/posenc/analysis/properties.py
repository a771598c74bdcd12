"""Numeric checks of what textbooks and tutorials claim about positional encodings.

Axis legend: n positions, d feature dim, h heads, i/j query/key positions, k shift.

Every function returns data (NumPy arrays or frozen dataclasses), never prints:

* :func:`uniqueness` -- minimum pairwise distance between positions' signatures;
* :func:`value_range` -- boundedness, and how the range grows with length;
* :func:`linear_relative_map` -- least-squares ``M_k`` with ``PE(p+k) ~= M_k PE(p)``;
  :func:`sinusoidal_shift_matrix` is its closed form (block-diagonal rotations);
  :func:`affine_relative_map` allows an offset, ``PE(p+k) ~= M_k PE(p) + b_k``;
* :func:`translation_residual` -- ``K(m, n) - K(m+t, n+t)`` (RoPE's offset invariance);
* :func:`distance_decay` and :func:`rope_decay_bound` (RoFormer sec. 3.4.3);
* :func:`similarity_matrix`, :func:`tutorial_similarity_check` (a tutorial's printed table);
* :func:`integer_index_growth` -- why raw integer indices make a poor encoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from posenc.analysis.signals import (
    VECTOR_KINDS,
    additive_vectors,
    position_kernel,
    position_signal,
    signature_rows,
)
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding
from posenc.reference.rotary import rope_inv_freq
from posenc.registry import build

# ---------------------------------------------------------------------------
# Uniqueness and boundedness (any kind).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Uniqueness:
    num_positions: int
    min_distance: float  # smallest Euclidean distance between two positions' signatures
    closest_pair: tuple[int, int]  # the two positions that achieve it

    @property
    def unique(self) -> bool:
        return self.min_distance > 1e-9


def min_pairwise_distance(rows: np.ndarray) -> tuple[float, tuple[int, int]]:
    """Smallest Euclidean distance between two rows of ``rows (n, d)``, and the pair."""
    sq = (rows**2).sum(1)
    dist2 = sq[:, None] + sq[None, :] - 2.0 * rows @ rows.T  # (n, n)
    # Recompute the closest candidates exactly (the expansion above cancels badly).
    np.fill_diagonal(dist2, np.inf)
    i, j = np.unravel_index(np.argmin(dist2), dist2.shape)
    exact = float(np.linalg.norm(rows[i] - rows[j]))
    return exact, (int(min(i, j)), int(max(i, j)))


def uniqueness(enc: PositionalEncoding, num_positions: int = 128, *, num_heads: int = 1) -> Uniqueness:
    """Do ``num_positions`` positions get distinct signatures? (the textbook claim: "each position is unique").

    Signature of a position: its added vector (additive), its rotated unit vector
    (rotary), or its row of the score term over all keys (bias / relative / contextual).
    """
    n = check_int("num_positions", num_positions, minimum=2)
    rows = signature_rows(position_signal(enc, np.arange(n), num_heads=num_heads))
    dist, pair = min_pairwise_distance(rows)
    return Uniqueness(n, dist, pair)


@dataclass(frozen=True)
class ValueRange:
    num_positions: int
    minimum: float
    maximum: float
    growth: float  # max |signal| over 8n positions / max |signal| over n positions (nan if n/a)

    @property
    def bounded(self) -> bool:
        return bool(np.isfinite(self.growth) and self.growth < 1.5)


def value_range(enc: PositionalEncoding, num_positions: int = 64, *, num_heads: int = 1) -> ValueRange:
    """Range of the position signal over ``num_positions`` positions, and its growth at 8x."""
    n = check_int("num_positions", num_positions, minimum=1)
    sig = position_signal(enc, np.arange(n), num_heads=num_heads)
    finite = sig[np.isfinite(sig)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    try:
        long = position_signal(enc, np.arange(8 * n), num_heads=num_heads)
        long = long[np.isfinite(long)]
        top = max(abs(lo), abs(hi))
        growth = float(np.abs(long).max() / top) if top > 0 else (0.0 if not np.abs(long).max() else np.inf)
    except ValueError:  # e.g. a learned table shorter than 8n
        growth = float("nan")
    return ValueRange(n, lo, hi, growth)


# ---------------------------------------------------------------------------
# The linear relative map PE(p + k) = M_k PE(p) (additive encodings).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearMap:
    shift: int
    matrix: np.ndarray = field(repr=False)  # (d, d) fitted M_k
    residual: float  # ||PE(p+k) - M_k PE(p)||_F / ||PE(p+k)||_F over the fitted positions
    offblock_fraction: float  # share of ||M_k||_F^2 outside the 2x2 diagonal blocks
    rotation_error: float  # max over 2x2 diagonal blocks of ||B^T B - I||_max
    num_positions: int


def sinusoidal_table(positions, dim: int, base: float = 10000.0) -> np.ndarray:
    """The textbook formula in float64: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``, ``(n, d)``."""
    w = rope_inv_freq(dim, base)  # (d/2,)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * w  # (n, d/2)
    out = np.empty((angles.shape[0], dim))
    out[:, 0::2], out[:, 1::2] = np.sin(angles), np.cos(angles)
    return out


def sinusoidal_shift_matrix(dim: int, shift: int, base: float = 10000.0) -> np.ndarray:
    """Closed-form ``M_k``: one 2x2 rotation per (sin, cos) pair, ``(d, d)``.

    ``sin(a + b) = sin a cos b + cos a sin b``, ``cos(a + b) = cos a cos b - sin a sin b``
    with ``b = k w_i``: ``[s', c'] = [[cos b, sin b], [-sin b, cos b]] [s, c]``.
    """
    check_int("dim", dim, minimum=2, even=True)
    w = rope_inv_freq(dim, base)
    m = np.zeros((dim, dim))
    for i, b in enumerate(shift * w):
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(b), np.sin(b)], [-np.sin(b), np.cos(b)]]
    return m


def fit_shift_map(table: np.ndarray, shifted: np.ndarray, shift: int = 0) -> LinearMap:
    """Least squares ``M`` with ``shifted[p] ~= M @ table[p]`` for rows ``(n, d)``."""
    # torch's LAPACK keeps to its own 1-2 threads; NumPy's OpenBLAS can oversubscribe a loaded
    # machine and take seconds for a 512 x 128 problem. The SVD driver (gelsd), not QR with
    # column pivoting (gelsy): on rank-deficient tables (sinusoids over a few hundred
    # positions) gelsy's answer varied from call to call, residual 1e-15 one time and 0.1 the next.
    mt = torch.linalg.lstsq(
        torch.from_numpy(table), torch.from_numpy(shifted), driver="gelsd"
    ).solution.numpy()
    m = mt.T
    resid = float(np.linalg.norm(table @ mt - shifted) / max(np.linalg.norm(shifted), 1e-300))
    d = m.shape[0]
    block = np.zeros_like(m, dtype=bool)
    errors = [0.0]
    for i in range(0, d - 1, 2):
        block[i : i + 2, i : i + 2] = True
        b = m[i : i + 2, i : i + 2]
        errors.append(float(np.abs(b.T @ b - np.eye(2)).max()))
    total = float((m**2).sum())
    off = float((m[~block] ** 2).sum() / total) if total > 0 else 0.0
    return LinearMap(shift, m, resid, off, max(errors), table.shape[0])


def linear_relative_map(
    enc: PositionalEncoding, shift: int = 1, *, positions=None, seed: int = 0
) -> LinearMap:
    """Fit ``M_k`` for an additive encoding (the textbook claim: "PE(pos+k) is a linear function of PE(pos)").

    ``positions`` default: ``4 d`` random integers spread over ``[0, 2^18)`` .. ``[0, 2^22)``,
    the first span whose table is well conditioned (the slowest sinusoid must turn
    through a full cycle, else ``M_k`` is not identifiable even though the residual is
    tiny). Encodings limited to a shorter range (a learned table) fall back to
    ``0 .. 4d - 1``. Residual ~1e-12 for sinusoidal, large for learned.
    """
    if enc.kind != "additive":
        raise PosencError(f"linear_relative_map needs an additive encoding, got kind {enc.kind!r}")
    shift = check_int("shift", shift, minimum=0)
    if positions is not None:
        positions = np.asarray(positions)
        return fit_shift_map(
            additive_vectors(enc, positions), additive_vectors(enc, positions + shift), shift
        )
    d = additive_vectors(enc, [0]).shape[1]
    rng = np.random.default_rng(seed)
    best = None
    try:
        for span in (1 << 18, 1 << 20, 1 << 22):
            distinct = np.unique(rng.integers(0, span, size=8 * d))
            positions = np.sort(rng.permutation(distinct)[: 4 * d])
            table = additive_vectors(enc, positions)
            sv = torch.linalg.svdvals(torch.from_numpy(table))
            cond = float(sv[0] / sv[-1]) if float(sv[-1]) > 0 else float("inf")
            if best is None or cond < best[0]:
                best = (cond, table, additive_vectors(enc, positions + shift))
            if cond < 1e3:
                break
        assert best is not None  # the loop ran at least once
        _, table, shifted = best
    except (ValueError, IndexError):  # positions past what the encoding supports
        positions = np.arange(4 * d)
        table, shifted = additive_vectors(enc, positions), additive_vectors(enc, positions + shift)
    return fit_shift_map(table, shifted, shift)


# Positions the property tables fit ``M`` on: a prefix a model actually sees. (Fitting near
# position 2^18 flatters the integer index: there (p + 1) / p ~ 1 and PE(p + 1) ~ PE(p).)
FIT_POSITIONS = range(256)


def affine_relative_map(enc: PositionalEncoding, shift: int = 1, *, positions=FIT_POSITIONS) -> float:
    """Relative residual of the least-squares affine map ``PE(p+k) ~= M_k PE(p) + b_k``.

    The integer index has no exact *linear* map (``M p 1 = (p + k) 1`` for every ``p``
    is impossible) but an exact affine one: ``PE(p + k) = PE(p) + k 1`` (``M = I``,
    ``b = k 1``), residual ~1e-16. Sinusoids need no ``b``; a learned table has neither.
    """
    if enc.kind != "additive":
        raise PosencError(f"affine_relative_map needs an additive encoding, got kind {enc.kind!r}")
    shift = check_int("shift", shift, minimum=0)
    p = np.asarray(list(positions))
    table = additive_vectors(enc, p)
    with_one = np.concatenate([table, np.ones((table.shape[0], 1))], axis=1)  # [PE(p), 1]: (n, d+1)
    return fit_shift_map(with_one, additive_vectors(enc, p + shift), shift).residual


# ---------------------------------------------------------------------------
# Translation invariance of the position kernel (RoPE offset invariance, ...).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslationResidual:
    shifts: tuple[int, ...]
    absolute: np.ndarray  # (len(shifts),) max |K(m, n) - K(m+t, n+t)|
    relative: np.ndarray  # absolute / max |K(m, n)|

    @property
    def worst(self) -> float:
        return float(np.nanmax(self.relative)) if self.relative.size else float("nan")


def translation_residual(
    enc: PositionalEncoding,
    num_positions: int = 16,
    shifts=(1, 7, 100, 1000),
    *,
    num_heads: int = 1,
    seed: int = 0,
) -> TranslationResidual:
    """``max |K(m, n) - K(m + t, n + t)|`` over ``m, n < num_positions`` for each shift ``t``.

    For RoPE with fixed random q, k this is the offset invariance of
    ``score(m, n) = (R_m q) . (R_n k)`` (exact up to rounding); for additive encodings it
    asks whether ``PE_m . PE_n`` depends on ``m - n`` only. Shifts the encoding cannot
    represent (past a learned table) give nan.
    """
    n = check_int("num_positions", num_positions, minimum=1)
    base = position_kernel(enc, np.arange(n), num_heads=num_heads, seed=seed)
    ok = np.isfinite(base)
    scale = float(np.abs(base[ok]).max()) if ok.any() else 0.0
    found: list[float] = []
    for t in shifts:
        try:
            moved = position_kernel(enc, np.arange(n) + int(t), num_heads=num_heads, seed=seed)
        except (ValueError, IndexError):
            found.append(np.nan)
            continue
        both = ok & np.isfinite(moved)
        same_mask = bool((ok == np.isfinite(moved)).all())
        diff = float(np.abs(base[both] - moved[both]).max()) if both.any() else 0.0
        found.append(diff if same_mask else np.inf)
    absolute = np.asarray(found, dtype=np.float64)
    relative = absolute / scale if scale > 0 else np.where(absolute > 0, np.inf, 0.0).astype(np.float64)
    return TranslationResidual(tuple(int(t) for t in shifts), absolute, relative)


# ---------------------------------------------------------------------------
# Distance decay.
# ---------------------------------------------------------------------------


def distance_decay(
    enc: PositionalEncoding, distances=range(0, 128), *, query_position: int | None = None, num_heads: int = 1
) -> np.ndarray:
    """``K(R, R - r)`` for each distance ``r``: ``(h, len(distances))`` float64.

    Content is all-ones (RoFormer's setting), the query sits at ``R = max(distances)``
    unless given and keys lie ``r`` positions before it.
    """
    r = np.asarray(list(distances), dtype=np.int64)
    top = int(r.max()) if query_position is None else check_int("query_position", query_position, minimum=0)
    if top < int(r.max()):
        raise PosencError(f"query_position must be >= max(distances) = {int(r.max())}, got {top}")
    k = position_kernel(enc, np.arange(top + 1), num_heads=num_heads, ones=True)
    return k[:, top, top - r]


def rope_decay_bound(head_dim: int, distances=range(0, 256), base: float = 10000.0) -> np.ndarray:
    """RoFormer sec. 3.4.3: the relative upper bound ``(1 / (d/2)) sum_j |S_j|`` per distance.

    With ``theta_i = base^(-2i/d)`` and ``S_j = sum_{i<j} exp(1j * r * theta_i)``, Abel
    summation gives ``|sum_i h_i e^{i r theta_i}| <= (max_i |h_{i+1} - h_i|) sum_j |S_j|``;
    the factor ``sum_j |S_j| / (d/2)`` decays with the relative distance ``r``.
    """
    d = check_int("head_dim", head_dim, minimum=2, even=True)
    theta = rope_inv_freq(d, base)  # (d/2,)
    r = np.asarray(list(distances), dtype=np.float64)
    partial = np.cumsum(np.exp(1j * r[:, None] * theta[None, :]), axis=1)  # (len(r), d/2) S_1..S_{d/2}
    return np.abs(partial).mean(axis=1)


# ---------------------------------------------------------------------------
# Similarity between positions.
# ---------------------------------------------------------------------------


def cosine_similarity(rows: np.ndarray) -> np.ndarray:
    """Cosine similarity between rows: ``(n, d) -> (n, n)``."""
    norms = np.linalg.norm(rows, axis=1)
    norms = np.where(norms > 0, norms, 1.0)
    unit = rows / norms[:, None]
    return unit @ unit.T


def similarity_matrix(enc: PositionalEncoding, positions=range(8)) -> np.ndarray:
    """Cosine similarity ``(n, n)`` between positions' vectors (additive / rotary encodings)."""
    if enc.kind not in VECTOR_KINDS:
        raise PosencError(
            f"similarity_matrix needs an encoding with one vector per position ({', '.join(VECTOR_KINDS)}), "
            f"got kind {enc.kind!r}"
        )
    return cosine_similarity(position_signal(enc, np.asarray(list(positions))))


# The "Position Similarity Matrix" of a widely shared tutorial ('Positional Encoding: Teaching the Model Word Order'),
# printed for positions 0..7 after building the encoding with embedding_dimension=128.
# Its matrix is Toeplitz; these are its row 0.
TUTORIAL_SIMILARITY_ROW = (1.00, 0.76, 0.41, 0.04, -0.28, -0.52, -0.67, -0.73)
TUTORIAL_DIM = 128


@dataclass(frozen=True)
class TutorialSimilarityCheck:
    printed: np.ndarray = field(repr=False)  # (8, 8) as the tutorial prints it
    computed: dict[int, np.ndarray] = field(repr=False)  # d_model -> (8, 8) true cosine similarity
    max_abs_difference: dict[int, float]  # d_model -> max |printed - true|
    sign_mismatches: dict[int, int]  # d_model -> entries whose sign differs
    closest_dim: int  # the even d_model in [2, 1024] closest to the printed numbers
    closest_difference: float  # its max |printed - true|


def tutorial_similarity_check(
    dims=(TUTORIAL_DIM, 8, 64, 512), *, base: float = 10000.0
) -> TutorialSimilarityCheck:
    """Recompute a widely shared tutorial's similarity table truthfully and measure where it differs.

    The true cosine similarity of sinusoidal PEs is ``mean_i cos((m - n) w_i)``; for
    ``d_model = 128`` it stays above 0.73 for positions 0..7 (slow dimensions dominate),
    while the tutorial prints values down to -0.73.
    """
    row = np.asarray(TUTORIAL_SIMILARITY_ROW)
    k = np.arange(len(row))
    printed = row[np.abs(k[:, None] - k[None, :])]  # Toeplitz (8, 8)
    computed, diff, signs = {}, {}, {}
    for d in dims:
        true = similarity_matrix(build("sinusoidal", dim=int(d), base=base), k)
        computed[int(d)] = true
        diff[int(d)] = float(np.abs(true - printed).max())
        signs[int(d)] = int((np.sign(np.round(true, 2)) != np.sign(printed)).sum())

    def closed_form(d: int) -> np.ndarray:
        w = rope_inv_freq(d, base)
        return np.cos(k[:, None] * w).mean(1)

    errors = {d: float(np.abs(closed_form(d) - row).max()) for d in range(2, 1025, 2)}
    best = min(errors, key=lambda d: errors[d])
    return TutorialSimilarityCheck(printed, computed, diff, signs, best, errors[best])


# ---------------------------------------------------------------------------
# Why not integer indices.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IntegerIndexGrowth:
    positions: np.ndarray  # (m,)
    index_norm: np.ndarray  # ||[p, p, ..., p]|| = p sqrt(d): grows without bound
    sinusoidal_norm: np.ndarray  # sqrt(d/2) at every position: bounded
    token_norm: float  # typical ||token embedding|| with N(0, 0.02^2) entries (GPT-2 init)
    normalized_step: np.ndarray  # spacing 1/(n-1) of p/(n-1) for sequence lengths n = positions


def integer_index_growth(
    dim: int = 512, positions=(1, 10, 100, 1_000, 10_000, 100_000)
) -> IntegerIndexGrowth:
    """The naive encodings: ``PE(p) = p`` in every dimension, or ``p / (n - 1)``.

    The first's norm grows linearly and drowns the token embedding (ratio ``index_norm /
    token_norm``); the second is bounded but its step between neighbours shrinks with
    the sequence length, so the same offset means different things at different lengths.
    """
    d = check_int("dim", dim, minimum=2, even=True)
    p = np.asarray(positions, dtype=np.float64)
    index_norm = p * np.sqrt(d)
    sin_norm = np.linalg.norm(sinusoidal_table(p.astype(np.int64), d), axis=1)
    step = 1.0 / np.maximum(p, 1.0)
    return IntegerIndexGrowth(p, index_norm, sin_norm, 0.02 * np.sqrt(d), step)
