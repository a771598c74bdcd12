"""Fast paths, each with the plain path it must equal as its fallback.

- :mod:`~posenc.kernels.rope`: :func:`apply_rotary_fused`, RoPE/xPos application in one
  memory pass (C + OpenMP, built on first use), forward and backward.
- :mod:`~posenc.kernels.bias_attention`: attention with a bias encoding without the
  ``(b, h, i, j)`` tensor: FlexAttention ``score_mod`` (forward) or query-chunked SDPA.

Set ``POSENC_DISABLE_KERNELS=1`` to force the plain paths.
"""

from posenc.kernels.rope import apply_rotary_fused
from posenc.kernels.rope import available as rope_available

__all__ = ["apply_rotary_fused", "rope_available"]
