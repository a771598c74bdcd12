"""The contract every built-in encoding and task passes, runnable on your own class.

    >>> import posenc.testing
    >>> report = posenc.testing.check_encoding("mypkg.pe:MyEncoding", base=500.0)
    >>> print(report)                 # one line per property: PASS / FAIL / SKIP, with numbers
    >>> posenc.testing.assert_encoding(MyEncoding)   # in a pytest test: fails with the report

``check_encoding`` takes a registry name, an import spec ``"package.module:Class"``, a class
or an instance, builds it for a small model (``d_model=16``, ``num_heads=2`` unless given;
``config`` overrides its Config fields) and runs :data:`PROPERTIES`, each on a freshly seeded
instance, returning a :class:`CheckReport` with one :class:`PropertyResult` per property:

- ``declares``: a kind, a paper, a docstring and an equation; the Config round-trips to JSON.
- ``shapes_and_dtypes``: the kind's hook, fed fewer queries than keys, returns every output in
  exactly its input's shape (and float32 / float64 dtype), without NaN.
- ``layout``: a rotary's ``rotate(..., layout="bshd")`` on ``(b, n, h, d)`` equals the
  ``"bhsd"`` result transposed.
- ``default_positions``: ``positions=None`` equals ``arange``, given as a tensor or as a
  :class:`~posenc.core.positions.Positions`.
- ``offsets``: rows at different offsets are independent of each other and deterministic.
- ``padding``: in attention, a left-padded row equals the unpadded sequence.
- ``packing``: two documents packed in one row (document ids, positions restarting) equal
  each document alone.
- ``kv_cache``: prefill then one token at a time with a KV cache equals recomputing each
  prefix in full (skipped when the class declares ``supports_kv_cache = False``).
- ``grouped_kv``: one key/value head shared by every query head equals each query head with its
  own copy (skipped when the class declares ``supports_grouped_kv = False``).
- ``relative_invariance``: shifting every position leaves the hook's scores and attention
  unchanged (run when the instance declares ``translation_invariant``).
- ``capabilities``: the other declarations hold: ``supports_scaling`` (RoPE's scalings set and
  unset), ``cos_sin`` (the tables a transformers model applies equal ``rotate``),
  ``constant_beyond()``, ``factored_mlp()``, ``position_axes`` > 1.
- ``gradients``: ``torch.autograd.gradcheck`` in float64 through inputs and parameters.
- ``numpy_reference``: the hook equals the class's ``numpy_reference`` (float64 NumPy, same
  arguments as the hook) on full tensors, when the class defines one (``numpy_reference =
  None`` in a subclass drops an inherited one).
- ``compile``: ``torch.compile(fullgraph=True)`` of the hook equals eager, forward and backward.

The numbers are the largest absolute differences against what was expected, and the
tolerance they were held to. A false declaration fails the property that checks it, naming the
declaration; NaN in an output fails every property that compares it, saying so.
:data:`FAST_PROPERTIES` (all but ``compile``) is what ``posenc compare`` runs on an outside
encoding before training it. Axis legend: b batch, h heads, n sequence, d feature dim.

Tasks of ``posenc compare`` have a contract of their own (:mod:`posenc.testing.tasks`,
:data:`TASK_PROPERTIES`: declares, examples, deterministic, lengths, batches, scoring)::

    >>> posenc.testing.check_task("mypkg.tasks:Sort")     # or a name, a Task class or instance
    >>> posenc.testing.assert_task(Sort)

``posenc check SPEC`` runs whichever SPEC is.
"""

from posenc.testing.contract_report import CheckReport, PropertyResult
from posenc.testing.encodings import (
    FAST_PROPERTIES,
    PROPERTIES,
    TOLERANCES,
    apply_hook,
    assert_encoding,
    check_encoding,
    hook_inputs,
)
from posenc.testing.tasks import TASK_PROPERTIES, assert_task, check_task

__all__ = [
    "FAST_PROPERTIES",
    "PROPERTIES",
    "TASK_PROPERTIES",
    "TOLERANCES",
    "CheckReport",
    "PropertyResult",
    "apply_hook",
    "assert_encoding",
    "assert_task",
    "check_encoding",
    "check_task",
    "hook_inputs",
]
