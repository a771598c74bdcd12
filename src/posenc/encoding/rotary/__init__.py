"""Rotary encodings: queries and keys rotated by angles of their positions (kind ``rotary``).

- :mod:`~posenc.encoding.rotary.rope`: RoPE (Su et al. 2021), with every context-extension scaling
- :mod:`~posenc.encoding.rotary.xpos`: xPos (Sun et al. 2022), RoPE with a reciprocal decay
- :mod:`~posenc.encoding.rotary.scaling`: the scalings (one spec per ``rope_type``, the typed
  :class:`~posenc.encoding.rotary.scaling.Scaling` parsed once) and
  :mod:`~posenc.encoding.rotary.formulas`, one pure function per variant
- :mod:`~posenc.encoding.rotary.rope_axial`: positions with axes (axial RoPE, M-RoPE, RoPE-Mixed)
- :mod:`~posenc.encoding.rotary.hook`: the rotary hook every member shares (checks, layouts, the
  rotation by table rows or per-token lookups)

The plain rotation and the pair layouts are :mod:`posenc.kernels.rotation`'s
(:func:`permute_qk_weight` converts q/k projection weights between layouts).
"""

from posenc.encoding.rotary.rope import (
    RoPE,
    RoPEConfig,
    apply_rotary_fast,
)
from posenc.encoding.rotary.rope_axial import (
    AxialRoPE,
    AxialRoPEConfig,
    MRoPE,
    MRoPEConfig,
    RoPEMixed,
    RoPEMixedConfig,
    check_qk_axes,
    mixed_frequencies,
    mrope_axes,
)
from posenc.encoding.rotary.xpos import XPos, XPosConfig
from posenc.kernels.rotation import LAYOUTS, apply_rotary, layout_permutation, permute_qk_weight

__all__ = [
    "LAYOUTS",
    "AxialRoPE",
    "AxialRoPEConfig",
    "MRoPE",
    "MRoPEConfig",
    "RoPE",
    "RoPEConfig",
    "RoPEMixed",
    "RoPEMixedConfig",
    "XPos",
    "XPosConfig",
    "apply_rotary",
    "apply_rotary_fast",
    "check_qk_axes",
    "layout_permutation",
    "mixed_frequencies",
    "mrope_axes",
    "permute_qk_weight",
]
