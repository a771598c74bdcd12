"""The encoding base classes: one interface every positional encoding implements.

A positional encoding acts at exactly one place in a Transformer (its *kind*);
attention calls that kind's hook and never asks which encoding it holds.

Axis legend (used in every module of posenc):
    b  batch            h  heads
    n  sequence         i  query positions     j  key positions
    d  feature dim (d_model for additive encodings, head_dim inside attention)

| kind         | hook                                                        |
|--------------|-------------------------------------------------------------|
| ``additive`` | ``embed(x (b,n,d), *, positions (b,n)) -> (b,n,d)``          |
| ``rotary``   | ``rotate(q (b,h,i,d), k (b,h,j,d), *, q_positions, k_positions, layout) -> q, k`` |
| ``bias``     | ``bias_fn(q_pos, k_pos, head)`` elementwise; ``bias(...) -> (b|1,h,i,j)``; ``score_mod(...)`` |
| ``relative`` | ``scores(q, k, *, q_positions, k_positions) -> (b,h,i,j)`` (unscaled, added to q.k); optional ``values(probs, *, q_positions, k_positions) -> (b,h,i,d)`` |
| ``contextual`` | ``scores(q, k, logits) -> logits`` (logits scaled and masked with -inf) |
| ``none``     | nothing                                                     |

Positions are data: every hook takes explicit integer positions ``(b, n)`` (or
``(1, n)``, broadcast over the batch); ``None`` means ``arange(n)``.

Tensor layouts: the rotary hook also takes q/k as ``(b, n, h, d)`` with ``layout="bshd"``
(flash-attn, torchtune); ``"bhsd"`` (the default) is ``(b, h, n, d)``, what attention uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from posenc.core.checks import check_tensor
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.fields import EncodingConfig
from posenc.core.positions import Positions, as_positions, resolve_positions

Kind = Literal["additive", "rotary", "bias", "relative", "contextual", "none"]
KINDS: tuple[str, ...] = ("additive", "rotary", "bias", "relative", "contextual", "none")


@dataclass(frozen=True)
class PaperSetting:
    """The model setting an encoding's paper trains it in, where the model around it has a choice
    that decides how loud position is against content: :class:`posenc.nn.transformer.Transformer` uses it
    unless a uniform setting is asked for (``TransformerConfig(scale_embeddings=True | False)``).

    Only what the paper states as part of its model counts, not its codebase's defaults for every
    encoding it compared (fairseq and tensor2tensor scale every model's token embeddings). An
    encoding acting inside attention reads layer-normalised inputs, whose scale the token
    embeddings do not change, so it keeps the model's default whatever its paper's code did.
    """

    # token embeddings times sqrt(d_model) before the position signal is added (Vaswani et al.
    # 2017, sec. 3.4); False: as initialised (posenc's model: N(0, 0.02), as GPT-2)
    scale_embeddings: bool = False
    source: str = "the model's default (GPT-2 / LLaMA style token embeddings)"  # where it is from


class PositionalEncoding(nn.Module):
    """Base of every encoding. Subclasses set the class attributes below.

    Capabilities are declared here and on the kind's base class (``cache_unrotated_keys``,
    ``translation_invariant``, ``has_values``) and set per class; attention and the fast
    paths read them, never probe. Build one with ``posenc.build(name, **config)`` or
    ``Cls(Cls.Config(...))``.
    """

    kind: ClassVar[str]
    Config: ClassVar[type[EncodingConfig]]  # a frozen dataclass that also inherits EncodingConfig
    config: Any  # an instance of Config; every concrete class narrows the type to its Config
    paper: ClassVar[str] = ""  # "Author et al. YEAR, Title, https://arxiv.org/abs/..."
    equation: ClassVar[str] = ""  # the defining equation, plain text / LaTeX
    # How the encoding's paper sets up the model around it (posenc.nn.transformer uses it by default).
    paper_setting: ClassVar[PaperSetting] = PaperSetting()
    supports_kv_cache: ClassVar[bool] = True  # decode with a cache == full recompute
    # The model builds one instance for all layers by default (T5 shares its bias table;
    # parameter-free encodings share their caches). Per-layer learned ones set False.
    share_across_layers: ClassVar[bool] = False
    # Axes of a token's position: 1 for sequences; multi-axis encodings (posenc.encoding.absolute.axial) set
    # 2 for (h, w) or 3 for (t, h, w) and also take (b, n) positions on the diagonal.
    position_axes: int = 1
    # Keys/values with fewer heads than queries (grouped-query attention); False where the
    # rotation differs per query head (RoPE-Mixed's learned per-head frequencies).
    supports_grouped_kv: ClassVar[bool] = True
    # True when attention scores depend on positions only through q_pos - k_pos (shifting every
    # position changes nothing): bias encodings with a Toeplitz bias, RoPE with a static scaling,
    # xPos, Shaw, Transformer-XL. The bias fast path reads it; posenc.testing checks it.
    translation_invariant: bool = False

    @classmethod
    def paper_setting_for(cls, config: dict[str, Any]) -> PaperSetting:
        """The paper setting for these config values (``config``: Config fields, any subset);
        one per class unless the class says otherwise (an encoding built from another one)."""
        return cls.paper_setting

    def __init__(self, config: EncodingConfig) -> None:
        super().__init__()
        if not isinstance(config, self.Config):
            raise PosencTypeError(
                f"{type(self).__name__} expects a {self.Config.__name__}, got {type(config).__name__}"
            )
        self.config = config

    def numpy_reference(self, *arrays: Any) -> Any:
        """Optional: the kind's hook in float64 NumPy, written to be read next to the paper.

        Same arguments as the hook, as arrays: additive ``(x (b,n,d), positions (b,n)) -> (b,n,d)``;
        rotary ``(q, k, q_positions, k_positions) -> (q, k)``; bias ``(q_positions, k_positions)
        -> (b|1,h,i,j)``; relative ``(q, k, q_positions, k_positions) -> (b,h,i,j)``. When a class
        defines it, :func:`posenc.testing.check_encoding` checks the hook against it; a subclass
        sets ``numpy_reference = None`` to drop an inherited one.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no numpy_reference")

    @property
    def learnable(self) -> bool:
        return any(p.requires_grad for p in self.parameters())

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())


