"""Relative encodings: content-dependent terms computed inside attention.

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim,
r size of Transformer-XL's sinusoid R, m distinct relative distances (table rows).

Both schemes return an *unscaled* ``(b, h, i, j)`` term that attention adds to
``q @ k^T`` before the ``1/sqrt(d)`` scale; Shaw also adds ``values(probs)`` to
``probs @ v``. Positions are explicit integer tensors (``None`` = ``arange``), so
KV-cache offsets, packed documents and cross-attention are all "other positions".

The float64 NumPy references (direct O(b*h*i*j*d) form) live in
:mod:`posenc.reference.relative`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.checks import check_bool, check_float, check_int, check_tensor
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, model_field
from posenc.core.positions import Positions, as_positions
from posenc.core.sincos import SinCosCache, inverse_frequencies
from posenc.encoding.base import PaperSetting, RelativeEncoding


def check_qk(q: torch.Tensor, k: torch.Tensor, *, head_dim: int, num_heads: int) -> tuple[int, int, int, int]:
    """Validate ``q (b,h,i,d)`` and ``k (b,h,j,d)`` against the config; return ``(b, h, i, j)``."""
    check_tensor("q", q, ndim=4, floating=True)
    check_tensor("k", k, ndim=4, floating=True)
    if q.shape[-1] != head_dim:
        raise PosencError(f"q has head size {q.shape[-1]} but the encoding has head_dim={head_dim}")
    if q.shape[1] != num_heads:
        raise PosencError(f"q has {q.shape[1]} heads but the encoding has num_heads={num_heads}")
    if k.shape[0] != q.shape[0] or k.shape[1] != q.shape[1] or k.shape[-1] != q.shape[-1]:
        raise PosencError(
            f"k must have shape (b, h, j, d) matching q {tuple(q.shape)} in b, h and d, got {tuple(k.shape)}"
        )
    return q.shape[0], q.shape[1], q.shape[2], k.shape[2]


def _positions(
    q_positions: torch.Tensor | Positions | None,
    k_positions: torch.Tensor | Positions | None,
    *,
    batch: int,
    num_queries: int,
    num_keys: int,
    device: torch.device,
) -> tuple[Positions, Positions]:
    """Check both (trusted when already :class:`~posenc.core.positions.Positions`): ``(b|1, i)``, ``(b|1, j)``."""
    qp = as_positions(q_positions, num_queries, batch=batch, device=device, name="q_positions")
    kp = as_positions(k_positions, num_keys, batch=batch, device=device, name="k_positions")
    return qp, kp


# ---------------------------------------------------------------------------
# Shaw et al. 2018: learned vectors for clipped relative distances.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ShawConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # d: size of each a^K / a^V vector
    num_heads: int = model_field("num_heads")  # h: checked against q; sizes the tables when not shared
    max_relative_distance: int = 16  # k: distances j - i are clipped to [-k, k] -> 2k+1 rows
    values: bool = True  # also learn a^V, added to the attention output (the paper does)
    shared_across_heads: bool = True  # one table for all heads, as in the paper (sec. 3.3)

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=1)
        check_int("num_heads", self.num_heads, minimum=1)
        check_int("max_relative_distance", self.max_relative_distance, minimum=0)
        check_bool("values", self.values)
        check_bool("shared_across_heads", self.shared_across_heads)


class Shaw(RelativeEncoding):
    r"""Learned relative key/value vectors (Shaw et al. 2018, https://arxiv.org/abs/1803.02155).

    .. math::
        e_{ij} = \frac{q_i (k_j + a^K_{ij})^\top}{\sqrt{d}},\qquad
        z_i = \sum_j \alpha_{ij} (v_j + a^V_{ij}),\qquad
        a^K_{ij} = w^K_{\mathrm{clip}(j-i,\,k)},\ a^V_{ij} = w^V_{\mathrm{clip}(j-i,\,k)}

    ``scores`` returns ``q_i . a^K_ij``; ``values`` returns ``sum_j alpha_ij a^V_ij``.
    The paper shares both tables across heads (and we do by default); set
    ``shared_across_heads=False`` for one table per head. Distances beyond ``k`` all
    share the edge row, which is what lets the model run on longer inputs.

    Efficient form: ``q @ W^K^T`` is computed once per table row, ``(b,h,i,2k+1)``,
    then each pair gathers its row, O(b*h*i*(2k+1)*d + b*h*i*j). ``values`` does
    the transpose: scatter-add the probabilities into their rows, then one matmul
    with ``W^V``. Initialisation (the paper gives none): N(0, 1/d), so a row has
    about unit norm.
    """

    Config = ShawConfig
    config: ShawConfig
    paper = "Shaw et al. 2018, Self-Attention with Relative Position Representations, https://arxiv.org/abs/1803.02155"
    translation_invariant = True  # scores see the clipped distance q_pos - k_pos only
    equation = (
        "e_ij = q_i (k_j + a^K_ij)^T / sqrt(d); z_i = sum_j alpha_ij (v_j + a^V_ij); "
        "a^{K,V}_ij = w^{K,V}[clip(j - i, -k, k)]"
    )
    supports_kv_cache = True  # a new query only needs its own distances to the cached keys
    share_across_layers = False
    paper_setting = PaperSetting(
        source="tensor2tensor, where Shaw et al. built on the Transformer, scales every model's token "
        "embeddings by sqrt(d_model) (a codebase default, not the encoding's); it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )

    def __init__(self, config: ShawConfig) -> None:
        super().__init__(config)
        rows = 2 * config.max_relative_distance + 1
        shape = (
            (rows, config.head_dim)
            if config.shared_across_heads
            else (config.num_heads, rows, config.head_dim)
        )
        std = config.head_dim**-0.5
        self.key_table = nn.Parameter(torch.randn(shape) * std)  # w^K: (2k+1, d) or (h, 2k+1, d)
        if config.values:
            self.value_table = nn.Parameter(torch.randn(shape) * std)  # w^V
        else:
            self.register_parameter("value_table", None)
        self.has_values = config.values  # per instance: the config decides

    def buckets(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """Table row per pair, ``clip(j - i, -k, k) + k``: ``(b|1, i), (b|1, j) -> (b|1, i, j)``."""
        k = self.config.max_relative_distance
        return (k_positions[:, None, :] - q_positions[:, :, None]).clamp(-k, k) + k

    def _table(self, table: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(1|h, 2k+1, d)`` in ``dtype``, broadcasting over heads when shared."""
        table = table.to(dtype)
        return table[None] if self.config.shared_across_heads else table

    def scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor:
        """``q (b,h,i,d)``, ``k (b,h,j,d)`` -> ``q_i . a^K_ij``: ``(b, h, i, j)``, unscaled."""
        b, h, i, j = check_qk(q, k, head_dim=self.config.head_dim, num_heads=self.config.num_heads)
        qp, kp = _positions(q_positions, k_positions, batch=b, num_queries=i, num_keys=j, device=q.device)
        per_row = q @ self._table(self.key_table, q.dtype).transpose(-1, -2)  # (b, h, i, 2k+1)
        index = self.buckets(qp.tensor, kp.tensor)[:, None].expand(b, h, i, j)  # (b, h, i, j)
        return per_row.gather(-1, index)

    def values(
        self,
        probs: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor | None:
        """``probs (b,h,i,j)`` -> ``sum_j probs_ij a^V_ij``: ``(b, h, i, d)``; None without a^V."""
        if self.value_table is None:
            return None
        check_tensor("probs", probs, ndim=4, floating=True)
        b, h, i, j = probs.shape
        if h != self.config.num_heads:
            raise PosencError(f"probs has {h} heads but the encoding has num_heads={self.config.num_heads}")
        qp, kp = _positions(q_positions, k_positions, batch=b, num_queries=i, num_keys=j, device=probs.device)
        index = self.buckets(qp.tensor, kp.tensor)[:, None].expand(b, h, i, j)  # (b, h, i, j)
        rows = 2 * self.config.max_relative_distance + 1
        per_row = probs.new_zeros(b, h, i, rows).scatter_add(-1, index, probs)  # (b, h, i, 2k+1)
        return per_row @ self._table(self.value_table, probs.dtype)  # (b, h, i, d)


# ---------------------------------------------------------------------------
# Transformer-XL (Dai et al. 2019): sinusoid of the distance, projected per head.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerXLConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # d
    num_heads: int = model_field("num_heads")  # h: u, v and W_R are per head
    rel_dim: int | None = None  # r, size of the sinusoid R; None -> num_heads * head_dim (d_model)
    base: float = 10000.0  # R's wavelengths run from 2*pi to base*2*pi

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=1)
        check_int("num_heads", self.num_heads, minimum=1)
        if self.rel_dim is not None:
            check_int("rel_dim", self.rel_dim, minimum=2, even=True)
        elif (self.num_heads * self.head_dim) % 2:
            raise PosencError(
                "rel_dim defaults to num_heads * head_dim, which must be even; "
                f"got {self.num_heads} * {self.head_dim}; pass an even rel_dim"
            )
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)

    @property
    def sinusoid_dim(self) -> int:
        return self.rel_dim if self.rel_dim is not None else self.num_heads * self.head_dim


