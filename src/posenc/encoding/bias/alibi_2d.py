"""A bias on attention scores from the distance between patches: 2-D ALiBi (CROMA).

Axis legend: b batch, h heads, i query tokens, j key tokens, a position axes.

:class:`ALiBi2D` adds ``-m_h * ||p_i - p_j||`` (Euclidean distance of the patches' coordinates,
ALiBi's slopes ``m_h``) to the scaled scores: Fuller et al. 2023 (CROMA) introduced 2D-ALiBi
for vision transformers on satellite images and report that their models extrapolate to images
up to 17.6x larger at test time. A token without a grid position (coordinate -1, a class token)
gets no bias to or from anything (its row and column of the bias are zero). Sequence
positions ``(b, n)`` sit on the diagonal, so the bias there is ``-m_h sqrt(a) |i - j|``: ALiBi's
bidirectional bias times ``sqrt(a)``, a function of ``i - j`` only (``translation_invariant``, so
1-D callers get the blocked fast path). Coordinates ``(b, n, a)`` take the dense bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc.core.axes import AxisPositions, as_axis_positions, is_axis_positions
from posenc.core.checks import check_int
from posenc.core.fields import EncodingConfig, model_field
from posenc.core.positions import Positions
from posenc.encoding.absolute.axial import check_axes
from posenc.encoding.bias.alibi import alibi_slopes
from posenc.encoding.bias.family import Params, _BiasFamily


@dataclass(frozen=True)
class ALiBi2DConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one slope each (ALiBi's)
    axes: int = 2  # position axes: 2 for (h, w) images, 3 for (t, h, w) video

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1, maximum=1 << 16)
        check_axes(self.axes)


class ALiBi2D(_BiasFamily):
    r"""2-D ALiBi (Fuller et al. 2023, CROMA): a bias linear in the distance between patches.

    .. math:: B_{h,i,j} = -m_h \lVert p_i - p_j \rVert_2,\qquad m_h = 2^{-8h/H}

    with ``p`` the ``(row, column)`` (or ``(t, h, w)``) coordinates of the tokens: the same for
    every pair of patches at the same offset, at any grid size. Symmetric, so causal and
    bidirectional models use it alike; tokens without a position get no bias.
    """

    position_axes = 2  # (h, w) by default; an instance with a time axis says 3

    Config = ALiBi2DConfig
    config: ALiBi2DConfig
    paper = (
        "Fuller et al. 2023, CROMA: Remote Sensing Representations with Contrastive Radar-Optical "
        "Masked Autoencoders (2D-ALiBi), https://arxiv.org/abs/2311.00566"
    )
    equation = "B[h,i,j] = -m_h * ||p_i - p_j||_2 (Euclidean distance of the coordinates), m_h = 2^(-8h/H)"
    share_across_layers = True
    translation_invariant = True
    cache_dense = True

    def __init__(self, config: ALiBi2DConfig) -> None:
        super().__init__(config)
        self.position_axes = config.axes
        self.slopes = alibi_slopes(config.num_heads)  # float64 (h,), plain attribute (not a buffer)

    def _prepare(self, device: torch.device) -> Params:
        return {"slopes": self.slopes.to(device)}

    def _compute(self, q, k, h, p):  # sequence positions: the diagonal, distance sqrt(a) |i - j|
        return -p["slopes"][h] * ((q - k).to(torch.float64).abs() * math.sqrt(self.config.axes))

    def bias(
        self,
        num_queries: int,
        num_keys: int,
        *,
        q_positions: torch.Tensor | Positions | AxisPositions | None = None,
        k_positions: torch.Tensor | Positions | AxisPositions | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bias ``(b|1, h, i, j)``; coordinates ``(b|1, n, a)`` or sequence positions."""
        if not (is_axis_positions(q_positions) or is_axis_positions(k_positions)):
            return super().bias(
                num_queries, num_keys, q_positions=q_positions, k_positions=k_positions,  # type: ignore[arg-type]
                device=device,
            )  # fmt: skip
        axes = self.config.axes
        qp = as_axis_positions(q_positions, num_queries, axes, device=device, name="q_positions")
        kp = as_axis_positions(k_positions, num_keys, axes, device=qp.tensor.device, name="k_positions")
        diff = (qp.tensor[:, :, None, :] - kp.tensor[:, None, :, :]).to(torch.float64)  # (b|1, i, j, a)
        distance = diff.square().sum(-1).sqrt()  # (b|1, i, j)
        bias = -self.slopes.to(distance.device)[None, :, None, None] * distance[:, None]  # (b|1, h, i, j)
        if qp.has_none or kp.has_none:  # no position: no bias to or from the token
            both = qp.present()[:, :, None] & kp.present()[:, None, :]  # (b|1, i, j)
            bias = bias * both[:, None].to(bias.dtype)
        return bias.to(self._out_dtype())


# The patch-grid bias members by registry name (posenc.registry lists them among its built-ins).
ALIBI_2D_MEMBERS: dict[str, type[ALiBi2D]] = {"alibi_2d": ALiBi2D}

__all__ = ["ALIBI_2D_MEMBERS", "ALiBi2D"]
