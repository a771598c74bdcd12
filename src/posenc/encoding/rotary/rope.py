"""Rotary positional encodings: rotate queries and keys by position-dependent angles.

Axis legend: b batch, h heads, i query positions, j key positions, n sequence,
d head_dim, r rotary_dim (the leading block of the head that is rotated), r/2 pairs.

Two members:

* :class:`RoPE`  (Su et al. 2021) -- plain rotation, plus every context-extension
  scaling of :mod:`posenc.encoding.rotary.scaling`, swappable at evaluation time.
* :class:`XPos`  (Sun et al. 2022) -- rotation times a per-pair exponential decay.

Pair layouts (which features form a rotated pair) are named, ``"half"`` (HF / GPT-NeoX)
or ``"interleaved"`` (Meta / GPT-J), see :mod:`posenc.kernels.rotation`, which also holds the
plain rotation :func:`apply_rotary` that the fused kernel must equal.

:func:`permute_qk_weight` converts projection weights from one to the other.

Numerics: angles ``position * inv_freq`` come from integer positions in float64
(:class:`posenc.core.sincos.SinCosCache`), are cached, and are cast last. The rotation
itself runs in at least float32 and the result is cast back to the input dtype,
so a bfloat16 model still tells position 8191 from 8190.

The float64 NumPy references are in :mod:`posenc.reference.rotary`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from posenc.core.checks import (
    SEQ_AXIS,
    check_choice,
    check_float,
    check_int,
    check_tensor,
    check_tensor_layout,
    to_layout,
)
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.core.positions import Positions, as_positions, joint_bound
from posenc.core.sincos import SinCosCache, grown_table, inverse_frequencies
from posenc.encoding.base import PaperSetting, RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.kernels.fused_rope import apply_rotary_fused, rotate_rows, rotate_trusted, table_dtype
from posenc.kernels.rotation import LAYOUTS, apply_rotary, layout_permutation, permute_qk_weight
from posenc.reference import rotary as reference

# ---------------------------------------------------------------------------
# The fast apply path; it must equal the plain one (posenc.kernels.rotation.apply_rotary).
# ---------------------------------------------------------------------------


def apply_rotary_fast(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str, rotary_dim: int
) -> torch.Tensor:
    """:func:`apply_rotary` in one memory pass, result cast to ``x.dtype``.

    Uses the compiled kernel of :mod:`posenc.kernels.fused_rope` (forward and backward; bitwise
    equal to ``apply_rotary(x.to(wide), ...).to(x.dtype)``) and falls back to exactly that,
    with one log line, when the kernel is unavailable or cannot take the call.
    """
    return apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=rotary_dim)


def _check_rotary_dim(rotary_dim: Any, head_dim: int, name: str = "rotary_dim") -> int:
    return check_int(name, rotary_dim, minimum=2, maximum=head_dim, even=True)


# ---------------------------------------------------------------------------
# RoPE.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoPEConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    base: float = 10000.0  # theta_i = base^(-2i/r)
    layout: str = "half"  # "half" (HF / GPT-NeoX) or "interleaved" (Meta / GPT-J)
    rotary_dim: int | None = None  # rotate only the leading block of this size (GPT-NeoX / GPT-J)
    partial_rotary_factor: float = 1.0  # HF style: rotary_dim = int(head_dim * factor)
    scaling: dict | None = None  # HF-style rope_scaling dict with "rope_type" (see rope_scaling.py)
    max_position_embeddings: int | None = length_field(
        "context", default=None
    )  # training context; only read by scalings

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_choice("layout", self.layout, LAYOUTS)
        check_float("partial_rotary_factor", self.partial_rotary_factor, minimum=0.0, maximum=1.0)
        if self.max_position_embeddings is not None:
            check_int("max_position_embeddings", self.max_position_embeddings, minimum=1)
        # the scaling is parsed (filled as Hugging Face does, checked) once, here, and kept typed
        scaling = rope_scaling.Scaling.parse(
            self.scaling, dim=self.resolved_rotary_dim(), max_position_embeddings=self.max_position_embeddings
        )
        object.__setattr__(self, "_parsed_scaling", scaling)

    @property
    def parsed_scaling(self) -> rope_scaling.Scaling:
        """The scaling as the typed object parsed when this config was made."""
        return self.__dict__["_parsed_scaling"]

    def resolved_rotary_dim(self) -> int:
        """The rotated block size ``r`` from ``rotary_dim`` or ``partial_rotary_factor``."""
        from_factor = int(self.head_dim * self.partial_rotary_factor)
        if self.rotary_dim is None:
            if from_factor < 2 or from_factor % 2:
                raise PosencError(
                    f"partial_rotary_factor={self.partial_rotary_factor} gives rotary_dim "
                    f"int({self.head_dim} * {self.partial_rotary_factor}) = {from_factor}; "
                    f"it must be an even integer in [2, {self.head_dim}]"
                )
            return from_factor
        r = _check_rotary_dim(self.rotary_dim, self.head_dim)
        if self.partial_rotary_factor != 1.0 and from_factor != r:
            raise PosencError(
                f"rotary_dim={r} disagrees with partial_rotary_factor={self.partial_rotary_factor} "
                f"(int({self.head_dim} * {self.partial_rotary_factor}) = {from_factor}); give only one"
            )
        return r


class RoPE(RotaryEncoding):
    r"""Rotary position embedding (Su et al. 2021, RoFormer, https://arxiv.org/abs/2104.09864).

    Each pair of features ``(x_{2i}, x_{2i+1})`` (or ``(x_i, x_{i+r/2})`` in the
    ``"half"`` layout) of a query/key at position ``m`` is rotated by ``m theta_i``:

    .. math:: f(x, m) = R^d_{\Theta, m} x,\quad \theta_i = base^{-2i/r},\ i = 0..r/2-1

    so ``<f(q, m), f(k, n)> = Re[sum_i q_i conj(k_i) e^{i (m-n) theta_i}]`` depends on
    ``m - n`` only (eq. 16 of the paper). A ``scaling`` (HF ``rope_scaling`` dict)
    replaces ``theta`` and multiplies cos and sin by its ``attention_scaling``;
    :meth:`set_scaling` swaps it without retraining.
    """

    Config = RoPEConfig
    config: RoPEConfig
    supports_scaling = True
    paper = "Su et al. 2021, RoFormer: Enhanced Transformer with Rotary Position Embedding, https://arxiv.org/abs/2104.09864"
    equation = "f(x, m) = R(m Theta) x; theta_i = base^(-2i/d); <f(q,m), f(k,n)> = g(q, k, m - n)"
    share_across_layers = True
    paper_setting = PaperSetting(
        source="RoFormer (BERT-style), GPT-NeoX and LLaMA do not scale token embeddings; it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )

    def __init__(self, config: RoPEConfig) -> None:
        super().__init__(config)
        self.rotary_dim = config.resolved_rotary_dim()
        self._sincos: SinCosCache | None = None
        self._sincos_source: tuple[torch.Tensor, float] | None = None  # what _sincos was built from
        self.set_scaling(config.scaling)

    # -- scaling -------------------------------------------------------------

    def set_scaling(self, scaling: dict | rope_scaling.Scaling | None) -> None:
        """Swap the context-extension scaling (HF ``rope_scaling`` dict, a parsed
        :class:`~posenc.encoding.rotary.scaling.Scaling`, or None) in place; it is parsed and checked once."""
        if isinstance(scaling, rope_scaling.Scaling):
            scaling = scaling.to_dict()
        scaling = None if scaling is None else dict(scaling)
        self.config = dataclasses.replace(self.config, scaling=scaling)  # parses and checks it, once
        self._scaling = self.config.parsed_scaling
        self._dynamic = self._scaling.length_dependent
        self.translation_invariant = not self._dynamic  # dynamic frequencies follow the largest position
        # Static scalings are computed once here; dynamic ones again per call (seq_len known then).
        self._inv_freq, self.attention_scaling = self._compute(None)

    @property
    def cache_unrotated_keys(self) -> bool:  # RotaryEncoding's capability, set by the scaling
        """True when inv_freq depends on the current length (dynamic scalings): attention then
        caches keys before rotation and re-rotates them when the frequencies change."""
        return self._dynamic

    def _compute(self, seq_len: int | None) -> tuple[torch.Tensor, float]:
        inv_freq, attention_scaling = self._scaling.frequencies(base=self.config.base, seq_len=seq_len)
        inv_freq = torch.as_tensor(inv_freq, dtype=torch.float64).detach().cpu()  # (r/2,)
        if inv_freq.shape != (self.rotary_dim // 2,):
            raise PosencError(
                f"scaling {self._scaling!r} returned inv_freq of shape {tuple(inv_freq.shape)}; "
                f"expected ({self.rotary_dim // 2},)"
            )
        return inv_freq, float(attention_scaling)

    def frequencies(self, max_position: int) -> tuple[torch.Tensor, float]:
        """``(inv_freq (r/2,) float64, attention_scaling)`` for a call whose largest position
        is ``max_position``; only dynamic scalings look at it (seq_len = max_position + 1)."""
        if self._dynamic:
            return self._compute(max_position + 1)
        return self._inv_freq, self.attention_scaling

    def numpy_reference(self, q, k, q_positions, k_positions):
        """q and k rotated in float64 NumPy (:func:`posenc.reference.rotary.rope`) with this
        scaling's frequencies from its NumPy reference (:func:`posenc.encoding.rotary.scaling.reference`)."""
        seq_len = int(max(np.max(q_positions), np.max(k_positions))) + 1
        inv_freq, scale = self._scaling.reference(base=self.config.base, seq_len=seq_len)

        def rotate(x, positions):
            return reference.rope(
                x, np.asarray(positions)[:, None, :], layout=self.config.layout, rotary_dim=self.rotary_dim,
                inv_freq=inv_freq, attention_scaling=scale,
            )  # fmt: skip

        return rotate(q, q_positions), rotate(k, k_positions)

    # -- tables --------------------------------------------------------------

    def _table(self, inv_freq: torch.Tensor, attention_scaling: float = 1.0) -> SinCosCache:
        """The float64 sin/cos cache for ``inv_freq`` (times ``attention_scaling``), rebuilt only
        when either changes."""
        source, table = self._sincos_source, self._sincos
        if (
            source is not None
            and table is not None
            and source[0] is inv_freq
            and source[1] == attention_scaling
        ):
            return table  # static scalings: the same tensor every call (no module __setattr__ here)
        if (
            table is None
            or source is None
            or source[1] != attention_scaling
            or not torch.equal(source[0], inv_freq)
        ):
            table = self._sincos = SinCosCache(inv_freq, scale=attention_scaling)
        self._sincos_source = (inv_freq, attention_scaling)
        return table

    def table(self, bound: int | None) -> SinCosCache:
        """The sin/cos cache for a call whose positions are all ``< bound``.

        Static scalings ignore ``bound``. Dynamic ones need it (their frequencies depend on
        the length), so under ``torch.compile`` they need positions whose bound is known from
        shapes (positions=None, or a KV cache), not explicit position tensors.
        """
        if self._dynamic:
            if bound is None:
                raise PosencError(
                    f"RoPE scaling {self.config.scaling!r} depends on the largest position, which a "
                    "torch.compile graph cannot read from explicit positions; pass positions=None "
                    "(arange) or run this call eagerly"
                )
            if torch.compiler.is_compiling():  # frequencies traced from the length (shape)
                inv_freq, attention_scaling = self.frequencies(max(bound, 1) - 1)
                return SinCosCache(inv_freq, scale=attention_scaling)
            inv_freq, attention_scaling = self.frequencies(max(bound, 1) - 1)
            return self._table(inv_freq, attention_scaling)
        return self._table(self._inv_freq, self.attention_scaling)

    def rotation_key(self, bound: int | None) -> object:
        """The rotation used for positions ``< bound`` (the current sin/cos cache): keys rotated
        under the same key are still valid, so a KV cache of unrotated keys re-rotates only
        when it changes."""
        return self.table(bound)

    def cos_sin(
        self,
        positions: torch.Tensor | Positions,
        dtype: torch.dtype,
        *,
        inv_freq: torch.Tensor | None = None,
        attention_scaling: float | None = None,
        layout: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``positions.shape + (r/2,)`` in ``dtype``, times attention_scaling.

        Angles are float64 from integer positions; the cast to ``dtype`` comes last. With a
        tensor ``layout`` the tables broadcast against q/k of that layout (as transformers'
        ``unsqueeze_dim``): ``(b|1, 1, n, r/2)`` for ``"bhsd"``, ``(b|1, n, 1, r/2)`` for
        ``"bshd"``, ready for :func:`apply_rotary_fast`.
        """
        if layout is not None:
            check_tensor_layout(layout)
        if isinstance(positions, Positions):
            pos = positions
        else:
            check_tensor("positions", positions, ndim=(1, 2))
            pos = as_positions(positions, positions.shape[-1])
        if inv_freq is None:
            table = self.table(pos.bound)
        else:
            table = self._table(inv_freq, 1.0 if attention_scaling is None else attention_scaling)
        cos, sin = table.lookup(pos, dtype)
        if layout is not None:
            return to_layout(cos, layout), to_layout(sin, layout)
        if isinstance(positions, torch.Tensor) and positions.ndim == 1:
            return cos[0], sin[0]
        return cos, sin

    # -- the hook ------------------------------------------------------------

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        layout: str = "bhsd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q (b, h, i, d)`` and ``k (b, h, j, d)``; positions ``(b|1, i)``, ``(b|1, j)``.

        ``layout="bshd"`` takes ``q (b, i, h, d)``, ``k (b, j, h, d)`` (flash-attn, torchtune)
        and rotates them in place of memory order: the kernel reads and writes them strided,
        nothing is copied. q and k may have different lengths (KV cache, cross-attention) and
        head counts (grouped-query attention). Returns tensors of the same shapes, dtypes and
        layout. Tensor positions are checked (their length against the layout's sequence
        axis); a :class:`~posenc.core.positions.Positions` (what attention passes) is trusted.
        """
        return _in_layout(self._rotate_bhsd, q, k, q_positions, k_positions, self.config.head_dim, layout)

    def _rotate_bhsd(
        self, q: torch.Tensor, k: torch.Tensor, qp: Positions, kp: Positions
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bound = joint_bound(qp, kp)
        table = self.table(bound)  # one set of frequencies for q and k
        if (
            qp.start is not None and bound is not None and bound <= table.max_cached
            and q.dtype == k.dtype and same_positions(qp, kp)
        ):  # fmt: skip
            # contiguous positions (a training step, a decode step): rows of the table, by pointer
            cos, sin = table.rows(bound, q.device, table_dtype(q.dtype))
            q, k = rotate_rows(
                (q, k), cos, sin, qp.start, layout=self.config.layout, rotary_dim=self.rotary_dim
            )
            return q, k
        q_tables = table.lookup(qp, table_dtype(q.dtype), head_axis=True)  # (b|1, 1, i, r/2) each
        if same_positions(qp, kp) and q.dtype == k.dtype:  # self-attention: k reuses q's cos/sin
            k_tables = q_tables
        else:
            k_tables = table.lookup(kp, table_dtype(k.dtype), head_axis=True)
        q, k = rotate_trusted(
            ((q, *q_tables), (k, *k_tables)), layout=self.config.layout, rotary_dim=self.rotary_dim
        )
        return q, k


def same_positions(a: Positions, b: Positions) -> bool:
    """True when ``a`` and ``b`` are known to be equal without reading them."""
    if a is b or a.tensor is b.tensor:
        return True
    return a.start is not None and a.start == b.start and a.tensor.shape == b.tensor.shape


_AXES = {"bhsd": "(batch, heads, seq, dim)", "bshd": "(batch, seq, heads, dim)"}


def _in_layout(
    rotate_bhsd: Callable[
        [torch.Tensor, torch.Tensor, Positions, Positions], tuple[torch.Tensor, torch.Tensor]
    ],
    q,
    k,
    q_positions,
    k_positions,
    head_dim: int,
    layout: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary hook in either tensor layout: q/k and positions checked (:func:`_check_qk`),
    then ``rotate_bhsd`` on ``(b, h, n, d)``; a ``"bshd"`` input is viewed as that (strides,
    no copy) and returned in its own layout."""
    q, k, qp, kp = _check_qk(q, k, q_positions, k_positions, head_dim, layout)
    if layout == "bshd":
        q, k = rotate_bhsd(q.transpose(1, 2), k.transpose(1, 2), qp, kp)
        return q.transpose(1, 2), k.transpose(1, 2)
    return rotate_bhsd(q, k, qp, kp)


def _check_qk(
    q, k, q_positions, k_positions, head_dim: int, layout: str = "bhsd"
) -> tuple[torch.Tensor, torch.Tensor, Positions, Positions]:
    """Validate q/k (4-d in ``layout``) and their positions (trusted when already :class:`Positions`).

    Positions whose length is not the layout's sequence axis are refused, naming the
    parameter, the layout and both shapes: a (b, n, h, d) tensor passed as the default
    ``"bhsd"`` would otherwise rotate heads as if they were positions.
    """
    layout = check_tensor_layout(layout)
    q = check_tensor("q", q, ndim=4, floating=True)
    k = check_tensor("k", k, ndim=4, floating=True)
    if q.shape[-1] != head_dim or k.shape[-1] != head_dim:
        name, x = ("q", q) if q.shape[-1] != head_dim else ("k", k)
        raise PosencError(
            f"{name} has head_dim {x.shape[-1]} (shape {tuple(x.shape)}) but the encoding has "
            f"head_dim={head_dim}"
        )
    axis = SEQ_AXIS[layout]
    _check_seq_axis("q", q, "q_positions", q_positions, layout, axis)
    qp = as_positions(q_positions, q.shape[axis], batch=q.shape[0], device=q.device, name="q_positions")
    if k_positions is q_positions and k.shape[0] == q.shape[0] and k.shape[axis] == q.shape[axis]:
        return q, k, qp, qp  # one tensor for both: check it once
    _check_seq_axis("k", k, "k_positions", k_positions, layout, axis)
    kp = as_positions(k_positions, k.shape[axis], batch=k.shape[0], device=k.device, name="k_positions")
    return q, k, qp, kp


def _check_seq_axis(name: str, x: torch.Tensor, pos_name: str, positions, layout: str, axis: int) -> None:
    """Raise unless ``positions`` (if given) has one entry per step of ``x``'s sequence axis."""
    tensor = positions.tensor if isinstance(positions, Positions) else positions
    if not isinstance(tensor, torch.Tensor) or tensor.ndim not in (1, 2) or tensor.shape[-1] == x.shape[axis]:
        return  # None, or not a tensor / wrong rank: as_positions names the problem
    other = "bshd" if layout == "bhsd" else "bhsd"
    hint = (
        f"; if {name} is {_AXES[other]}, pass layout={other!r}"
        if tensor.shape[-1] == x.shape[SEQ_AXIS[other]]
        else ""
    )
    raise PosencError(
        f"{pos_name} has shape {tuple(tensor.shape)} ({tensor.shape[-1]} positions per row) but {name} "
        f"has shape {tuple(x.shape)}, whose sequence axis in layout={layout!r} {_AXES[layout]} is axis "
        f"{axis} of length {x.shape[axis]}{hint}"
    )


# ---------------------------------------------------------------------------
# xPos.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class XPosConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    base: float = 10000.0  # rotation frequencies theta_i = base^(-2i/d), as RoPE
    scale_base: float = length_field(
        "paper_length", default=512.0
    )  # decay length: exponent is position / scale_base
    gamma: float = 0.4  # zeta_i = (2i/d + gamma) / (1 + gamma)
    layout: str = "half"  # "half" (HF / GPT-NeoX) or "interleaved" (torchscale / GPT-J)
    scale_center: int = 0  # exponents use (position - scale_center); cancels in q.k (see docstring)

    def validate(self) -> None:
        check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_float("scale_base", self.scale_base, minimum=0.0, exclusive_minimum=True)
        check_float("gamma", self.gamma, minimum=0.0, exclusive_minimum=True)
        check_choice("layout", self.layout, LAYOUTS)
        check_int("scale_center", self.scale_center, minimum=0)


class XPos(RotaryEncoding):
    r"""xPos (Sun et al. 2022, A Length-Extrapolatable Transformer, https://arxiv.org/abs/2212.10554).

    RoPE's rotation times a per-pair exponential decay, reciprocal on q and k:

    .. math:: \tilde q_m = \zeta^{(m-c)/B} \odot R_m q,\quad \tilde k_n = \zeta^{-(n-c)/B} \odot R_n k,
              \quad \zeta_i = \frac{2i/d + \gamma}{1 + \gamma}

    so ``<q~_m, k~_n> = sum_i zeta_i^{(m-n)/B} (...)`` depends on ``m - n`` only and
    decays with distance (``zeta_i < 1``). ``B`` is ``scale_base`` (512), ``gamma`` 0.4.

    Offset convention: torchscale (``xpos_relative_position.py``) rotates by the
    absolute position but centres the exponent on the middle of the whole window,
    ``c = ceil(L/2)`` for ``L`` = cached + new tokens, recomputed every step, which keeps
    the factors near 1 but forces it to cache keys unrotated and re-scale all of them
    each step. Here ``c = scale_center`` is a fixed config value (default 0, the
    paper's formula), so rotated keys can be cached (``cache_unrotated_keys`` is False). The centre cancels in every score; raise it toward the middle of your
    positions if ``zeta^{-n/B}`` would overflow (float16 past ~4500 positions,
    float32 past ~36000 with the defaults).
    """

    Config = XPosConfig
    config: XPosConfig
    paper = "Sun et al. 2022, A Length-Extrapolatable Transformer, https://arxiv.org/abs/2212.10554"
    equation = (
        "q~_m = zeta^((m-c)/B) R_m q; k~_n = zeta^(-(n-c)/B) R_n k; zeta_i = (2i/d + gamma)/(1 + gamma)"
    )
    share_across_layers = (
        True  # cache_unrotated_keys stays False: the centre is fixed, rotated keys stay valid
    )
    translation_invariant = True  # the scales are reciprocal on q and k: scores see m - n only

    def __init__(self, config: XPosConfig) -> None:
        super().__init__(config)
        d = config.head_dim
        i = torch.arange(d // 2, dtype=torch.float64)
        self._sincos = SinCosCache(inverse_frequencies(d, config.base))  # (d/2,) as RoPE
        self.log_zeta = torch.log((2.0 * i / d + config.gamma) / (1.0 + config.gamma))  # (d/2,) float64
        self._steepest = float(self.log_zeta.min())  # pair 0's log zeta, the most negative
        self._scale_cast: dict[tuple[torch.device, float], torch.Tensor] = {}
        self._scale_table: dict[torch.device, torch.Tensor] = {}

    def scale(
        self, positions: torch.Tensor | Positions, dtype: torch.dtype, *, key: bool, layout: str | None = None
    ) -> torch.Tensor:
        """``zeta^(+-(n - c)/B)`` of shape ``positions.shape + (d/2,)`` in ``dtype`` (float64 maths).

        Rows for positions below 2^16 are cached in float64 per device; larger ones
        are computed on the fly. A tensor ``layout`` shapes the result as :meth:`RoPE.cos_sin`
        does (``(b|1, 1, n, d/2)`` for ``"bhsd"``, ``(b|1, n, 1, d/2)`` for ``"bshd"``).
        """
        if layout is not None:
            check_tensor_layout(layout)
        if isinstance(positions, Positions):
            return to_layout(self._scale(positions, key=key).to(dtype), layout)
        check_tensor("positions", positions, ndim=(1, 2))
        out = self._scale(as_positions(positions, positions.shape[-1]), key=key).to(dtype)
        if layout is not None:
            return to_layout(out, layout)
        return out[0] if positions.ndim == 1 else out

    def _scale(self, positions: Positions, *, key: bool) -> torch.Tensor:
        """Float64 ``zeta^(+-(n - c)/B)``, ``(b|1, n, d/2)``, for trusted positions."""
        sign = -1.0 if key else 1.0
        c, b = self.config.scale_center, self.config.scale_base
        device, bound = positions.tensor.device, positions.bound
        if bound is None or bound > self._sincos.max_cached:
            exponent = (positions.tensor.to(torch.float64)[..., None] - c) / b
            return torch.exp(sign * exponent * self.log_zeta.to(device))
        before = self._scale_table.get(device)
        table = grown_table(  # (size, d/2) float64 log-scale
            self._scale_table, device, bound, lambda n: ((n[:, None] - c) / b) * self.log_zeta.to(device),
            limit=self._sincos.max_cached,
        )  # fmt: skip
        if table is not before:
            self._scale_cast = {}
        cache_key = (device, sign)
        if cache_key not in self._scale_cast:
            self._scale_cast[cache_key] = torch.exp(sign * table)
        rows = self._scale_cast[cache_key]
        if positions.start is not None:
            return rows[None, positions.start : positions.start + positions.length]
        return F.embedding(positions.tensor, rows)

    def _check_overflow(self, positions: Positions, dtype: torch.dtype, *, key: bool) -> None:
        """Raise if the scale at the extreme positions (known without reading them) overflows ``dtype``.

        The largest factor is on pair 0 (the most negative ``log zeta``), at the largest
        position for keys and at the smallest for queries.
        """
        if positions.bound is None or not positions.length:
            return
        c, b = self.config.scale_center, self.config.scale_base
        extreme = positions.bound - 1 if key else positions.low
        log_scale = (extreme - c) / b * self._steepest * (-1.0 if key else 1.0)
        if log_scale > math.log(torch.finfo(dtype).max):  # would be inf, silently
            raise PosencError(
                f"{'k' if key else 'q'}_positions {'up to' if key else 'from'} {extreme} overflow xPos's "
                f"scale zeta^((n - scale_center) / scale_base) in {dtype}; set scale_center near the "
                f"middle of your positions (now {self.config.scale_center}) or raise scale_base"
            )

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        layout: str = "bhsd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate and scale ``q (b, h, i, d)`` up / ``k (b, h, j, d)`` down; positions ``(b|1, n)``.

        ``layout="bshd"``: ``q (b, i, h, d)``, ``k (b, j, h, d)``, rotated strided (no copy).
        """
        return _in_layout(self._rotate_bhsd, q, k, q_positions, k_positions, self.config.head_dim, layout)

    def _rotate_bhsd(
        self, q: torch.Tensor, k: torch.Tensor, qp: Positions, kp: Positions
    ) -> tuple[torch.Tensor, torch.Tensor]:
        items = []
        for x, pos, is_key in ((q, qp, False), (k, kp, True)):
            self._check_overflow(pos, x.dtype, key=is_key)
            dtype = table_dtype(x.dtype)
            cos, sin = self._sincos.lookup(pos, torch.float64)  # (b|1, n, d/2)
            s = self._scale(pos, key=is_key)  # (b|1, n, d/2), product in float64
            items.append((x, (cos * s).to(dtype)[:, None], (sin * s).to(dtype)[:, None]))  # (b|1, 1, n, d/2)
        q, k = rotate_trusted(tuple(items), layout=self.config.layout, rotary_dim=self.config.head_dim)
        return q, k


__all__ = [
    "LAYOUTS",
    "RoPE",
    "RoPEConfig",
    "XPos",
    "XPosConfig",
    "apply_rotary",
    "apply_rotary_fast",
    "layout_permutation",
    "permute_qk_weight",
]
