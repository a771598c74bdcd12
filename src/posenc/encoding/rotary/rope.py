"""RoPE: rotate queries and keys by position-dependent angles.

Axis legend: b batch, h heads, i query positions, j key positions, n sequence,
d head_dim, r rotary_dim (the leading block of the head that is rotated), r/2 pairs.

:class:`RoPE` (Su et al. 2021) is the plain rotation plus every context-extension scaling of
:mod:`posenc.encoding.rotary.scaling`, swappable at evaluation time (:meth:`RoPE.set_scaling`).
Its siblings in :mod:`posenc.encoding.rotary`: xPos (:mod:`~posenc.encoding.rotary.xpos`, rotation
times a per-pair exponential decay) and the multi-axis members
(:mod:`~posenc.encoding.rotary.rope_axial`).

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

import copy
import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from posenc.core.checks import (
    check_choice,
    check_float,
    check_int,
    check_tensor,
    check_tensor_layout,
    to_layout,
)
from posenc.core.errors import PosencError
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.core.positions import MAX_POSITION, Positions, as_positions, joint_bound
from posenc.core.sincos import SinCosCache
from posenc.encoding.base import PaperSetting, RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.encoding.rotary.hook import rotary_hook, rotate_by_table, same_positions
from posenc.kernels.fused_rope import apply_rotary_fused, rows_eager, table_dtype
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


#: The context a length-dependent scaling is probed at when the encoding states none.
PROBE_CONTEXT = 2048


def _scaling_for(
    scaling: dict | rope_scaling.Scaling | None, *, dim: int, base: float, max_position_embeddings: int | None
) -> rope_scaling.Scaling:
    """``scaling`` typed and checked for the rotated dimension ``dim``: a Scaling already checked
    for ``dim`` travels as it is (nothing is parsed again), anything else is parsed once, and a
    scaling from outside posenc is run for base ``base`` (:meth:`~posenc.encoding.rotary.scaling.Scaling.probe`:
    within the context, and a length-dependent one at the context and four times it), so that one
    that raises or returns NaN or a wrong shape is refused here, in one line naming it."""
    if isinstance(scaling, rope_scaling.Scaling) and scaling.dim == dim:
        return scaling
    parsed = rope_scaling.Scaling.parse(scaling, dim=dim, max_position_embeddings=max_position_embeddings)
    context = max_position_embeddings or PROBE_CONTEXT
    parsed.probe(base=base, lengths=(None, context, 4 * context) if parsed.length_dependent else (None,))
    return parsed


@dataclass(frozen=True)
class RoPEConfig(EncodingConfig):
    head_dim: int = model_field("head_dim")  # per-head feature size; even
    base: float = 10000.0  # theta_i = base^(-2i/r)
    layout: str = "half"  # "half" (HF / GPT-NeoX) or "interleaved" (Meta / GPT-J)
    rotary_dim: int | None = None  # rotate only the leading block of this size (GPT-NeoX / GPT-J)
    partial_rotary_factor: float = 1.0  # HF style: rotary_dim = int(head_dim * factor)
    # The context-extension scaling, held as given: an HF-style rope_scaling dict with "rope_type" (see
    # posenc.encoding.rotary.scaling), a typed Scaling (which equals the dict it stands for), or None
    # (plain RoPE); parsed_scaling is it typed, to_dict writes its dict.
    scaling: dict | rope_scaling.Scaling | None = None
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
        self.parsed_scaling  # noqa: B018  (the scaling is parsed, filled and checked once, here, and kept)

    @functools.cached_property
    def parsed_scaling(self) -> rope_scaling.Scaling:
        """The scaling typed: a cache, filled when the config is made (:meth:`validate` reads it) and
        kept, since a frozen config never changes its ``scaling``. A dict is parsed once (filled as
        Hugging Face fills it, every key checked for the rotated dimension); a Scaling already
        checked for that dimension is this very object; None is plain RoPE (nothing to parse)."""
        dim = self.resolved_rotary_dim()
        if self.scaling is None:
            return rope_scaling.Scaling("default", (), dim)
        return _scaling_for(
            self.scaling, dim=dim, base=self.base, max_position_embeddings=self.max_position_embeddings
        )

    def with_scaling(self, scaling: rope_scaling.Scaling) -> RoPEConfig:
        """This config holding ``scaling``, a Scaling checked for its rotated dimension (nothing is
        parsed again: the new config's ``parsed_scaling`` is ``scaling`` itself)."""
        return dataclasses.replace(self, scaling=None if scaling.to_dict() is None else scaling)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values, the scaling as its Hugging Face style dict."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.scaling, rope_scaling.Scaling):
            data["scaling"] = self.scaling.to_dict()
        return copy.deepcopy(data)

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
    _config: RoPEConfig  # the config made last (see :attr:`config`)
    _config_for: rope_scaling.Scaling  # the scaling _config holds
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
        self._install(config.parsed_scaling)  # parsed once, by the config

    @property
    def config(self) -> RoPEConfig:
        """The config: the one this encoding was built with, holding the scaling installed now (a
        config is made for a new scaling when it is read, not by :meth:`set_scaling`: a frozen config
        cannot change, and the forward path never reads it)."""
        built = self._config
        if self._config_for is not self._scaling:
            built = self._config = built.with_scaling(self._scaling)
            self._config_for = self._scaling
        return built

    @config.setter
    def config(self, value: RoPEConfig) -> None:
        self._config = value
        self._config_for = value.parsed_scaling

    # -- scaling -------------------------------------------------------------

    def set_scaling(self, scaling: dict | rope_scaling.Scaling | None) -> None:
        """Swap the context-extension scaling (HF ``rope_scaling`` dict, a parsed
        :class:`~posenc.encoding.rotary.scaling.Scaling`, or None) in place. A dict is parsed and
        checked once (:meth:`check_scaling`); a Scaling checked for this ``rotary_dim`` is installed
        as it is. The config is not rebuilt here (see :attr:`config`)."""
        self._install(self.check_scaling(scaling))

    def check_scaling(self, scaling: dict | rope_scaling.Scaling | None) -> rope_scaling.Scaling:
        """``scaling`` parsed and checked for this encoding (its ``rotary_dim`` and context), not
        installed; a Scaling already checked for this ``rotary_dim`` is returned as it is."""
        return _scaling_for(
            scaling,
            dim=self.rotary_dim,
            base=self._config.base,
            max_position_embeddings=self._config.max_position_embeddings,
        )

    def _install(self, scaling: rope_scaling.Scaling) -> None:
        """Use the parsed ``scaling`` from the next call on."""
        self._scaling = scaling
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
        # checked there: float64 (r/2,), finite and > 0; a scaling's own error names it
        inv_freq, attention_scaling = self._scaling.frequencies(base=self._config.base, seq_len=seq_len)
        return inv_freq.detach().cpu(), float(attention_scaling)

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
        inv_freq, scale = self._scaling.reference(base=self._config.base, seq_len=seq_len)

        def rotate(x, positions):
            return reference.rope(
                x, np.asarray(positions)[:, None, :], layout=self._config.layout, rotary_dim=self.rotary_dim,
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
                    f"RoPE scaling {self._scaling.to_dict()!r} depends on the largest position, which a "
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
        if q_positions is k_positions and layout == "bhsd":  # None for both, or one object for both
            rotated = self._rotate_run(q, k, q_positions)
            if rotated is not None:
                return rotated
        return rotary_hook(
            self._rotate_bhsd, q, k, q_positions, k_positions, head_dim=self._config.head_dim, layout=layout
        )

    def _rotate_run(self, q, k, positions) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The calls a training step and a decode step make: q and k of one length on the CPU, one
        run of positions ``start .. start + n - 1`` for both (None: from 0; a trusted
        :class:`Positions` that knows its start; or a one-element integer tensor, a decode step's
        position, read once), static frequencies, no autograd. Their table's rows go straight to
        the kernel (a rotation is then the foreign call plus microseconds). None for any other
        call, and for any position this does not accept: :func:`rotary_hook` checks and rotates
        those (the same bits), and names what is wrong."""
        if not (type(q) is torch.Tensor and type(k) is torch.Tensor and q.is_cpu and k.is_cpu):
            return None
        if self._dynamic or torch.compiler.is_compiling():
            return None
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return None
        if q.ndim != 4 or k.ndim != 4 or q.dtype != k.dtype or not q.is_floating_point():
            return None
        (q_batch, _, n, q_dim), (k_batch, _, k_n, k_dim) = q.shape, k.shape
        head_dim = self._config.head_dim
        if not n or k_n != n or q_dim != head_dim or k_dim != head_dim:
            return None
        start = _run_start(positions, n, q_batch, k_batch)
        if start is None:
            return None
        table = self._table(self._inv_freq, self.attention_scaling)
        if start + n > table.max_cached:
            return None
        cos, sin = table.rows(start + n, q.device, table_dtype(q.dtype))
        outs = rows_eager((q, k), cos, sin, start, interleaved=self._config.layout == "interleaved",
                          rotary_dim=self.rotary_dim)  # fmt: skip
        return None if outs is None else (outs[0], outs[1])

    def _rotate_bhsd(
        self, q: torch.Tensor, k: torch.Tensor, qp: Positions, kp: Positions
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bound = joint_bound(qp, kp)
        table = self.table(bound)  # one set of frequencies for q and k
        return rotate_by_table(
            q, k, qp, kp, table=table, start=qp.start, bound=bound, same=same_positions(qp, kp),
            lookup=lambda pos, dtype: table.lookup(pos, dtype, head_axis=True),
            layout=self._config.layout, rotary_dim=self.rotary_dim,
        )  # fmt: skip


def _run_start(positions, n: int, q_batch: int, k_batch: int) -> int | None:
    """``start`` when ``positions`` (shared by q and k, ``n`` per row) is known to be one run
    ``start .. start + n - 1`` in every row, read from at most one value; None when it is not
    known (or not valid: the checked path then says why)."""
    if positions is None:
        return 0
    if isinstance(positions, Positions):
        tensor, start = positions.tensor, positions.start
        rows = tensor.shape[0] if tensor.ndim == 2 else -1
        if start is None or tensor.shape[-1] != n or rows not in (1, q_batch) or rows not in (1, k_batch):
            return None
        return start
    if type(positions) is not torch.Tensor or positions.numel() != 1 or n != 1 or not positions.is_cpu:
        return None
    if positions.dtype not in (torch.int64, torch.int32) or positions.ndim not in (1, 2):
        return None
    value = int(positions.item())
    return value if 0 <= value <= MAX_POSITION else None


__all__ = [
    "LAYOUTS",
    "RoPE",
    "RoPEConfig",
    "apply_rotary",
    "apply_rotary_fast",
    "layout_permutation",
    "permute_qk_weight",
]
