"""What an encoding does to positions, read through its kind's hook (never its name).

Axis legend: h heads, n positions, i/j query/key positions, d feature dim.

Two views serve every analysis and figure:

* :func:`position_signal` -- the encoding's own output for a list of positions: the
  vectors ``(n, d)`` an additive encoding adds, the rotated unit vector ``(n, d)`` of a
  rotary one, or the score term ``(h, i, j)`` of bias / relative / contextual ones.
* :func:`position_kernel` -- how positions *interact*: ``K (h, i, j)``. Additive:
  ``PE_i . PE_j``; rotary: ``R_i q . R_j k`` for fixed content vectors; bias: the bias;
  relative: the extra score term for fixed content; contextual: the new logits for
  fixed content. A kernel that depends only on ``i - j`` is translation invariant.

Everything is computed in float64 where the hook allows it and returned as NumPy.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch

import posenc
from posenc.core.errors import PosencError
from posenc.encoding.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    PositionalEncoding,
    RelativeEncoding,
    RotaryEncoding,
)

# Kinds whose position signal is one vector per position, (n, d).
VECTOR_KINDS = ("additive", "rotary")
# Kinds whose position signal is a score term, (h, i, j).
SCORE_KINDS = ("bias", "relative", "contextual")


def make(name: str, *, d_model: int = 64, num_heads: int = 4, seed: int = 0, **config) -> PositionalEncoding:
    """Build a registered encoding for a model of size ``d_model`` / ``num_heads``.

    Learned parameters are initialised from ``seed`` without touching the global RNG.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return posenc.build_for_model(name, d_model=d_model, num_heads=num_heads, **config)


def num_heads_of(enc: PositionalEncoding, default: int = 1) -> int:
    """Heads the encoding was built for (its ``num_heads`` field), else ``default``."""
    return int(getattr(enc.config, "num_heads", default) or default)


def feature_dim_of(enc: PositionalEncoding, default: int) -> int:
    """Feature size the hook expects: ``dim`` (additive) or ``head_dim``, else ``default``."""
    for field in ("dim", "head_dim"):
        value = getattr(enc.config, field, None)
        if isinstance(value, int):
            return value
    return default


def _positions(positions) -> torch.Tensor:
    p = torch.as_tensor(np.asarray(positions), dtype=torch.long).reshape(1, -1)  # (1, n)
    if p.numel() and int(p.min()) < 0:
        raise PosencError(f"positions must be >= 0, got minimum {int(p.min())}")
    return p


def _content(shape: tuple[int, ...], seed: int, *, ones: bool = False) -> torch.Tensor:
    """A fixed content vector per head, repeated at every position: ``(1, h, n, d)``."""
    h, n, d = shape
    if ones:
        u = torch.ones(1, h, 1, d, dtype=torch.float64)
    else:
        g = torch.Generator().manual_seed(seed)
        u = torch.randn(1, h, 1, d, generator=g, dtype=torch.float64)
        u = u / u.norm(dim=-1, keepdim=True)
    return u.expand(1, h, n, d).contiguous()


def additive_vectors(enc: PositionalEncoding, positions) -> np.ndarray:
    """The vectors an additive encoding adds at ``positions``: ``(n, d)`` float64.

    Uses ``embed`` on zero content in float64 (exact for fixed encodings); when that is
    all zeros (content-multiplicative encodings), uses ``embed(c) - c`` for a fixed ``c``.
    """
    p = _positions(positions)
    d = feature_dim_of(enc, 0)
    with torch.no_grad():
        x = torch.zeros(1, p.shape[1], d, dtype=torch.float64)
        out = cast(AdditiveEncoding, enc).embed(x, positions=p)[0]
        if not bool(out.abs().max() > 0):
            g = torch.Generator().manual_seed(1)
            c = torch.randn(1, p.shape[1], d, generator=g, dtype=torch.float64)
            out = (cast(AdditiveEncoding, enc).embed(c, positions=p) - c)[0]
    return out.to(torch.float64).numpy()


