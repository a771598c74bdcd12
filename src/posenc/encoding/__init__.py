"""The encodings, a package per kind, and the seam for writing your own.

An encoding subclasses the base class of the place it acts (its kind) and defines that kind's
one hook; attention calls the hook and never asks for a name. Everything needed to write one is
importable from here::

    from posenc.encoding import BiasEncoding, EncodingConfig, model_field

- :mod:`~posenc.encoding.base`: ``KINDS``, :class:`PositionalEncoding` and the base class per
  kind, :class:`PaperSetting`
- :mod:`~posenc.encoding.absolute`: added to the token embeddings (sinusoidal, learned, ...,
  the axial members for grids, hierarchical)
- :mod:`~posenc.encoding.rotary`: queries and keys rotated (RoPE and its scalings, xPos, the
  multi-axis members)
- :mod:`~posenc.encoding.bias`: a bias added to the attention scores (ALiBi, T5, KERPLE, FIRE,
  Sandwich, 2-D ALiBi)
- :mod:`~posenc.encoding.relative` (Shaw, Transformer-XL), :mod:`~posenc.encoding.contextual`
  (CoPE), :mod:`~posenc.encoding.none` (NoPE)

The registry (:mod:`posenc.registry`) names every built-in; ``posenc.build(name, ...)`` builds one.
"""

from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.encoding.base import (
    KINDS,
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    Kind,
    NoEncoding,
    PaperSetting,
    PositionalEncoding,
    RelativeEncoding,
    RotaryEncoding,
)

__all__ = [
    "KINDS",
    "AdditiveEncoding",
    "BiasEncoding",
    "ContextualEncoding",
    "EncodingConfig",
    "Kind",
    "NoEncoding",
    "PaperSetting",
    "PositionalEncoding",
    "RelativeEncoding",
    "RotaryEncoding",
    "length_field",
    "model_field",
]
