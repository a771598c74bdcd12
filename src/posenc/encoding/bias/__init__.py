"""Bias encodings: a content-free ``bias(i, j, h)`` added to the scaled attention scores.

Axis legend: b batch, h heads, i query positions, j key positions, u MLP hidden units.

Each encoding is defined ONCE, by :meth:`_compute` — an elementwise, broadcasting function
of integer query positions, key positions and head indices that returns float64 (FIRE and
Sandwich branch inside it between a per-score and a dense form of the same formula; both
are tested against the reference). From it come:

* ``bias_fn(q_pos, k_pos, head)``: the validated public form of that definition (float64);
* ``bias(num_queries, num_keys, ...)``: the dense ``(b|1, h, i, j)`` tensor, float32 (float64
  if the module's parameters are float64), cast last;
* ``score_mod(q_positions, k_positions)``: a FlexAttention ``score_mod`` that adds
  ``bias_fn(qpos[b, q_idx], kpos[b, kv_idx], h)`` to each score.

Parameters are cast to float64 once per call in :meth:`_prepare` (outside the score_mod, so
FlexAttention can back-propagate into them), and nothing inside :meth:`_compute` builds a
vector per score on the score_mod path: FlexAttention's eager backward cannot handle
per-score vector intermediates of captured tensors, so there FIRE's MLP runs one hidden
unit at a time (the dense path uses a matmul; both are tested against the reference).
``bidirectional=False`` (causal) variants are only meaningful for ``j <= i``; the model
sets ``bidirectional=True`` for encoders.

2-D ALiBi (:mod:`~posenc.encoding.bias.alibi_2d`) is the member for patch grids.

The float64 NumPy reference of every scheme lives in :mod:`posenc.reference.bias`.
"""

from posenc.encoding.bias.alibi import ALiBi, ALiBiConfig, alibi_slopes
from posenc.encoding.bias.alibi_2d import ALiBi2D, ALiBi2DConfig
from posenc.encoding.bias.family import _BiasFamily  # noqa: F401  (tests and subclasses reach it here)
from posenc.encoding.bias.fire import FIRE, FIREConfig
from posenc.encoding.bias.kerple import KerpleConfig, KerpleLog, KerplePower, _Kerple  # noqa: F401
from posenc.encoding.bias.sandwich import Sandwich, SandwichConfig
from posenc.encoding.bias.t5 import T5Config, T5RelativeBias, t5_relative_position_bucket

__all__ = [
    "ALiBi",
    "ALiBiConfig",
    "ALiBi2D",
    "ALiBi2DConfig",
    "alibi_slopes",
    "FIRE",
    "FIREConfig",
    "KerpleConfig",
    "KerpleLog",
    "KerplePower",
    "Sandwich",
    "SandwichConfig",
    "T5Config",
    "T5RelativeBias",
    "t5_relative_position_bucket",
]
