"""The benchmark's records: what a run is, how it is stored, and the model it trains.

Both sides of ``posenc compare`` go through here and never through each other:
:mod:`posenc.compare` writes records, :mod:`posenc.results` reads them.

- :mod:`~posenc.records.spec`: :class:`RunSpec` (one run: encoding x task x seed, content-hashed
  id) and its parts, ``BENCHMARK_VERSION``
- :mod:`~posenc.records.benchmark_scalings`: RoPE context extension as each paper uses it, and
  the one vocabulary of scalings ``posenc compare`` and ``posenc extend`` both read
- :mod:`~posenc.records.models`: the model a run spec trains
- :mod:`~posenc.records.store`: atomic, checksummed JSON records (:class:`ResultStore`); resume and redo
- :mod:`~posenc.records.schema`: what a result must hold to be read
- :mod:`~posenc.records.files`: atomic writes and bounded reads
"""

from __future__ import annotations

from posenc.records.models import build_model
from posenc.records.spec import BENCHMARK_VERSION, EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.records.store import ResultStore, load_weights

__all__ = [
    "BENCHMARK_VERSION",
    "EvalSpec",
    "ModelSpec",
    "ResultStore",
    "RunSpec",
    "TrainSpec",
    "build_model",
    "load_weights",
]