def rotated_vectors(enc: PositionalEncoding, positions, *, seed: int = 0, ones: bool = False) -> np.ndarray:
    """A fixed unit vector rotated by a rotary encoding at each position: ``(n, d)`` float64
    (the first head's rotation where heads rotate differently: RoPE-Mixed)."""
    p = _positions(positions)
    n, d = p.shape[1], feature_dim_of(enc, 0)
    q = _content((1, n, d), seed, ones=ones).expand(1, num_heads_of(enc), n, d).contiguous()
    with torch.no_grad():
        q_rot, _ = cast(RotaryEncoding, enc).rotate(q, q, q_positions=p, k_positions=p)
    return q_rot[0, 0].to(torch.float64).numpy()


def position_signal(enc: PositionalEncoding, positions, *, num_heads: int = 1, seed: int = 0) -> np.ndarray:
    """The encoding's own output at ``positions``: ``(n, d)`` or ``(h, i, j)`` (see module doc)."""
    if enc.kind == "additive":
        return additive_vectors(enc, positions)
    if enc.kind == "rotary":
        return rotated_vectors(enc, positions, seed=seed)
    if enc.kind in SCORE_KINDS:
        return position_kernel(enc, positions, num_heads=num_heads, seed=seed)
    n = len(np.asarray(positions))
    return np.zeros((1, n, n))


def position_kernel(
    enc: PositionalEncoding,
    positions,
    *,
    num_heads: int = 1,
    seed: int = 0,
    ones: bool = False,
    causal: bool = True,
) -> np.ndarray:
    """How positions interact, ``K (h, i, j)`` float64, queries and keys both at ``positions``.

    Content (for rotary / relative / contextual) is one fixed vector per head for
    queries and another for keys, the same at every position, so ``K`` holds position
    information only. ``ones=True`` uses all-ones content (the RoFormer decay setting).
    Contextual kernels are causal (masked entries are ``-inf``).
    """
    p = _positions(positions)
    n = p.shape[1]
    h = num_heads_of(enc, num_heads)
    if enc.kind == "additive":
        v = additive_vectors(enc, positions)
        return (v @ v.T)[None]  # (1, i, j)
    if enc.kind == "none":
        return np.zeros((1, n, n))
    with torch.no_grad():
        if enc.kind == "bias":
            b = cast(BiasEncoding, enc).bias(n, n, q_positions=p, k_positions=p)  # (1, h, i, j)
            return b[0].to(torch.float64).numpy()
        d = feature_dim_of(enc, 0)
        q = _content((h, n, d), seed, ones=ones)
        k = _content((h, n, d), seed + 1, ones=ones)
        if enc.kind == "rotary":
            q, k = cast(RotaryEncoding, enc).rotate(q, k, q_positions=p, k_positions=p)
            return (q @ k.transpose(-1, -2))[0].to(torch.float64).numpy()
        if enc.kind == "relative":
            s = cast(RelativeEncoding, enc).scores(q, k, q_positions=p, k_positions=p)
            return s[0].to(torch.float64).numpy()
        if enc.kind == "contextual":
            logits = (q @ k.transpose(-1, -2)) / math.sqrt(d)
            if causal:
                mask = torch.ones(n, n, dtype=torch.bool).tril()
                logits = logits.masked_fill(~mask, float("-inf"))
            return cast(ContextualEncoding, enc).scores(q, k, logits)[0].to(torch.float64).numpy()
    raise PosencError(f"unknown encoding kind {enc.kind!r}")


def signature_rows(signal: np.ndarray) -> np.ndarray:
    """One row per (query) position: ``(n, d)`` as is, ``(h, i, j)`` -> ``(i, h*j)``, non-finite -> 0."""
    if signal.ndim == 3:
        signal = signal.transpose(1, 0, 2).reshape(signal.shape[1], -1)
    return np.where(np.isfinite(signal), signal, 0.0)