class AdditiveEncoding(PositionalEncoding):
    """Added to (combined with) token embeddings before the first layer."""

    kind = "additive"

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """The positional vectors alone: ``(b, n) -> (b, n, d)`` in float32.

        Content-dependent encodings (e.g. complex-valued) raise NotImplementedError.
        """
        raise NotImplementedError

    def embed(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        """``x (b, n, d)`` -> ``(b, n, d)``: token embeddings with position added."""
        x = check_tensor("x", x, ndim=3, floating=True)
        tensor = resolve_positions(positions, x.shape[1], batch=x.shape[0], device=x.device)
        return x + self.encode(tensor).to(x.dtype)

    def forward(self, x: torch.Tensor, *, positions: torch.Tensor | Positions | None = None) -> torch.Tensor:
        return self.embed(x, positions=positions)


class RotaryEncoding(PositionalEncoding):
    """Rotates queries and keys by position-dependent angles."""

    kind = "rotary"
    #: True when :meth:`set_scaling` swaps a context-extension scaling in place (RoPE).
    supports_scaling: ClassVar[bool] = False

    def set_scaling(self, scaling: Any) -> None:
        """Swap the context-extension scaling (a Hugging Face ``rope_scaling`` dict, a
        :class:`posenc.encoding.rotary.scaling.Scaling`, or None)."""
        raise NotImplementedError(f"{type(self).__name__} has no context-extension scalings")

    def check_scaling(self, scaling: Any) -> Any:
        """``scaling`` checked for this encoding without installing it, in the form
        :meth:`set_scaling` takes without checking it again (RoPE: a parsed
        :class:`posenc.encoding.rotary.scaling.Scaling`); by default unchanged (checked by
        :meth:`set_scaling`)."""
        return scaling

    @property
    def cache_unrotated_keys(self) -> bool:
        """True when the frequencies depend on the current length (RoPE's dynamic scalings):
        attention then caches keys before rotation and re-rotates them every step."""
        return False

    def rotation_key(self, bound: int | None) -> object:
        """What identifies the rotation of positions ``< bound``: keys rotated under the same
        (``is``) key stay valid. Static encodings return themselves; RoPE's dynamic scalings
        return their current sin/cos cache, which changes only when the frequencies do."""
        return self

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        layout: str = "bhsd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k: ``(b, h, n, d)`` for ``layout="bhsd"``, ``(b, n, h, d)`` for ``"bshd"``."""
        raise NotImplementedError

    def forward(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        return self.rotate(q, k, q_positions=q_positions, k_positions=k_positions, layout=layout)


class BiasEncoding(PositionalEncoding):
    """Adds a content-free bias ``bias_fn(q_pos, k_pos, head)`` to scaled scores."""

    kind = "bias"
    # ``translation_invariant`` (declared on the base class): ``bias_fn(q, k, h)`` depends on
    # ``q - k`` (and ``h``) only, a Toeplitz bias that the fast path evaluates once per call on the
    # distances (tests check declared == observed).

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    @property
    def bias_dtype(self) -> torch.dtype:
        """The dtype :meth:`bias` returns: float32, or float64 when the parameters are float64."""
        return torch.float32

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Elementwise, broadcasting definition of the bias (the single source of truth), checked."""
        raise NotImplementedError

    def evaluate(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """:meth:`bias_fn` without the checks, for callers whose positions are already checked
        (attention, the fast paths): int64 ``q_pos``, ``k_pos``, ``head`` on one device."""
        return self.bias_fn(q_pos, k_pos, head)

    def distance_bias(
        self, low: int, count: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``(h, count)`` float64: the bias at ``q_pos - k_pos = low + t``, ``t < count``.

        Only meaningful for encodings that declare ``translation_invariant``; the fast path
        evaluates it once per call instead of per score. Positions are shifted to be >= 0.
        """
        delta = torch.arange(low, low + count, device=device)
        shift = max(0, -low)  # keep both positions >= 0; the bias only sees the difference
        heads = torch.arange(self.num_heads, device=device)[:, None]
        k_pos = torch.full((1, 1), shift, dtype=torch.long, device=device)
        return self.evaluate((delta + shift)[None, :], k_pos, heads)

    def constant_beyond(self) -> int | None:
        """A distance from which on the bias is a single parameter per head (``q - k >= it``;
        T5's last bucket), or None (the default: it varies with every distance). With a
        causal mask the fast backward then forms the score gradient only on that band of
        diagonals: the far entries' gradient follows, since each softmax row's sums to zero."""
        return None

    def factored_mlp(
        self,
        q_start: int,
        k_start: int,
        num_queries: int,
        num_keys: int,
        *,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, ...] | None:
        """For a bias ``f(a[q - k] s[q])`` with ``f`` a one-hidden-layer ReLU MLP and ``a >= 0``
        (FIRE: a distance term over a per-query normaliser), float32 tensors
        ``(a, s, w1, b1, w2, b2)``: ``a`` over the ``i + j - 1`` distances as
        :meth:`distance_bias` lists them, ``s`` per query ``q_start .. q_start + i - 1``, and the MLP
        ``b2 + w2 relu(w1 x + b1)``, all differentiable in the parameters. None for every other
        bias (the default). The fast path builds and differentiates blocks from these."""
        return None

    def bias(
        self,
        num_queries: int,
        num_keys: int,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bias ``(b|1, h, i, j)`` in :attr:`bias_dtype`."""
        qp = as_positions(q_positions, num_queries, device=device, name="q_positions").tensor
        kp = as_positions(k_positions, num_keys, device=qp.device, name="k_positions").tensor
        if qp.shape[0] != kp.shape[0] and 1 not in (qp.shape[0], kp.shape[0]):
            raise PosencError(f"q_positions batch {qp.shape[0]} and k_positions batch {kp.shape[0]} differ")
        head = torch.arange(self.num_heads, device=qp.device)[None, :, None, None]
        return self.evaluate(qp[:, None, :, None], kp[:, None, None, :], head)

    def forward(self, num_queries, num_keys, *, q_positions=None, k_positions=None, device=None):
        return self.bias(
            num_queries, num_keys, q_positions=q_positions, k_positions=k_positions, device=device
        )


class RelativeEncoding(PositionalEncoding):
    """Content-dependent relative terms inside attention (Shaw, Transformer-XL)."""

    kind = "relative"
    has_values: bool = False  # adds ``values(probs)`` to the output; may be set per instance (Shaw)

    def scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor:
        """Extra *unscaled* score term ``(b, h, i, j)`` added to ``q @ k^T`` before scaling."""
        raise NotImplementedError

    def values(
        self,
        probs: torch.Tensor,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
    ) -> torch.Tensor | None:
        """Extra output term ``(b, h, i, d)`` added to ``probs @ v``; None if unused."""
        return None


class ContextualEncoding(PositionalEncoding):
    """Positions computed from content (CoPE)."""

    kind = "contextual"

    def scores(self, q: torch.Tensor, k: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``logits (b,h,i,j)`` (scaled, masked with -inf) -> new logits, same shape."""
        raise NotImplementedError


class NoEncoding(PositionalEncoding):
    """Marker base for the ``none`` kind."""

    kind = "none"
