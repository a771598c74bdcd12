"""Golden test vectors for RoPE, M-RoPE and position biases, and their checker (``posenc conform``).

- :mod:`~posenc.conform.vectors`: :func:`export` writes the vectors, :func:`check` runs an
  implementation on them (the format: docs/conformance.md)
- :mod:`~posenc.conform.mrope_vectors`: the M-RoPE cases (Qwen2-VL, Qwen3-VL)
- :mod:`~posenc.conform.hf_families`: the transformers-family adapter for the RoPE cases
"""

from posenc.conform.vectors import (
    ADAPTERS,
    SCHEMA,
    TOLERANCES,
    Case,
    NotSupported,
    Row,
    bound,
    cases,
    check,
    config_cases,
    export,
    golden,
    load,
)

__all__ = [
    "ADAPTERS",
    "SCHEMA",
    "TOLERANCES",
    "Case",
    "NotSupported",
    "Row",
    "bound",
    "cases",
    "check",
    "config_cases",
    "export",
    "golden",
    "load",
]
