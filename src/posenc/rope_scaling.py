"""RoPE context-extension scalings: a literal registry of pure functions.

Every function has one signature and returns ``(inv_freq, attention_scaling)`` so
the rotary encoding (and attention) never branches on the variant.

    fn(*, dim: int, base: float, seq_len: int | None, params: dict) -> (inv_freq float64 (dim/2,), float)

``dim`` is the rotated dimension (rotary_dim), ``seq_len`` the current sequence
length (used only by dynamic variants), ``params`` the scaling's own parameters.
"""

from __future__ import annotations

from typing import Any

import torch


def _default(*, dim: int, base: float, seq_len: int | None, params: dict[str, Any]):
    """Plain RoPE (Su et al. 2021): theta_i = base^(-2i/dim)."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return inv_freq, 1.0


ROPE_SCALINGS = {
    "default": _default,
}


def compute(scaling: dict[str, Any] | None, *, dim: int, base: float, seq_len: int | None = None):
    """Dispatch on ``scaling["rope_type"]`` (None -> default); returns (inv_freq, attention_scaling)."""
    params = dict(scaling or {})
    name = params.pop("rope_type", "default")
    return ROPE_SCALINGS[name](dim=dim, base=base, seq_len=seq_len, params=params)


def depends_on_seq_len(scaling: dict[str, Any] | None) -> bool:
    """True when inv_freq changes with the current sequence length (dynamic NTK, LongRoPE)."""
    return (scaling or {}).get("rope_type", "default") in ("dynamic", "longrope")
