"""An out-of-tree RoPE context-extension scaling, installed nowhere: the tests put a dist-info with an
entry point of the group ``posenc.rope_scalings`` on ``sys.path``.

``halfscale``: the slower half of the rotary pairs interpolated by ``factor`` (their frequencies
divided by it), the faster half left as they are; attention scaling 1. A deliberately simple rule
whose frequencies a test can write down.
"""

from __future__ import annotations

import torch

from posenc.core.errors import PosencError
from posenc.core.sincos import inverse_frequencies
from posenc.encoding.rotary.scaling import RopeScaling


def halfscale_frequencies(
    *, dim: int, base: float, seq_len: int | None, params: dict
) -> tuple[torch.Tensor, float]:
    inv_freq = inverse_frequencies(dim, base).clone()  # (dim/2,) float64, fastest pair first
    inv_freq[dim // 4 :] = inv_freq[dim // 4 :] / float(params["factor"])
    return inv_freq, 1.0


def validate_halfscale(params: dict, *, dim: int) -> None:
    if dim < 4:
        raise PosencError(f"halfscale needs dim >= 4 (two halves of pairs), got {dim}")


HALFSCALE = RopeScaling(
    halfscale_frequencies,
    "posenc's tests: the slower half of the pairs interpolated",
    ("factor",),
    validate=validate_halfscale,
)
