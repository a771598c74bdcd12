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

The float64 NumPy reference of every scheme lives in :mod:`posenc.reference.bias`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posenc.checks import check_bool, check_float, check_int, is_integer_dtype
from posenc.config import EncodingConfig, length_field, model_field
from posenc.encoding import BiasEncoding, PaperSetting
from posenc.errors import PosencError, PosencTypeError
from posenc.positions import Positions, resolve_positions
from posenc.tables import grown_table

Params = dict[str, torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _check_index_tensor(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise PosencTypeError(f"{name} must be an integer torch.Tensor, got {type(value).__name__}")
    if not is_integer_dtype(value.dtype):
        raise PosencTypeError(f"{name} must have an integer dtype (int32/int64), got {value.dtype}")
    return value.long()


class _BiasFamily(BiasEncoding):
    """Shared machinery: validation, dtype policy, dense cache, FlexAttention score_mod."""

    #: True for parameter-free encodings, whose dense bias for default positions is cached.
    cache_dense = False
    _dense_cache: tuple[tuple[int, int, torch.device | None], torch.Tensor] | None = None

    def _prepare(self, device: torch.device) -> Params:
        """Float64 copies of the parameters/constants ``_compute`` needs, on ``device``."""
        return {}

    def _compute(self, q: torch.Tensor, k: torch.Tensor, h: torch.Tensor, p: Params) -> torch.Tensor:
        """The definition: int64 broadcastable ``q, k, h`` -> float64 bias (broadcast shape)."""
        raise NotImplementedError

    def _out_dtype(self) -> torch.dtype:
        params = list(self.parameters())
        return torch.float64 if params and params[0].dtype == torch.float64 else torch.float32

    @property
    def bias_dtype(self) -> torch.dtype:
        return self._out_dtype()

    def evaluate(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        return self._compute(q_pos, k_pos, head, self._prepare(q_pos.device))

    def _default_device(self) -> torch.device:
        params = list(self.parameters())
        return params[0].device if params else torch.device("cpu")

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Elementwise bias for broadcastable integer ``q_pos``, ``k_pos``, ``head``; float64.

        Raises:
            TypeError: non-integer tensors.
            ValueError: negative positions or a head outside ``[0, num_heads)``.
        """
        q = _check_index_tensor("q_pos", q_pos)
        k = _check_index_tensor("k_pos", k_pos)
        h = _check_index_tensor("head", head)
        for name, t in (("q_pos", q), ("k_pos", k)):
            if t.numel() and int(t.min()) < 0:
                raise PosencError(f"{name} must be >= 0, got minimum {int(t.min())}")
        if h.numel() and (int(h.min()) < 0 or int(h.max()) >= self.num_heads):
            raise PosencError(
                f"head must be in [0, {self.num_heads - 1}] (num_heads={self.num_heads}), "
                f"got values in [{int(h.min())}, {int(h.max())}]"
            )
        try:
            torch.broadcast_shapes(q.shape, k.shape, h.shape)
        except RuntimeError:
            raise PosencError(
                f"q_pos {tuple(q.shape)}, k_pos {tuple(k.shape)} and head {tuple(h.shape)} do not broadcast"
            ) from None
        return self.evaluate(q, k.to(q.device), h.to(q.device))

    def bias(
        self,
        num_queries: int,
        num_keys: int,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bias ``(b|1, h, i, j)``: float32, or float64 when the parameters are float64.

        Parameter-free encodings return a cached tensor for default positions: treat it as
        read-only (no in-place ops on it).
        """
        num_queries = check_int("num_queries", num_queries, minimum=0)
        num_keys = check_int("num_keys", num_keys, minimum=0)
        if device is None and q_positions is None and k_positions is None:
            device = self._default_device()
        key = (num_queries, num_keys, torch.device(device) if device is not None else None)
        use_cache = self.cache_dense and q_positions is None and k_positions is None
        if use_cache and self._dense_cache is not None and self._dense_cache[0] == key:
            return self._dense_cache[1]
        out = (
            super()
            .bias(num_queries, num_keys, q_positions=q_positions, k_positions=k_positions, device=device)
            .to(self._out_dtype())
        )
        if use_cache:
            self._dense_cache = (key, out)  # one entry: the (h, i, j) table is not rebuilt per call
        return out

    def score_mod(
        self, q_positions: torch.Tensor | None = None, k_positions: torch.Tensor | None = None
    ) -> ScoreMod:
        """FlexAttention ``score_mod(score, b, h, q_idx, kv_idx) -> score + bias``.

        Args:
            q_positions: int ``(b|1, i)`` or ``(i,)``; None means ``q_idx`` itself.
            k_positions: int ``(b|1, j)`` or ``(j,)``; None means ``kv_idx`` itself.
        """
        qp = None if q_positions is None else self._flex_positions(q_positions, "q_positions")
        kp = None if k_positions is None else self._flex_positions(k_positions, "k_positions")
        if qp is not None and kp is not None and 1 not in (qp.shape[0], kp.shape[0]):
            if qp.shape[0] != kp.shape[0]:
                raise PosencError(
                    f"q_positions batch {qp.shape[0]} and k_positions batch {kp.shape[0]} differ"
                )
        device = qp.device if qp is not None else kp.device if kp is not None else self._default_device()
        params = self._prepare(device)
        compute = self._compute

        def pick(table: torch.Tensor | None, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            if table is None:
                return idx
            return table[0, idx] if table.shape[0] == 1 else table[b, idx]

        def fn(score, b, h, q_idx, kv_idx):
            value = compute(pick(qp, b, q_idx), pick(kp, b, kv_idx), h, params)
            return score + value.to(score.dtype)

        return fn

    @staticmethod
    def _flex_positions(positions: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(positions, torch.Tensor):
            raise PosencTypeError(f"{name} must be an integer torch.Tensor of shape (batch, seq) or None")
        seq = positions.shape[-1] if positions.ndim else 0
        return resolve_positions(positions, seq, name=name)


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi head slopes, float64 ``(h,)`` (Press et al. 2022, sec. 3 and the official code).

    Power of two ``n``: ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. Otherwise the slopes of the
    closest lower power of two ``p``, then every other slope of the ``2p`` set (``n - p`` of them).
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)
    p = 1 << (num_heads.bit_length() - 1)  # closest power of two <= num_heads

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * m / n) for m in range(1, n + 1)]  # start 2^(-8/n), ratio 2^(-8/n)

    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: num_heads - p], dtype=torch.float64)