class TransformerXL(RelativeEncoding):
    r"""Transformer-XL relative attention (Dai et al. 2019, https://arxiv.org/abs/1901.02860, sec. 3.3).

    .. math::
        A^{rel}_{ij} = \underbrace{q_i^\top k_j}_{(a)} + \underbrace{q_i^\top W_R R_{i-j}}_{(b)}
                     + \underbrace{u^\top k_j}_{(c)} + \underbrace{v^\top W_R R_{i-j}}_{(d)}

    ``scores`` returns (b) + (c) + (d) = ``(q_i + v) . W_R R_{i-j} + u . k_j``; attention
    adds (a). ``R_delta = [sin(delta f), cos(delta f)]``, ``f_t = base^(-2t/r)``, is fixed;
    ``u, v (h, d)`` and ``W_R (h, d, r)`` are learned (init N(0, 0.02) like the paper's code).

    Dimension of R: ``r = rel_dim``, by default ``num_heads * head_dim`` (= d_model in the
    usual layout), as in the paper's code where ``R`` has d_model entries and ``W_R`` is a
    ``d_model -> heads * head_dim`` linear map. Halves are concatenated ``[sin | cos]`` like
    that code (a fixed permutation, absorbed by the learned ``W_R``). ``R`` is built in
    float64 from integer distances (cached per ``|delta|``), cast to the compute dtype last.

    The relative shift. The paper computes (b)+(d) for every query against all
    distances ``R_{L-1} .. R_0`` at once, an ``(i, m)`` matrix, then "shifts" it (pad a
    zero column, reshape, drop a row) so row ``i`` slides left by ``i_len - 1 - i`` and
    entry ``(i, j)`` lands on distance ``i - j``. That trick needs contiguous positions.
    Here the shift is an explicit gather, valid for any positions: take the ``m``
    distinct distances ``qp_i - kp_j``, project each ``R`` once (``P = W_R R``, ``(h, m, d)``),
    score every query against every distinct distance, ``(b, h, i, m)``, and gather
    entry ``(i, j)`` from the column of its distance. For contiguous positions (also
    with a cache offset or packed documents) the distances fill a range of
    ``m <= i + j - 1`` values, the paper's cost, found without sorting. Sparse
    positions (e.g. randomized positions) can give up to ``b*i*j`` distinct
    distances; when ``m * d > j * r`` we use the direct form instead,
    ``(W_R^T (q_i + v)) . R_{i-j}`` per pair, O(b*h*i*j*r), which is then cheaper
    than scoring every distance, O(b*h*i*m*d).
    """

    Config = TransformerXLConfig
    config: TransformerXLConfig
    translation_invariant = True  # scores see the distance q_pos - k_pos only
    paper = (
        "Dai et al. 2019, Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context, "
        "https://arxiv.org/abs/1901.02860"
    )
    equation = "A_ij = q_i.k_j + q_i.W_R R_{i-j} + u.k_j + v.W_R R_{i-j}; R sinusoid of i - j"
    supports_kv_cache = True  # memory / cache keys simply carry their own (earlier) positions
    share_across_layers = False
    paper_setting = PaperSetting(
        source="Dai et al.'s code scales token embeddings by sqrt(d_model) for every model it trains (not "
        "stated in the paper); it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )

    def __init__(self, config: TransformerXLConfig) -> None:
        super().__init__(config)
        h, d, r = config.num_heads, config.head_dim, config.sinusoid_dim
        self.u = nn.Parameter(torch.randn(h, d) * 0.02)  # global content bias (paper's u)
        self.v = nn.Parameter(torch.randn(h, d) * 0.02)  # global position bias (paper's v)
        self.w_r = nn.Parameter(torch.randn(h, d, r) * 0.02)  # W_{k,R}: R (r) -> key space (d)
        self._sincos = SinCosCache(
            inverse_frequencies(r, config.base)
        )  # (r/2,)  # float64 table of |delta|, a plain attribute

    def sinusoid(self, distance: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``R_delta = [sin(delta f) | cos(delta f)]``: ``(...) int -> (..., r)`` in ``dtype``."""
        if torch.compiler.is_compiling():  # no table sized from the values inside a graph
            return self._sinusoid(distance, None, dtype)
        return self._sinusoid(distance, int(distance.abs().max()) + 1 if distance.numel() else 0, dtype)

    def _sinusoid(self, distance: torch.Tensor, bound: int | None, dtype: torch.dtype) -> torch.Tensor:
        """:meth:`sinusoid` for distances with ``|delta| < bound`` (None: unknown, computed directly)."""
        magnitude = Positions(distance.abs().reshape(1, -1), bound)
        cos, sin = self._sincos.lookup(magnitude, torch.float64)  # even/odd in delta
        cos, sin = cos.view(*distance.shape, -1), sin.view(*distance.shape, -1)
        sin = sin * distance.sign().to(torch.float64)[..., None]
        return torch.cat([sin.to(dtype), cos.to(dtype)], dim=-1)

    def scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor:
        """``q (b,h,i,d)``, ``k (b,h,j,d)`` -> terms (b)+(c)+(d): ``(b, h, i, j)``, unscaled."""
        b, h, i, j = check_qk(q, k, head_dim=self.config.head_dim, num_heads=self.config.num_heads)
        qp, kp = _positions(q_positions, k_positions, batch=b, num_queries=i, num_keys=j, device=q.device)
        distance = qp.tensor[:, :, None] - kp.tensor[:, None, :]  # (b|1, i, j): i - j
        if distance.numel() == 0:
            return q.new_zeros(b, h, i, j)
        # The distances lie in a range known without reading them: i + j - 1 values for
        # contiguous positions (arange, cache offset), (-kb, qb) from the bounds otherwise.
        if qp.start is not None and kp.start is not None:
            lowest, count = qp.start - (kp.start + j - 1), i + j - 1
        elif qp.bound is not None and kp.bound is not None:
            lowest, count = qp.low - (kp.bound - 1), qp.bound + kp.bound - 1 - qp.low - kp.low
        else:  # explicit positions inside torch.compile: no range, the per-pair form
            lowest, count = 0, None
        if count is not None and count > distance.numel():  # sparse positions: fewer pairs than
            lowest, count = 0, None  # distances in the range, so R per pair, not per distance
        if count is not None:
            distinct = torch.arange(lowest, lowest + count, device=q.device)  # (m,)
            index = distance - lowest  # (b|1, i, j)
        else:
            distinct, index = (
                distance.reshape(-1),
                torch.arange(distance.numel(), device=q.device).view(distance.shape),
            )
        largest = None if count is None else max(abs(lowest), abs(lowest + count - 1)) + 1
        r_rows = self._sinusoid(distinct, largest, q.dtype)  # R per distance: (m, r)
        w_r = self.w_r.to(q.dtype)  # (h, d, r)
        qv = q + self.v.to(q.dtype)[None, :, None, :]  # (b, h, i, d): (b) and (d) share W_R R
        # Cost: scoring every distance b*h*i*m*d vs the per-pair form b*h*i*j*r; take the cheaper.
        if (
            count is not None and count * q.shape[-1] <= j * w_r.shape[-1]
        ):  # relative-shift regime: score, gather
            p = r_rows @ w_r.transpose(-1, -2)  # W_R R per distance: (h, m, d)
            per_distance = qv @ p.transpose(-1, -2)  # (b, h, i, m)
            position = per_distance.gather(-1, index[:, None].expand(b, h, i, j))  # (b, h, i, j)
        else:  # many distinct distances: the direct form, (W_R^T (q_i + v)) . R_{i-j} per pair
            qr = (qv @ w_r).transpose(1, 2)  # (b, i, h, r)
            r_pairs = r_rows.index_select(0, index.flatten()).view(*index.shape, -1)  # (b|1, i, j, r)
            position = (qr @ r_pairs.transpose(-1, -2)).transpose(1, 2)  # (b, i, h, j) -> (b, h, i, j)
        content = (self.u.to(q.dtype)[None, :, None, :] * k).sum(-1)  # (c) u . k_j: (b, h, j)
        return position + content[:, :, None, :]
