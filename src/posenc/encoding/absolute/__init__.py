"""Absolute encodings: a vector per position, added to the token embeddings (kind ``additive``).

- :mod:`~posenc.encoding.absolute.sequence`: positions along a sequence (sinusoidal, scaled
  sinusoidal, learned, hybrid, complex order, integer index)
- :mod:`~posenc.encoding.absolute.axial`: positions with axes, ``(h, w)`` or ``(t, h, w)``
  (sincos_axial, learned_axial)
- :mod:`~posenc.encoding.absolute.hierarchical`: (segment, offset) positions over a sequence member
"""

from posenc.encoding.absolute.axial import LearnedAxial, LearnedAxialConfig, SinCosAxial, SinCosAxialConfig
from posenc.encoding.absolute.hierarchical import Hierarchical, HierarchicalConfig
from posenc.encoding.absolute.sequence import (
    ComplexOrder,
    ComplexOrderConfig,
    Hybrid,
    HybridConfig,
    IntegerIndex,
    IntegerIndexConfig,
    Learned,
    LearnedConfig,
    ScaledSinusoidal,
    ScaledSinusoidalConfig,
    Sinusoidal,
    SinusoidalConfig,
)

__all__ = [
    "ComplexOrder",
    "ComplexOrderConfig",
    "Hierarchical",
    "HierarchicalConfig",
    "Hybrid",
    "HybridConfig",
    "IntegerIndex",
    "IntegerIndexConfig",
    "Learned",
    "LearnedAxial",
    "LearnedAxialConfig",
    "LearnedConfig",
    "ScaledSinusoidal",
    "ScaledSinusoidalConfig",
    "SinCosAxial",
    "SinCosAxialConfig",
    "Sinusoidal",
    "SinusoidalConfig",
]
