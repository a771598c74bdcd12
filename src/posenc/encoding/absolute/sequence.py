"""Absolute positional encodings: a vector per position, combined with token embeddings.

Axis legend: b batch, n sequence, d d_model.

Every member is an :class:`~posenc.encoding.base.AdditiveEncoding`:
``embed(x (b, n, d), *, positions (b|1, n)) -> (b, n, d)``. Each class docstring
gives the paper and the equation; the float64 NumPy reference for each lives in
:mod:`posenc.reference.absolute` and the tests compare the two on full tensors.

| name                | PE(pos) (added to the token embedding x unless stated)          |
|---------------------|-----------------------------------------------------------------|
| ``sinusoidal``      | sin/cos of pos / base^(2i/d), interleaved                       |
| ``scaled_sinusoidal`` | g * sinusoidal(pos), one learned scalar g (init 1/sqrt(d))    |
| ``learned``         | row ``pos`` of a trained table (max_len rows, N(0, 0.02))       |
| ``hybrid``          | sinusoidal(pos) + learned residual table (init 0)               |
| ``complex_order``   | [r cos(w pos + theta) , r sin(w pos + theta)], r/w/theta from x (replaces x) |
| ``integer_index``   | pos itself in every dimension (the naive one, for teaching)     |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from posenc.core.checks import check_float, check_int, check_tensor, compute_dtype
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.core.positions import Positions, as_positions
from posenc.core.sincos import SinCosCache, inverse_frequencies
from posenc.encoding.base import AdditiveEncoding, PaperSetting
from posenc.reference import absolute as reference


class _HasDim(Protocol):
    @property
    def dim(self) -> int: ...


class _SinusoidConfig(_HasDim, Protocol):
    @property
    def base(self) -> float: ...


class _TableConfig(Protocol):
    @property
    def max_len(self) -> int: ...
    @property
    def extra_rows(self) -> int: ...


class _Absolute(AdditiveEncoding):
    """Shared plumbing: validate ``x`` and ``positions``, then add ``self._pe(positions)``.

    Subclasses implement ``_pe(positions (b|1, n), dtype) -> (b|1, n, d)``.
    """

    config: _HasDim  # every Config of the family has ``dim``; subclasses narrow the type

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        x = check_tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.config.dim:
            raise PosencError(f"x has feature size {x.shape[-1]} but the encoding has dim={self.config.dim}")
        return x

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """The positional vectors alone: ``positions (b, n)`` -> ``(b, n, d)`` in float32."""
        if not isinstance(positions, torch.Tensor):
            raise PosencTypeError(
                f"positions must be an integer torch.Tensor, got {type(positions).__name__}"
            )
        pos = as_positions(positions, positions.shape[-1] if positions.ndim else 0)
        return self._pe(pos, torch.float32).to(torch.float32)

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        """``x (b, n, d)`` -> ``x + PE(positions)`` of the same shape and dtype."""
        x = self._check_x(x)
        pos = as_positions(positions, x.shape[1], batch=x.shape[0], device=x.device)
        return x + self._pe(pos, compute_dtype(x.dtype)).to(x.dtype)


# ---------------------------------------------------------------------------
# Sinusoidal (Vaswani et al. 2017) and its scaled variant.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SinusoidalConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; even
    base: float = 10000.0  # wavelengths run from 2*pi to base*2*pi

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)


class Sinusoidal(_Absolute):
    r"""Fixed sinusoids (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, sec. 3.5).

    .. math:: PE_{(pos, 2i)} = \sin(pos / base^{2i/d}),\quad PE_{(pos, 2i+1)} = \cos(pos / base^{2i/d})

    Angles come from integer positions in float64 (cached in a
    :class:`~posenc.core.sincos.SinCosCache`), so position 10^6 is as exact in float32
    as position 1. Shapes: ``x (b, n, d)``, ``positions (b|1, n)``.
    """

    Config: ClassVar[type[EncodingConfig]] = SinusoidalConfig
    config: _SinusoidConfig  # SinusoidalConfig, or a subclass's config with dim and base
    paper = "Vaswani et al. 2017, Attention Is All You Need, https://arxiv.org/abs/1706.03762"
    equation = "PE(pos, 2i) = sin(pos / base^(2i/d)); PE(pos, 2i+1) = cos(pos / base^(2i/d))"
    share_across_layers = True
    paper_setting = PaperSetting(
        scale_embeddings=True,
        source="Vaswani et al. 2017, sec. 3.4: the embedding weights are multiplied by sqrt(d_model) "
        "(tensor2tensor and fairseq also initialise them N(0, 1/d_model); posenc's model keeps N(0, 0.02))",
    )

    def __init__(self, config: SinusoidalConfig) -> None:
        super().__init__(config)
        self._sincos = SinCosCache(inverse_frequencies(config.dim, config.base))

    def _sinusoid(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        cos, sin = self._sincos.lookup(positions, dtype)  # (b|1, n, d/2) each, float64 maths, cast last
        return torch.stack((sin, cos), dim=-1).flatten(-2)  # (b|1, n, d): sin at 2i, cos at 2i+1

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        return self._sinusoid(positions, dtype)

    def numpy_reference(self, x, positions):
        """``x + PE(positions)`` in float64 NumPy (:func:`posenc.reference.absolute.sinusoidal`)."""
        return x + reference.sinusoidal(positions, self.config.dim, self.config.base)


@dataclass(frozen=True)
class ScaledSinusoidalConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; even
    base: float = 10000.0  # as in sinusoidal
    init_scale: float | None = None  # initial value of the learned scalar g; None -> 1/sqrt(dim)

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        if self.init_scale is not None:  # bounded like init_std: larger ones overflow float32 to inf
            check_float("init_scale", self.init_scale, minimum=-1e6, maximum=1e6)


class ScaledSinusoidal(Sinusoidal):
    r"""Sinusoids times one learned scalar (Hua et al. 2022, FLASH, https://arxiv.org/abs/2202.10447).

    .. math:: PE(pos) = g \cdot \mathrm{sinusoidal}(pos),\quad g \text{ learned, } g_0 = d^{-1/2}

    "Transformer Quality in Linear Time" uses this scaled sinusoidal embedding;
    ``g`` starts at ``1/sqrt(dim)`` (as in x-transformers' ``ScaledSinusoidalEmbedding``)
    so the position signal starts with unit norm, like an embedding with
    ``O(1)`` entries scaled down, and the model learns how loud position is.
    """

    Config = ScaledSinusoidalConfig
    config: ScaledSinusoidalConfig
    paper = "Hua et al. 2022, Transformer Quality in Linear Time, https://arxiv.org/abs/2202.10447"
    equation = "PE(pos) = g * sinusoidal(pos), g a learned scalar initialised to 1/sqrt(d)"
    share_across_layers = False
    paper_setting = PaperSetting(
        scale_embeddings=False,
        source="Hua et al. 2022: a learned gain on the sinusoid (initialised at 1/sqrt(d_model)) sets how "
        "loud position is, instead of scaling the token embeddings",
    )

    def __init__(self, config: ScaledSinusoidalConfig) -> None:
        super().__init__(config)  # type: ignore[arg-type]
        init = config.dim**-0.5 if config.init_scale is None else config.init_scale
        self.scale = nn.Parameter(torch.tensor(float(init)))  # g, a 0-d tensor

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        return self._sinusoid(positions, dtype) * self.scale.to(dtype)

    def numpy_reference(self, x, positions):
        """``x + g * PE(positions)`` in float64 NumPy."""
        g = float(self.scale.detach())
        return x + reference.scaled_sinusoidal(positions, self.config.dim, g, self.config.base)


# ---------------------------------------------------------------------------
# Learned tables (BERT/GPT-2) and the sinusoid + learned-residual hybrid.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnedConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model
    max_len: int = length_field(
        "trained_rows", default=1024
    )  # rows meant to be trained: positions 0 .. max_len-1
    extra_rows: int = length_field(
        "extra_rows", default=0
    )  # opt-in rows past max_len (stay untrained if training stays below max_len)
    init_std: float = 0.02  # table ~ N(0, init_std^2), as BERT / GPT-2

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=1)
        check_int("max_len", self.max_len, minimum=1)
        check_int("extra_rows", self.extra_rows, minimum=0)
        check_float("init_std", self.init_std, minimum=0.0, maximum=1e6)  # larger overflows float32


class _TableMixin:
    """Row lookup with the max_len / extra_rows rule shared by learned and hybrid."""

    config: _TableConfig
    table: nn.Parameter

    def _rows(self, positions: Positions) -> torch.Tensor:
        """The table's rows for ``positions``: ``(b|1, n, d)``.

        Checked against the table without reading the positions when their bound fits (the
        usual case); only a bound past the table reads the largest position, to tell a
        conservative bound (left padding) from a real overflow.
        """
        rows = self.config.max_len + self.config.extra_rows
        bound = positions.bound
        if bound is None:  # torch.compile: a device-side check instead
            torch._assert_async((positions.tensor < rows).all(), f"positions must be < {rows} (max_len)")
        elif bound > rows:
            self._check_top(int(positions.tensor.max()), rows)
        if positions.start is not None:
            return self.table[None, positions.start : positions.start + positions.length]
        return F.embedding(positions.tensor.to(self.table.device), self.table)  # (b, n, d)

    def _check_top(self, top: int, rows: int) -> None:
        if top >= rows:
            if self.config.extra_rows:
                raise PosencError(
                    f"position {top} is past the table: max_len={self.config.max_len} plus "
                    f"extra_rows={self.config.extra_rows} gives valid positions [0, {rows - 1}]"
                )
            raise PosencError(
                f"position {top} >= max_len={self.config.max_len}: a learned table has no row for it. "
                f"Raise max_len, or opt in to extrapolation with extra_rows=N (N untrained rows past "
                f"max_len, e.g. to measure how a learned table fails on longer inputs)"
            )


class Learned(_TableMixin, _Absolute):
    r"""A trained table, one row per position (Gehring et al. 2017; BERT; GPT-2).

    .. math:: PE(pos) = E[pos],\quad E \in \mathbb{R}^{(max\_len + extra\_rows) \times d},\ E_0 \sim N(0, 0.02^2)

    Positions ``>= max_len`` raise ValueError unless the config sets
    ``extra_rows=N``, which allocates N more rows. Those rows only ever receive
    gradient if training uses positions past ``max_len``, so a benchmark that
    trains short and tests long sees the honest failure of an untrained row.
    """

    Config = LearnedConfig
    config: LearnedConfig
    paper = (
        "Gehring et al. 2017, Convolutional Sequence to Sequence Learning, https://arxiv.org/abs/1705.03122"
    )
    equation = "PE(pos) = E[pos], E a trained (max_len, d) table, init N(0, 0.02^2)"
    paper_setting = PaperSetting(
        source="GPT-2 and BERT: token and position tables both N(0, 0.02), neither scaled",
    )

    def __init__(self, config: LearnedConfig) -> None:
        super().__init__(config)
        rows = config.max_len + config.extra_rows
        self.table = nn.Parameter(torch.randn(rows, config.dim) * config.init_std)  # (rows, d)

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        return self._rows(positions)


@dataclass(frozen=True)
class HybridConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model; even
    max_len: int = length_field(
        "trained_rows", default=1024
    )  # rows of the learned residual: positions 0 .. max_len-1
    extra_rows: int = length_field(
        "extra_rows", default=0
    )  # opt-in rows past max_len (init 0, so untrained rows = pure sinusoid)
    base: float = 10000.0  # sinusoid base, as in sinusoidal
    init_std: float = 0.0  # residual table ~ N(0, init_std^2); 0 starts as the pure sinusoid

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_int("max_len", self.max_len, minimum=1)
        check_int("extra_rows", self.extra_rows, minimum=0)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)
        check_float("init_std", self.init_std, minimum=0.0, maximum=1e6)  # larger overflows float32


class Hybrid(_TableMixin, Sinusoidal):
    r"""Fixed sinusoid plus a learned residual table, combined by addition.

    .. math:: PE(pos) = \mathrm{sinusoidal}(pos) + R[pos],\quad R_0 = 0

    The residual ``R`` starts at zero, so the model starts as Vaswani et al.'s
    sinusoidal encoding and learns per-position corrections (the "hybrid of
    fixed and learned" that introductions to positional encoding list; Vaswani et al. 2017, sec. 3.5,
    report the two perform nearly identically). The table follows the same
    ``max_len`` / ``extra_rows`` rule as ``learned``; untrained extra rows stay 0,
    so past the trained range hybrid falls back to the pure sinusoid.
    """

    Config = HybridConfig
    config: HybridConfig
    paper = (
        "Vaswani et al. 2017 (sinusoid) + Gehring et al. 2017 (learned table), "
        "https://arxiv.org/abs/1706.03762, https://arxiv.org/abs/1705.03122"
    )
    equation = "PE(pos) = sinusoidal(pos) + R[pos], R a learned (max_len, d) table initialised to 0"
    share_across_layers = False
    paper_setting = PaperSetting(
        scale_embeddings=True,
        source="it starts as Vaswani et al.'s sinusoid, trained as theirs (sec. 3.4: token embeddings x sqrt(d_model))",
    )

    def __init__(self, config: HybridConfig) -> None:
        super().__init__(config)  # type: ignore[arg-type]
        rows = config.max_len + config.extra_rows
        self.table = nn.Parameter(torch.randn(rows, config.dim) * config.init_std)  # (rows, d)

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        residual = self._rows(positions)  # checks the table range first
        return self._sinusoid(positions, dtype) + residual.to(dtype)

    def numpy_reference(self, x, positions):
        """``x + sinusoidal(pos) + R[pos]`` in float64 NumPy (:func:`posenc.reference.absolute.hybrid`)."""
        table = self.table.detach().double().numpy()
        return x + reference.hybrid(positions, table, self.config.base)


# ---------------------------------------------------------------------------
# Complex order (Wang et al. 2020): content-dependent, replaces the embedding.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ComplexOrderConfig(EncodingConfig):
    dim: int = model_field(
        "d_model"
    )  # d_model; even: d/2 complex dimensions, output = [real half | imaginary half]

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)


class ComplexOrder(_Absolute):
    r"""Word order in complex embeddings (Wang et al., ICLR 2020, https://arxiv.org/abs/1912.12333).

    The paper embeds word ``j`` at position ``pos`` as a complex vector with a
    per-word amplitude ``r_j``, frequency ``w_j`` and initial phase ``theta_j``:

    .. math:: f(j, pos) = r_j \odot e^{i (w_j \cdot pos + \theta_j)} \in \mathbb{C}^{d/2}

    Here the hook receives the token embedding ``x (b, n, d)`` rather than a word
    id, so the three per-word vectors are learned linear maps of ``x``
    (``nn.Linear(d, d/2)`` each, with bias)::

        r     = x W_r + b_r           # (b, n, d/2) amplitude
        w     = x W_w + b_w           # (b, n, d/2) frequency (radians per position)
        theta = x W_theta + b_theta   # (b, n, d/2) initial phase
        phase = w * pos + theta       # computed in float64, pos the integer position
        out   = [r * cos(phase) | r * sin(phase)]   # (b, n, d): real half, imaginary half

    The output *replaces* ``x`` (it is the word's embedding, as in the paper),
    it is not added to it. Because it depends on content, :meth:`encode`
    raises NotImplementedError; use :meth:`embed`.
    """

    Config = ComplexOrderConfig
    config: ComplexOrderConfig
    paper = (
        "Wang et al. 2020, Encoding Word Order in Complex Embeddings (ICLR), https://arxiv.org/abs/1912.12333"
    )
    equation = "f(j, pos) = r_j * exp(i (w_j pos + theta_j)); output [Re | Im], r, w, theta linear in x"

    def __init__(self, config: ComplexOrderConfig) -> None:
        super().__init__(config)
        half = config.dim // 2
        self.amplitude = nn.Linear(config.dim, half)  # r
        self.frequency = nn.Linear(config.dim, half)  # w
        self.phase = nn.Linear(config.dim, half)  # theta

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            "complex_order is content-dependent (r, w, theta come from the token embedding); "
            "call embed(x, positions=...) instead of encode(positions)"
        )

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        """``x (b, n, d)`` -> ``[r cos(w pos + theta) | r sin(w pos + theta)]`` of shape ``(b, n, d)``."""
        x = self._check_x(x)
        positions = as_positions(positions, x.shape[1], batch=x.shape[0], device=x.device).tensor
        dtype = self.amplitude.weight.dtype
        h = x.to(dtype)
        r, w, theta = self.amplitude(h), self.frequency(h), self.phase(h)  # (b, n, d/2) each
        pos = positions.to(torch.float64)[..., None]  # (b|1, n, 1), exact integers
        phase = w.double() * pos + theta.double()  # (b, n, d/2), float64 so large pos keep digits
        real = r * torch.cos(phase).to(dtype)
        imag = r * torch.sin(phase).to(dtype)
        return torch.cat((real, imag), dim=-1).to(x.dtype)  # (b, n, d)


# ---------------------------------------------------------------------------
# The naive integer index, for teaching.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IntegerIndexConfig(EncodingConfig):
    dim: int = model_field("d_model")  # d_model

    def validate(self) -> None:
        check_int("dim", self.dim, minimum=1)


class IntegerIndex(_Absolute):
    r"""The naive encoding: add the raw position to every dimension (for teaching only).

    .. math:: PE(pos)_k = pos \quad \text{for every } k

    Introductions to positional encoding argue against it. Its values are unbounded:
    position 1000 swamps embeddings of size ~1. It is still "relative" in the textbook
    sense: ``PE(pos + k) = PE(pos) + k`` is a fixed affine map (a linear layer with a
    bias can apply it), though no linear map without the offset fits every position
    (least-squares residual 3.4e-3 over positions 0..255 at d_model 64). Magnitude, not
    the missing map, is what rules it out. It is here so the benchmark and the plots
    can show the failure. (Vaswani et al. 2017 motivate bounded sinusoids instead.)
    Exact in float32 up to 2^24.
    """

    Config = IntegerIndexConfig
    config: IntegerIndexConfig
    paper = (
        "Naive baseline (argued against in Vaswani et al. 2017, sec. 3.5), https://arxiv.org/abs/1706.03762"
    )
    equation = "PE(pos)_k = pos for every dimension k"
    share_across_layers = True

    def _pe(self, positions: Positions, dtype: torch.dtype) -> torch.Tensor:
        tensor = positions.tensor
        return tensor.to(dtype)[..., None].expand(*tensor.shape, self.config.dim)

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        x = self._check_x(x)
        pos = as_positions(positions, x.shape[1], batch=x.shape[0], device=x.device)
        out = x + self._pe(pos, compute_dtype(x.dtype)).to(x.dtype)
        top = (pos.bound or 1) - 1  # unknown under torch.compile: no host check there
        if top > torch.finfo(x.dtype).max:  # the raw position itself would be inf
            raise PosencError(
                f"positions up to {top} do not fit in {x.dtype} (max {torch.finfo(x.dtype).max:g}); "
                "integer_index adds the raw position, use a wider dtype"
            )
        return out


# The sequence members by registry name: posenc.registry lists them among its built-ins, and
# hierarchical draws its inner encodings from them.
SEQUENCE_MEMBERS: dict[str, type[_Absolute]] = {
    "sinusoidal": Sinusoidal,
    "scaled_sinusoidal": ScaledSinusoidal,
    "learned": Learned,
    "hybrid": Hybrid,
    "complex_order": ComplexOrder,
    "integer_index": IntegerIndex,
}
