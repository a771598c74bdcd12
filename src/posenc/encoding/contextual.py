"""Contextual encodings: positions computed from content (CoPE).

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim,
P npos_max (number of learned position embeddings).

The hook is ``scores(q, k, logits) -> logits``: ``logits (b,h,i,j)`` arrive scaled by
``1/sqrt(d)`` and masked with ``-inf``; the result keeps ``-inf`` where masked.
The float64 NumPy reference lives in :mod:`posenc.reference.contextual`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.checks import check_bool, check_int, check_tensor, compute_dtype
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, model_field
from posenc.encoding.base import ContextualEncoding


@dataclass(frozen=True)
class CoPEConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # d: size of each position embedding e[p]
    npos_max: int = 64  # P: positions are clamped to P - 1 (the paper uses block size + 1)
    scale_position_logits: bool = False  # divide z by sqrt(d): False = paper listing, True = released code

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=1)
        check_int("npos_max", self.npos_max, minimum=1)
        check_bool("scale_position_logits", self.scale_position_logits)


class CoPE(ContextualEncoding):
    r"""Contextual Position Encoding (Golovneva et al. 2024, https://arxiv.org/abs/2405.18719).

    .. math::
        g_{ij} = \sigma(\mathrm{logits}_{ij}),\quad
        p_{ij} = \sum_{t=j}^{i} g_{it},\quad
        z_{ij} = (p - \lfloor p\rfloor)\, q_i^\top e[\lceil p\rceil]
               + (1 - p + \lfloor p\rfloor)\, q_i^\top e[\lfloor p\rfloor],\quad
        \mathrm{logits}_{ij} \leftarrow \mathrm{logits}_{ij} + z_{ij}

    A key's position relative to query ``i`` is how many keys between it and the
    query the gates "count". Gates use the *scaled* logits ``q.k/sqrt(d)`` (the
    released code computes ``sigmoid(q k^T / sqrt(d))``), and masked entries
    (``-inf``) give gate 0; the sum runs over every unmasked key ``t >= j``, which is
    ``t = j..i`` under a causal mask. ``p`` is clamped to ``npos_max - 1``. ``z`` uses
    the unscaled query and is added to the scaled logits, as in the paper's listing;
    the released code instead adds it before the ``1/sqrt(d)`` scale, which is
    ``scale_position_logits=True``. One table ``e (P, d)`` is shared by the heads (as
    in that code) and initialised to zeros like it, so a fresh CoPE layer starts as
    NoPE and learns ``e`` from non-zero gradients.

    Positions are ignored by design: the hook receives none, because positions
    are computed from the content. A KV cache is still exact: the new query's
    logits over all cached keys are everything ``p`` needs. Gates and cumulative
    sums run in float32 at least, so bf16 models still count past 64 exactly.
    """

    Config = CoPEConfig
    config: CoPEConfig
    paper = (
        "Golovneva et al. 2024, Contextual Position Encoding: Learning to Count What's Important, "
        "https://arxiv.org/abs/2405.18719"
    )
    equation = (
        "g_ij = sigmoid(logits_ij); p_ij = sum_{t=j..i} g_it; "
        "z_ij = frac(p) q_i.e[ceil p] + (1 - frac(p)) q_i.e[floor p]; logits_ij + z_ij"
    )
    supports_kv_cache = True  # exact as long as the new query's logits cover all cached keys
    share_across_layers = False

    def __init__(self, config: CoPEConfig) -> None:
        super().__init__(config)
        self.pos_emb = nn.Parameter(torch.zeros(config.npos_max, config.head_dim))  # e: (P, d)

    def positions(self, logits: torch.Tensor) -> torch.Tensor:
        """Contextual positions ``p (b,h,i,j)``, clamped to ``npos_max - 1``, in float32 or wider."""
        check_tensor("logits", logits, ndim=4, floating=True)
        wide = compute_dtype(logits.dtype)
        gates = torch.sigmoid(logits.to(wide))  # (b, h, i, j); -inf -> exactly 0
        p = gates.flip(-1).cumsum(-1).flip(-1)  # p_ij = sum_{t >= j} g_it
        p = p.clamp(max=self.config.npos_max - 1)
        return torch.nan_to_num(p, nan=0.0)  # NaN logits stay NaN below; never a bad index

    def scores(self, q: torch.Tensor, k: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``q (b,h,i,d)``, ``k (b,h,j,d)``, ``logits (b,h,i,j)`` -> ``logits + z``, same shape."""
        check_tensor("q", q, ndim=4, floating=True)
        check_tensor("k", k, ndim=4, floating=True)
        check_tensor("logits", logits, ndim=4, floating=True)
        if q.shape[-1] != self.config.head_dim:
            raise PosencError(
                f"q has head size {q.shape[-1]} but the encoding has head_dim={self.config.head_dim}"
            )
        expected = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        if tuple(logits.shape) != expected:
            raise PosencError(f"logits must have shape (b, h, i, j) = {expected}, got {tuple(logits.shape)}")
        p = self.positions(logits)  # (b, h, i, j)
        lower = p.detach().floor()
        weight = (p - lower).to(q.dtype)  # differentiable: the only path from gates to z
        per_position = q @ self.pos_emb.to(q.dtype).T  # q_i . e[p] for p = 0..P-1: (b, h, i, P)
        z_ceil = per_position.gather(-1, p.detach().ceil().long())  # (b, h, i, j)
        z_floor = per_position.gather(-1, lower.long())
        z = weight * z_ceil + (1 - weight) * z_floor
        if self.config.scale_position_logits:
            z = z / math.sqrt(self.config.head_dim)
        return logits + z.to(logits.dtype)
