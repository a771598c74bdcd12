"""Fast paths, each with the plain path it must equal as its fallback.

- :mod:`~posenc.kernels.fused_rope`: :func:`apply_rotary_fused`, RoPE/xPos application in one
  memory pass (C + OpenMP, built on first use, AVX-512 or AVX2 vector code as the CPU has; a
  Triton kernel on a CUDA device, :mod:`~posenc.kernels.triton_rope`), forward and backward; also
  a ``torch.library`` custom op for ``torch.compile``.
- :mod:`~posenc.kernels.bias_attention`: attention with a bias encoding without the
  ``(b, h, i, j)`` tensor: FlexAttention ``score_mod`` (forward) or query-chunked SDPA,
  whose backward (:mod:`~posenc.kernels.blocked`) reduces the score gradient into the
  bias's parameters; FIRE's blocks come from :mod:`~posenc.kernels.mlp_bias` (C). On a device
  the path (chunked, FlexAttention, dense) is the one :mod:`~posenc.kernels.bias_paths` measured
  fastest there.

Set ``POSENC_DISABLE_KERNELS=1`` to force the plain paths.
"""

from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.kernels.fused_rope import available as rope_available

__all__ = ["apply_rotary_fused", "rope_available"]
