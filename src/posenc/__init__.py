"""posenc: every positional encoding for Transformers behind one interface.

Quick start::

    import posenc
    enc = posenc.build("sinusoidal", dim=512)
    x = enc.embed(token_embeddings)          # (b, n, d) -> (b, n, d)
"""

from posenc import hf, presets, schedules
from posenc.encoding import KINDS, PositionalEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.registry import ENCODINGS, build, build_for_model, get_encoding_class, list_encodings

__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "KINDS",
    "PosencError",
    "PosencTypeError",
    "PositionalEncoding",
    "__version__",
    "build",
    "build_for_model",
    "get_encoding_class",
    "hf",
    "list_encodings",
    "presets",
    "schedules",
]