@dataclass(frozen=True)
class ALiBiConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one slope each
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: symmetric -m|i-j| (encoders); False: -m(i-j) (causal)

    def validate(self) -> None:
        # bounded: the slopes are built in a Python loop (2**40 heads ran out of memory, not an error)
        check_int("num_heads", self.num_heads, minimum=1, maximum=1 << 16)
        check_bool("bidirectional", self.bidirectional)


class ALiBi(_BiasFamily):
    r"""Attention with Linear Biases (Press et al. 2022, https://arxiv.org/abs/2108.12409).

    .. math:: B_{h,i,j} = -m_h (i - j), \qquad m_h = 2^{-8h/H}\ (H \text{ a power of two})

    Bidirectional: ``-m_h |i - j|``. Parameter-free; slopes from :func:`alibi_slopes`.
    """

    Config = ALiBiConfig
    config: ALiBiConfig
    paper = (
        "Press et al. 2022, Train Short, Test Long: Attention with Linear Biases Enables "
        "Input Length Extrapolation, https://arxiv.org/abs/2108.12409"
    )
    equation = "B[h,i,j] = -m_h * (i - j)  (bidirectional: -m_h * |i - j|), m_h = 2^(-8h/H)"
    share_across_layers = True
    paper_setting = PaperSetting(
        source="fairseq, where Press et al. trained every encoding they compared, scales all token embeddings "
        "by sqrt(d_model) (a codebase default, not ALiBi's); BLOOM does not; it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )
    translation_invariant = True
    cache_dense = True

    def __init__(self, config: ALiBiConfig) -> None:
        super().__init__(config)
        self.slopes = alibi_slopes(config.num_heads)  # float64 (h,), plain attribute (not a buffer)

    def _prepare(self, device: torch.device) -> Params:
        return {"slopes": self.slopes.to(device)}

    def _compute(self, q, k, h, p):
        d = (q - k).to(torch.float64)  # i - j, exact for |i - j| < 2^53
        if self.config.bidirectional:
            d = d.abs()
        return -p["slopes"][h] * d


# ---------------------------------------------------------------------------
# T5 relative position buckets
# ---------------------------------------------------------------------------


def t5_relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket of ``relative_position = j - i`` (key minus query), as Mesh-TF / HF T5.

    Half of a direction's buckets hold the exact distances ``0 .. max_exact-1``; the rest
    grow logarithmically up to ``max_distance``; farther distances share the last bucket.
    Bidirectional: keys after the query use the upper ``num_buckets // 2`` buckets.
    Causal: keys after the query fall in bucket 0 (they are masked anyway).
    """
    rel = relative_position.long()
    n = num_buckets
    if bidirectional:
        n //= 2
        offset = (rel > 0).long() * n
        dist = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        dist = (-rel).clamp(min=0)
    max_exact = n // 2
    ratio = torch.log(dist.clamp(min=1).to(torch.float64) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + torch.floor(ratio * (n - max_exact)).long()).clamp(max=n - 1)
    return offset + torch.where(dist < max_exact, dist, large)


@dataclass(frozen=True)
class T5Config(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one learned scalar per (bucket, head)
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: separate buckets for keys before/after the query
    num_buckets: int = 32  # T5 default; per direction when bidirectional
    max_distance: int = length_field("paper_length", default=128)  # distances >= this share the last bucket
    init_std: float = 0.02  # table ~ N(0, init_std^2); HF T5 uses d_model^-0.5

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("num_buckets", self.num_buckets, minimum=4 if self.bidirectional else 2)
        n = self.num_buckets // 2 if self.bidirectional else self.num_buckets
        check_int(
            f"max_distance (beyond the {n // 2} exact buckets of num_buckets={self.num_buckets})",
            self.max_distance,
            minimum=max(1, n // 2 + 1),
        )
        check_float("init_std", self.init_std, minimum=0.0, maximum=1e6)  # larger overflows float32


class T5RelativeBias(_BiasFamily):
    r"""T5 relative position buckets (Raffel et al. 2020, https://arxiv.org/abs/1910.10683).

    .. math:: B_{h,i,j} = w_{\mathrm{bucket}(j - i),\,h}

    A learned ``(num_buckets, num_heads)`` table indexed by a log-spaced bucket of ``j - i``
    (:func:`t5_relative_position_bucket`, identical to HF's ``_relative_position_bucket``).
    T5 shares one table across layers (``share_across_layers = True``).
    """

    Config = T5Config
    config: T5Config
    paper = (
        "Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
        "Text-to-Text Transformer, https://arxiv.org/abs/1910.10683"
    )
    equation = (
        "B[h,i,j] = table[bucket(j - i), h]; bucket exact below max_exact, log-spaced up to max_distance"
    )
    share_across_layers = True
    translation_invariant = True
    paper_setting = PaperSetting(
        source="T5 does not scale token embeddings (it initialises them N(0, 1) and scales tied output "
        "logits by 1/sqrt(d_model)); it acts inside "
        "attention, on layer-normalised inputs whose scale the token embeddings do not change",
    )

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.table = nn.Parameter(torch.randn(config.num_buckets, config.num_heads) * config.init_std)

    def _prepare(self, device: torch.device) -> Params:
        return {"table": self.table.to(device=device, dtype=torch.float64)}

    def constant_beyond(self) -> int | None:
        """Causal: every distance ``>= max_distance`` falls in the last bucket."""
        return None if self.config.bidirectional else self.config.max_distance

    def _compute(self, q, k, h, p):
        c = self.config
        bucket = t5_relative_position_bucket(
            k - q, bidirectional=c.bidirectional, num_buckets=c.num_buckets, max_distance=c.max_distance
        )
        return p["table"][bucket, h]


# ---------------------------------------------------------------------------
# KERPLE
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KerpleConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; one (r1, r2) pair each
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: distance |i-j|; False: max(i-j, 0) as the official tril
    clamp_min: float = 0.01  # r1, r2 are clamped to >= this (the official code's eps)

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_float("clamp_min", self.clamp_min, minimum=0.0, maximum=1.0, exclusive_minimum=True)


class _Kerple(_BiasFamily):
    """Learnable per-head ``r1, r2 > 0``; initialised and clamped as the official code."""

    Config = KerpleConfig
    config: KerpleConfig
    paper = (
        "Chi et al. 2022, KERPLE: Kernelized Relative Positional Embedding for Length "
        "Extrapolation, https://arxiv.org/abs/2205.09921"
    )
    translation_invariant = True
    paper_setting = PaperSetting(
        source="Chi et al. 2022 train in GPT-NeoX, which does not scale token embeddings"
    )
    r1_init_scale: float  # r1 ~ U(0, r1_init_scale)
    r2_init_scale: float  # r2 ~ U(0, r2_init_scale)
    r2_max: float | None = None

    def __init__(self, config: KerpleConfig) -> None:
        super().__init__(config)
        self.r1 = nn.Parameter(torch.rand(config.num_heads) * self.r1_init_scale)
        self.r2 = nn.Parameter(torch.rand(config.num_heads) * self.r2_init_scale)

    def _prepare(self, device: torch.device) -> Params:
        # The official code clamps .data in place each step; we clamp functionally (same values,
        # no gradient while a raw parameter sits outside the range).
        lo = self.config.clamp_min
        r1 = self.r1.to(device=device, dtype=torch.float64).clamp(min=lo)
        r2 = self.r2.to(device=device, dtype=torch.float64).clamp(min=lo, max=self.r2_max)
        return {"r1": r1, "r2": r2}

    def _distance(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        d = (q - k).to(torch.float64)
        return d.abs() if self.config.bidirectional else d.clamp(min=0)


class KerpleLog(_Kerple):
    r"""KERPLE, logarithmic kernel (Chi et al. 2022, https://arxiv.org/abs/2205.09921).

    .. math:: B_{h,i,j} = -r_{1,h} \log(1 + r_{2,h} |i - j|), \quad r_1, r_2 > 0

    Official init: ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; both clamped to ``>= 0.01``.
    """

    equation = "B[h,i,j] = -r1_h * log(1 + r2_h * |i - j|), r1, r2 >= 0.01"
    r1_init_scale = 2.0
    r2_init_scale = 1.0

    def _compute(self, q, k, h, p):
        return -p["r1"][h] * torch.log1p(p["r2"][h] * self._distance(q, k))


class KerplePower(_Kerple):
    r"""KERPLE, power kernel (Chi et al. 2022, https://arxiv.org/abs/2205.09921).

    .. math:: B_{h,i,j} = -r_{1,h} |i - j|^{r_{2,h}}, \quad r_1 > 0,\ 0 < r_2 \le 2

    Official init: ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)``; ``r1 >= 0.01``, ``0.01 <= r2 <= 2``.
    """

    equation = "B[h,i,j] = -r1_h * |i - j|^r2_h, r1 >= 0.01, 0.01 <= r2 <= 2"
    r1_init_scale = 1.0
    r2_init_scale = 2.0
    r2_max = 2.0

    def _compute(self, q, k, h, p):
        return -p["r1"][h] * torch.pow(self._distance(q, k), p["r2"][h])


# ---------------------------------------------------------------------------
# FIRE
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FIREConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; the MLP outputs one value per head
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: normaliser psi(max(L,i,j)) and separate heads for j > i
    mlp_width: int = 32  # hidden units of f_theta (the paper's 32)
    init_c: float = 0.1  # initial c of psi(x) = log(c x + 1)
    init_threshold: float = length_field(
        "paper_length", default=512.0
    )  # initial L; L = |multiplier * init_threshold|, multiplier learned
    eps: float = 1e-6  # added to the normaliser, as the paper's code

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("mlp_width", self.mlp_width, minimum=1)
        check_float("init_c", self.init_c, minimum=0.0, exclusive_minimum=True, maximum=1e6)
        check_float("init_threshold", self.init_threshold, minimum=0.0, exclusive_minimum=True)
        check_float("eps", self.eps, minimum=0.0, exclusive_minimum=True)


class FIRE(_BiasFamily):
    r"""Functional Interpolation for Relative Positions (Li et al. 2023, https://arxiv.org/abs/2310.04418).

    .. math:: B_{h,i,j} = f_\theta\!\left(\frac{\psi(i - j)}{\psi(\max(L, i))}\right)_h,
              \qquad \psi(x) = \log(|c x| + 1)

    ``f_theta``: Linear(1, 32) -> ReLU -> Linear(32, H) (PyTorch's default init), ``c`` and
    ``L`` learnable (init 0.1 and 512, as the paper's code: ``L = |multiplier * 512|``).
    Note FIRE depends on the absolute query position ``i`` through the normaliser.

    Bidirectional (posenc's extension; the paper defines the causal form): the normaliser
    is ``psi(max(L, i, j))`` so the input stays in ``[0, 1]``, and the MLP has ``2H``
    outputs — heads ``0..H-1`` for ``j <= i``, ``H..2H-1`` for ``j > i`` — so the two
    directions are told apart, as T5's bidirectional buckets do.
    """

    Config = FIREConfig
    config: FIREConfig
    paper = (
        "Li et al. 2023, Functional Interpolation for Relative Positions Improves Long "
        "Context Transformers, https://arxiv.org/abs/2310.04418"
    )
    equation = "B[h,i,j] = MLP(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(|c x| + 1)"

    def __init__(self, config: FIREConfig) -> None:
        super().__init__(config)
        outputs = config.num_heads * (2 if config.bidirectional else 1)
        self.mlp_in = nn.Linear(1, config.mlp_width)
        self.mlp_out = nn.Linear(config.mlp_width, outputs)
        self.c = nn.Parameter(torch.tensor(float(config.init_c)))  # an int init_c makes a float
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))

    def _prepare(self, device: torch.device) -> Params:
        def f64(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=torch.float64)

        # c and L as (1,) vectors indexed inside _compute: FlexAttention's eager backward
        # rejects 0-d captured tensors that require grad.
        return {
            "c": f64(self.c).reshape(1),
            "L": (f64(self.threshold_multiplier) * self.config.init_threshold).abs().reshape(1),
            "w1": f64(self.mlp_in.weight)[:, 0],  # (u,)
            "b1": f64(self.mlp_in.bias),  # (u,)
            "w2": f64(self.mlp_out.weight),  # (H_out, u)
            "b2": f64(self.mlp_out.bias),  # (H_out,)
        }

    def factored_mlp(
        self,
        q_start: int,
        k_start: int,
        num_queries: int,
        num_keys: int,
        *,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, ...] | None:
        """Causal FIRE is ``f(psi(i - j) / psi(max(L, i)))``: ``a = psi(delta)`` per distance and
        ``s = 1 / (psi(max(L, i)) + eps)`` per query (float64 maths, float32 out); the
        bidirectional normaliser also depends on ``j``, so it has no such form (None)."""
        if self.config.bidirectional:
            return None
        p = self._prepare(torch.device(device) if device is not None else self._default_device())
        device = p["c"].device
        delta = torch.arange(num_queries + num_keys - 1, device=device) + (q_start - k_start - (num_keys - 1))
        c, threshold = p["c"][0], p["L"][0]
        a = torch.log(torch.abs(c * delta.to(torch.float64)) + 1)  # psi(i - j) >= 0
        position = torch.arange(q_start, q_start + num_queries, device=device, dtype=torch.float64)
        s = 1 / (torch.log(torch.abs(c * torch.maximum(position, threshold)) + 1) + self.config.eps)
        terms = (a, s, p["w1"], p["b1"], p["w2"], p["b2"])
        return tuple(t.to(torch.float32) for t in terms)

    def _compute(self, q, k, h, p):
        qf, kf = q.to(torch.float64), k.to(torch.float64)
        d = qf - kf
        position = torch.maximum(qf, kf) if self.config.bidirectional else qf
        c, threshold = p["c"][0], p["L"][0]
        normaliser = torch.log(torch.abs(c * torch.maximum(position, threshold)) + 1) + self.config.eps
        x = torch.log(torch.abs(c * d) + 1) / normaliser  # in [0, 1] for j <= i
        if self.config.bidirectional:
            h = torch.where(d < 0, h + self.config.num_heads, h)  # keys after the query
        if x.ndim == 0:  # one score at a time (score_mod): one hidden unit at a time, scalars only
            out = p["b2"][h]
            for u in range(self.config.mlp_width):
                out = out + torch.relu(x * p["w1"][u] + p["b1"][u]) * p["w2"][h, u]
            return out
        hidden = torch.relu(x[..., None] * p["w1"] + p["b1"])  # (..., u)
        out = hidden @ p["w2"].T + p["b2"]  # (..., H_out): every head at once
        index = h.expand(torch.broadcast_shapes(x.shape, h.shape))[..., None]
        return torch.take_along_dim(out, index, dim=-1)[..., 0]  # pick each score's head


# ---------------------------------------------------------------------------
# Sandwich
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SandwichConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; head h (1-based) is divided by 8h/H
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # accepted for uniformity; the bias is symmetric in i - j anyway
    embed_dim: int = 128  # d', size of the sinusoidal embeddings whose inner product is taken
    base: float = 10000.0  # sinusoid base

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("embed_dim", self.embed_dim, minimum=2, even=True)
        check_float("base", self.base, minimum=1.0, exclusive_minimum=True)


class Sandwich(_BiasFamily):
    r"""Sandwich (Chi et al. 2023, https://arxiv.org/abs/2212.10356), parameter-free.

    .. math:: B_{h,i,j} = \frac{H}{8h}\Big(\sum_{k=1}^{d'/2} \cos\frac{i - j}{\mathrm{base}^{2k/d'}}
              - \frac{d'}{2}\Big), \quad h = 1..H

    The sum is the inner product of two sinusoidal embeddings ``p_i . p_j`` of size ``d'``;
    subtracting ``d'/2`` (its value at distance 0) makes the bias 0 on the diagonal and < 0
    off it. It decays roughly logarithmically with small oscillations (it is monotone only
    up to ``pi * base^(2/d')``). The per-head divisor ``8h/H`` mirrors ALiBi's slopes.
    """

    Config = SandwichConfig
    config: SandwichConfig
    paper = (
        "Chi et al. 2023, Dissecting Transformer Length Extrapolation via the Lens of "
        "Receptive Field Analysis, https://arxiv.org/abs/2212.10356"
    )
    equation = "B[h,i,j] = (sum_{k=1}^{d'/2} cos((i - j) / base^(2k/d')) - d'/2) * H / (8h)"
    share_across_layers = True
    translation_invariant = True
    cache_dense = True

    def __init__(self, config: SandwichConfig) -> None:
        super().__init__(config)
        k = torch.arange(1, config.embed_dim // 2 + 1, dtype=torch.float64)
        self.frequencies = config.base ** (-2.0 * k / config.embed_dim)  # (d'/2,) float64
        heads = torch.arange(1, config.num_heads + 1, dtype=torch.float64)
        self.head_scale = config.num_heads / (8.0 * heads)  # (h,) float64
        self._profile_table: dict[torch.device, torch.Tensor] = {}

    def profile(self, distance: torch.Tensor) -> torch.Tensor:
        """``p_i . p_j - d'/2`` for float64 distances ``(...)`` -> ``(...)`` (head-free)."""
        w = self.frequencies.to(distance.device)
        return torch.cos(distance[..., None] * w).sum(-1) - self.config.embed_dim / 2

    def _table(self, size: int, device: torch.device) -> torch.Tensor:
        """Cached float64 ``profile(0 .. size-1)``, grown by doubling."""
        return grown_table(self._profile_table, device, size, self.profile)

    def _prepare(self, device: torch.device) -> Params:
        return {"head_scale": self.head_scale.to(device), "frequencies": self.frequencies.to(device)}

    def _compute(self, q, k, h, p):
        d = (q - k).abs()
        if d.ndim == 0:  # one score at a time (FlexAttention's score_mod): sum directly
            value = torch.cos(d.to(torch.float64) * p["frequencies"]).sum() - self.config.embed_dim / 2
        elif torch.compiler.is_compiling():  # a traced graph cannot size a table from the values
            value = self.profile(d.to(torch.float64))
        else:  # dense: look the distance up in the cached profile table (direct past 2^20)
            top = int(d.max()) + 1 if d.numel() else 1
            value = self._profile_rows(d, top)
        return value * p["head_scale"][h]

    def _profile_rows(self, d: torch.Tensor, top: int) -> torch.Tensor:
        """``profile(d)`` for int64 distances ``0 <= d < top``: from the table up to 2^20, else direct."""
        if top <= 1 << 20:
            return F.embedding(d, self._table(top, d.device)[:, None])[..., 0]
        return self.profile(d.to(torch.float64))

    def distance_bias(
        self, low: int, count: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``(h, count)`` float64 bias at ``delta = low + t``; the largest ``|delta|`` is known here,
        so the profile table is sized without reading the distances."""
        d = (torch.arange(low, low + count, device=device)).abs()
        top = max(abs(low), abs(low + count - 1)) + 1 if count else 1
        return self._profile_rows(d, top)[None, :] * self.head_scale.to(d.device)[:, None]
