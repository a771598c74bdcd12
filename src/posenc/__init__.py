"""posenc: every positional encoding for Transformers behind one interface.

Quick start::

    import posenc
    enc = posenc.build("sinusoidal", dim=512)
    x = enc.embed(token_embeddings)          # (b, n, d) -> (b, n, d)

Your own encoding: ``posenc.register("mine", MyEncoding)``, an import spec
``posenc.build("mypkg.pe:MyEncoding", ...)`` wherever a name is taken, or an entry point in
the group ``posenc.encodings``; ``posenc.testing.check_encoding`` checks it against the
contract every built-in passes.
"""

from posenc import hf, presets, schedules
from posenc.encoding import KINDS, PositionalEncoding
from posenc.errors import PosencError, PosencTypeError
from posenc.registry import (
    ENCODINGS,
    build,
    build_for_model,
    encoding_spec,
    encodings,
    get_encoding_class,
    list_encodings,
    register_encoding,
    unregister_encoding,
)

register = register_encoding

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
    "encoding_spec",
    "encodings",
    "get_encoding_class",
    "hf",
    "list_encodings",
    "presets",
    "register",
    "register_encoding",
    "schedules",
    "unregister_encoding",
]
