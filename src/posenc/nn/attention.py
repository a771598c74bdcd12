"""Multi-head attention that takes any positional encoding, with masks and a KV cache.

Axis legend:
    b  batch            h  heads
    n  sequence         i  query positions     j  key positions
    d  head_dim (``D`` = d_model = h * d)

Attention never asks *which* encoding it holds, only where the encoding acts
(its ``kind``, see :mod:`posenc.encoding.base`):

| kind                  | what attention does                                                   |
|-----------------------|-----------------------------------------------------------------------|
| ``none``/``additive`` | nothing (additive encodings are added to the embeddings by the model) |
| ``rotary``            | ``q, k = encoding.rotate(q, k, q_positions, k_positions)``            |
| ``bias``              | ``logits = q k^T / sqrt(d) + encoding.bias(...)``                     |
| ``relative``          | ``logits = (q k^T + encoding.scores(q, k)) / sqrt(d)``; ``out += encoding.values(probs)`` |
| ``contextual``        | ``logits = encoding.scores(q, k, masked scaled logits)``              |

Two paths compute the same thing: ``"sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``,
used when the kind allows: none/additive/rotary, and bias as a float ``attn_mask``) and
``"plain"`` (the explicit softmax below, readable next to the equations). The tests
check that they agree on full tensors, forward and gradients. :func:`choose_path`
is the single place that picks between them.

Masks are boolean "may attend" tensors ``(b|1, 1, i, j)``: causal (by token index,
so left padding and cache offsets need no special case), key padding, and
document masks for packed sequences. A query row with nothing to attend to
(e.g. a left-padding token under a causal mask) outputs zeros, never NaN.

Grouped-query attention (Ainslie et al. 2023, GQA, https://arxiv.org/abs/2305.13245; multi-query
attention, Shazeer 2019, https://arxiv.org/abs/1911.02150, is ``num_kv_heads=1``): keys and
values have ``g = num_kv_heads`` heads, each serving ``h / g`` consecutive query heads (query
head ``t`` reads key/value head ``t // (h / g)``, as transformers' ``repeat_kv``). Rotary
encodings rotate the ``g`` key heads, the KV cache stores ``g`` heads, SDPA reads them in
place (``enable_gqa``); the other paths (bias, relative, contextual, plain) repeat them to
``h`` heads per call (``kernels.bias_attention.repeat_kv``), which is what they compute per
head anyway.

KV cache rule (:class:`KVCache`): keys are cached *after* rotation, so each
decode step rotates only the new token. Encodings that set
``cache_unrotated_keys = True`` (dynamic RoPE scalings, whose frequencies depend
on the current length) get raw keys cached instead, and the whole key set is
rotated with the current positions at every step.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from posenc.core.axes import AxisPositions, check_encoding_axes
from posenc.core.checks import check_choice, check_float, check_int, check_tensor, compute_dtype
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.positions import Positions, as_positions, joint_bound, resolve_positions
from posenc.encoding.base import (
    BiasEncoding,
    ContextualEncoding,
    PositionalEncoding,
    RelativeEncoding,
    RotaryEncoding,
)
from posenc.kernels.bias_attention import bias_attention, repeat_kv
from posenc.nn.kv_cache import KVCache, step_positions

PATHS = ("auto", "sdpa", "plain")
# Kinds the fused SDPA kernel can express (bias through a float attn_mask).
SDPA_KINDS = ("none", "additive", "rotary", "bias")


def choose_path(kind: str, requested: str = "auto", *, need_weights: bool = False) -> str:
    """Pick the attention implementation for an encoding ``kind``.

    Args:
        kind: the encoding's kind (``"none"`` when there is no encoding).
        requested: ``"auto"`` (fastest that can express ``kind``), ``"sdpa"`` or ``"plain"``.
        need_weights: the caller wants the attention probabilities (plain path only).

    Returns:
        ``"sdpa"`` or ``"plain"``. A FlexAttention path for bias encodings would be added here.
    """
    check_choice("path", requested, PATHS)
    if requested == "sdpa" and (kind not in SDPA_KINDS or need_weights):
        why = "returning weights" if need_weights else f"encoding kind {kind!r}"
        raise PosencError(f"path='sdpa' cannot express {why}; use path='plain' or 'auto'")
    if requested != "auto":
        return requested
    return "sdpa" if kind in SDPA_KINDS and not need_weights else "plain"


# ---------------------------------------------------------------------------
# Positions and masks.
# ---------------------------------------------------------------------------


def attention_mask(
    num_queries: int,
    num_keys: int,
    *,
    causal: bool,
    key_mask: torch.Tensor | None = None,
    q_document_ids: torch.Tensor | None = None,
    k_document_ids: torch.Tensor | None = None,
    device=None,
) -> torch.Tensor | None:
    """Boolean "may attend" mask ``(b|1, 1, i, j)``, or None when everything may attend.

    Causality is by token index: the ``i`` queries are the *last* ``i`` of the ``j``
    keys (query ``t`` is key ``num_keys - num_queries + t``), which covers KV-cache decoding.

    Args:
        key_mask: ``(b, j)`` bool, True = real key.
        q_document_ids, k_document_ids: ``(b|1, i)``, ``(b|1, j)``; attend within a document only.
    """
    allowed = None
    if causal:
        offset = num_keys - num_queries
        qi = torch.arange(num_queries, device=device)[:, None] + offset
        kj = torch.arange(num_keys, device=device)[None, :]
        allowed = (kj <= qi)[None, None]  # (1, 1, i, j)
    if key_mask is not None:
        km = key_mask[:, None, None, :]  # (b, 1, 1, j)
        allowed = km if allowed is None else allowed & km
    if q_document_ids is not None and k_document_ids is not None:
        same = q_document_ids[:, None, :, None] == k_document_ids[:, None, None, :]  # (b|1, 1, i, j)
        allowed = same if allowed is None else allowed & same
    return allowed


def check_padding_mask(padding_mask: torch.Tensor | None, batch: int, seq_len: int) -> torch.Tensor | None:
    """None, or a bool ``(batch, seq_len)`` tensor; otherwise TypeError/ValueError naming it."""
    if padding_mask is None:
        return None
    padding_mask = _check_mask("padding_mask", padding_mask)
    if padding_mask.shape != (batch, seq_len):
        raise PosencError(
            f"padding_mask must have shape (batch, seq) = {(batch, seq_len)}, got {tuple(padding_mask.shape)}"
        )
    return padding_mask


def _check_mask(name: str, mask: torch.Tensor) -> torch.Tensor:
    mask = check_tensor(name, mask, ndim=2)
    if mask.dtype != torch.bool:
        raise PosencTypeError(f"{name} must be a bool tensor (True = real token), got dtype {mask.dtype}")
    return mask


# ---------------------------------------------------------------------------
# The two attention paths.
# ---------------------------------------------------------------------------


def plain_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding | None,
    allowed: torch.Tensor | None,
    q_positions: torch.Tensor | Positions,
    k_positions: torch.Tensor | Positions,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The readable path: explicit scores, masking and softmax.

    Args:
        q: ``(b, h, i, d)``; k, v: ``(b, g, j, d)`` (q and k already rotated for rotary kinds),
            ``g`` dividing ``h`` (grouped-query attention: repeated to ``h`` heads here).
        allowed: ``(b|1, 1, i, j)`` bool or None; every row must allow at least one key.

    Returns:
        ``(out (b, h, i, d), probs (b, h, i, j))``.
    """
    kind = "none" if encoding is None else encoding.kind
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)  # (b, h, i, j)
    relative = cast(RelativeEncoding, encoding) if kind == "relative" else None
    if relative is not None:  # Shaw / Transformer-XL: content-position terms, unscaled
        scores = scores + relative.scores(q, k, q_positions=q_positions, k_positions=k_positions)
    logits = scores * scale
    if kind == "bias":  # ALiBi / T5 / KERPLE / FIRE: content-free, added after scaling
        bias = cast(BiasEncoding, encoding).bias(
            q.shape[2], k.shape[2], q_positions=q_positions, k_positions=k_positions, device=q.device
        )
        logits = logits + bias.to(logits.dtype)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    if kind == "contextual":  # CoPE: positions from gated content, on masked scaled logits
        logits = cast(ContextualEncoding, encoding).scores(q, k, logits)
    wide = compute_dtype(logits.dtype)  # softmax in float32 at least
    probs = torch.softmax(logits.to(wide), dim=-1).to(q.dtype)  # (b, h, i, j)
    probs = F.dropout(probs, p=dropout, training=training)
    out = probs @ v  # (b, h, i, d)
    if relative is not None and relative.has_values:
        extra = relative.values(probs, q_positions=q_positions, k_positions=k_positions)
        if extra is not None:
            out = out + extra.to(out.dtype)
    return out, probs


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding | None,
    allowed: torch.Tensor | None,
    q_positions: torch.Tensor | Positions,
    k_positions: torch.Tensor | Positions,
    is_causal: bool = False,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """The fused path (same arguments as :func:`plain_attention`); returns ``(b, h, i, d)``.

    ``is_causal`` may be True only when ``allowed`` is exactly the square causal mask.
    Bias encodings enter as a float ``attn_mask`` (bias, -inf where not allowed).
    k and v may have fewer heads than q (grouped-query attention, ``h`` a multiple of them).
    """
    kind = "none" if encoding is None else encoding.kind
    mask = None if is_causal else allowed
    groups = q.shape[1] // k.shape[1]
    if kind == "bias" and (isinstance(q_positions, AxisPositions) or isinstance(k_positions, AxisPositions)):
        # coordinates (posenc.core.axes): the dense bias
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        bias = (
            cast(BiasEncoding, encoding)
            .bias(q.shape[2], k.shape[2], q_positions=q_positions, k_positions=k_positions, device=q.device)
            .to(compute_dtype(q.dtype))
        )  # (b|1, h, i, j)
        if is_causal:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        # the bias stays in float32 for half-precision q, as on the blocked path (SDPA takes it)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout if training else 0.0)
    if kind == "bias":  # no (b, h, i, j) bias tensor: row blocks (posenc.kernels.bias_attention)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        return bias_attention(
            q, k, v, encoding, q_positions=q_positions, k_positions=k_positions,
            allowed=None if is_causal else allowed, causal=is_causal, dropout=dropout if training else 0.0,
        )  # fmt: skip
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout if training else 0.0, is_causal=is_causal,
        enable_gqa=groups > 1,
    )  # fmt: skip


# ---------------------------------------------------------------------------
# The module.
# ---------------------------------------------------------------------------


def check_kv_heads(num_kv_heads: int | None, num_heads: int) -> int:
    """``num_kv_heads`` (None: ``num_heads``) checked to be a divisor of ``num_heads``."""
    if num_kv_heads is None:
        return num_heads
    num_kv_heads = check_int("num_kv_heads", num_kv_heads, minimum=1, maximum=num_heads)
    if num_heads % num_kv_heads:
        divisors = [g for g in range(1, num_heads + 1) if num_heads % g == 0]
        raise PosencError(
            f"num_kv_heads must divide num_heads={num_heads} (one of {divisors}), got {num_kv_heads}"
        )
    return num_kv_heads


class _Keys(NamedTuple):
    """Keys and values of one call with what attention needs to mask them."""

    k: torch.Tensor  # (b, g, j, d)
    v: torch.Tensor  # (b, g, j, d)
    positions: Positions  # (b|1, j)
    mask: torch.Tensor | None  # (b, j) True = real key, or None
    documents: torch.Tensor | None  # (b|1, j) document ids, or None


class MultiHeadAttention(nn.Module):
    """Multi-head (self- or cross-) attention that calls its encoding's hook.

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads``.
        num_heads: number of (query) heads ``h``; ``head_dim = d_model // num_heads``.
        num_kv_heads: key/value heads ``g`` (grouped-query attention; 1 = multi-query);
            must divide ``num_heads``; None = ``num_heads`` (multi-head attention). The k/v
            projections are ``g * head_dim`` wide and a KV cache stores ``g`` heads.
        encoding: any :class:`~posenc.encoding.base.PositionalEncoding` (or None for no encoding).
        causal: mask future keys (decoder) or not (encoder).
        bias: add biases to the q/k/v/out projections.
        dropout: dropout on the attention probabilities (training only).
        path: ``"auto"``, ``"sdpa"`` or ``"plain"`` (see :func:`choose_path`).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        encoding: PositionalEncoding | None = None,
        causal: bool = True,
        bias: bool = False,
        dropout: float = 0.0,
        path: str = "auto",
    ) -> None:
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        num_heads = check_int("num_heads", num_heads, minimum=1)
        if d_model % num_heads:
            raise PosencError(
                f"d_model must be divisible by num_heads, got d_model={d_model}, num_heads={num_heads}"
            )
        if encoding is not None and not isinstance(encoding, PositionalEncoding):
            raise PosencTypeError(
                f"encoding must be a posenc PositionalEncoding or None, got {type(encoding).__name__}"
            )
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.num_kv_heads = check_kv_heads(num_kv_heads, num_heads)
        self.groups = num_heads // self.num_kv_heads  # query heads per key/value head
        self.causal = bool(causal)
        self.dropout = check_float("dropout", dropout, minimum=0.0, maximum=1.0)
        self.path = check_choice("path", path, PATHS)
        self.encoding = encoding
        self._check_encoding_dims()
        if encoding is not None and not encoding.supports_grouped_kv and self.num_kv_heads != num_heads:
            raise PosencError(
                f"encoding {type(encoding).__name__} rotates every head differently, so num_kv_heads "
                f"must equal num_heads={num_heads} (no grouped-query attention), got {self.num_kv_heads}"
            )
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        kv_width = self.num_kv_heads * self.head_dim
        self.k_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.v_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    @property
    def kind(self) -> str:
        return "none" if self.encoding is None else self.encoding.kind

    def _check_encoding_dims(self) -> None:
        if self.encoding is None:
            return
        config = self.encoding.config
        values = {"d_model": self.d_model, "head_dim": self.head_dim, "num_heads": self.num_heads}
        for field, meaning in config.meanings("model").items():
            got, value = getattr(config, field), values.get(meaning)
            if value is not None and got != value:
                raise PosencError(
                    f"encoding has {field}={got} but the attention has {field}={value} "
                    f"(d_model={self.d_model}, num_heads={self.num_heads})"
                )

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, heads, self.head_dim).transpose(1, 2)  # (b, heads, n, d)

    def forward(
        self,
        x: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        context: torch.Tensor | None = None,
        context_positions: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend.

        Args:
            x: ``(b, n, D)`` queries (and keys/values unless ``context`` is given).
            positions: ``(b|1, n)`` int positions of ``x``; None = ``arange`` (counted over
                real tokens if ``padding_mask`` is given, continued after the ``cache``).
            padding_mask: ``(b, n)`` bool, True = real token (masks padded keys).
            cache: a :class:`KVCache` for incremental decoding (causal self-attention only).
            context: ``(b, m, D)`` keys/values for cross-attention (no causal mask), with
                optional ``context_positions`` ``(b|1, m)`` and ``context_mask`` ``(b, m)``.
            document_ids: ``(b|1, n)`` packed-sequence document ids (attend within a document).
            return_weights: also return the probabilities ``(b, h, n, j)`` (plain path).

        Returns:
            ``(b, n, D)`` (and the weights if asked). Rows with nothing to attend to are 0.
        """
        x = check_tensor("x", x, ndim=3, floating=True)
        b, n, width = x.shape
        if width != self.d_model:
            raise PosencError(f"x has feature size {width} but d_model={self.d_model}")
        padding_mask = check_padding_mask(padding_mask, b, n)
        self._check_cache(cache, context, document_ids)
        q_pos = step_positions(
            n, batch=b, positions=positions, padding_mask=padding_mask, cache=cache, device=x.device
        )
        check_encoding_axes(self.encoding, q_pos)
        q, keys = self._project(
            x, q_pos, padding_mask, document_ids, context, context_positions, context_mask
        )
        q, keys = self._position_and_cache(q, q_pos, keys, cache)
        out, weights = self._attend(
            q, q_pos, keys, document_ids, cross=context is not None, weights=return_weights
        )
        out = self.out_proj(out.transpose(1, 2).reshape(b, n, self.d_model))  # (b, n, D)
        if return_weights:
            assert weights is not None  # return_weights forces the plain path
            return out, weights
        return out

    # -- the steps of forward ------------------------------------------------------------

    def _project(
        self, x, q_pos: Positions, padding_mask, document_ids, context, context_positions, context_mask
    ) -> tuple[torch.Tensor, _Keys]:
        """q ``(b, h, i, d)`` from ``x``; k, v ``(b, g, j, d)`` from ``x`` (or ``context``), with
        the keys' positions, padding mask and document ids."""
        b = x.shape[0]
        q = self._split(self.q_proj(x), self.num_heads)  # (b, h, i, d)
        source = x if context is None else self._check_context(context, b)
        k = self._split(self.k_proj(source), self.num_kv_heads)  # (b, g, j, d)
        v = self._split(self.v_proj(source), self.num_kv_heads)
        if context is None:
            return q, _Keys(k, v, q_pos, padding_mask, document_ids)
        m = source.shape[1]
        k_pos = as_positions(context_positions, m, batch=b, device=x.device, name="context_positions")
        key_mask = None if context_mask is None else _check_mask("context_mask", context_mask)
        if key_mask is not None and key_mask.shape != (b, m):
            raise PosencError(f"context_mask must have shape {(b, m)}, got {tuple(key_mask.shape)}")
        return q, _Keys(k, v, k_pos, key_mask, None)

    def _position_and_cache(
        self, q: torch.Tensor, q_pos: Positions, keys: _Keys, cache: KVCache | None
    ) -> tuple[torch.Tensor, _Keys]:
        """Rotary encodings rotate q and k; a cache appends the new keys and returns them all.

        Keys are rotated before caching (the cache holds rotated keys) unless the encoding asks
        for raw keys to be cached (its frequencies depend on the length): then the cached keys
        are re-rotated when the frequencies change (:func:`_rotate_cached`).
        """
        rotary = cast(RotaryEncoding, self.encoding) if self.kind == "rotary" else None
        k, v, k_pos, key_mask = keys.k, keys.v, keys.positions, keys.mask
        if rotary is not None and cache is not None and rotary.cache_unrotated_keys:
            q, k, v, k_pos, key_mask = _rotate_cached(rotary, cache, q, k, v, q_pos, k_pos, key_mask)
        else:
            if rotary is not None:
                q, k = rotary.rotate(q, k, q_positions=q_pos, k_positions=k_pos)
            if cache is not None:
                k, v, k_pos, key_mask = cache.append(k, v, k_pos, key_mask)
        return q, keys._replace(k=k, v=v, positions=k_pos, mask=key_mask)

    def _attend(
        self, q: torch.Tensor, q_pos: Positions, keys: _Keys, document_ids, *, cross: bool, weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Mask, then the SDPA or the plain path: ``(out (b, h, i, d), probs or None)``.

        Pure causal masks need no tensor: one query sees every key (decode), and SDPA masks the
        square case itself (``is_causal``). A query row with nothing to attend to outputs zeros.
        """
        b, n, j = q.shape[0], q.shape[2], keys.k.shape[2]
        causal = self.causal and not cross
        pure_causal = causal and keys.mask is None and document_ids is None
        path = choose_path(self.kind, self.path, need_weights=weights)
        is_causal = False
        if path == "sdpa" and pure_causal and n == j and n > 1:  # (a branch: guards symbolic shapes)
            is_causal = True
        if (pure_causal and n == 1) or is_causal:
            allowed = None
        else:
            allowed = attention_mask(
                n, j, causal=causal, key_mask=keys.mask,
                q_document_ids=_resolve_docs(document_ids, n, b, q.device),
                k_document_ids=_resolve_docs(keys.documents, j, b, q.device), device=q.device,
            )  # fmt: skip
        row_ok = None
        if allowed is not None and not pure_causal:
            row_ok = allowed.any(dim=-1, keepdim=True)  # (b|1, 1, i, 1)
            allowed = allowed | ~row_ok  # empty rows attend everywhere; zeroed below
        probs: torch.Tensor | None = None
        if path == "sdpa":
            out = sdpa_attention(
                q, keys.k, keys.v, encoding=self.encoding, allowed=allowed, q_positions=q_pos,
                k_positions=keys.positions, is_causal=is_causal, dropout=self.dropout, training=self.training,
            )  # fmt: skip
        else:
            out, probs = plain_attention(
                q, keys.k, keys.v, encoding=self.encoding, allowed=allowed, q_positions=q_pos,
                k_positions=keys.positions, dropout=self.dropout, training=self.training,
            )  # fmt: skip
        if row_ok is not None:
            out = out * row_ok.to(out.dtype)
            probs = None if probs is None else probs * row_ok.to(probs.dtype)
        return out, probs

    # -- checks ---------------------------------------------------------------------------

    def _check_cache(self, cache, context, document_ids) -> None:
        if cache is None:
            return
        if not isinstance(cache, KVCache):
            raise PosencTypeError(
                f"cache must be a posenc.nn.attention.KVCache or None, got {type(cache).__name__}"
            )
        if context is not None:
            raise PosencError("cache is for causal self-attention; it cannot be used with context")
        if document_ids is not None:
            raise PosencError("cache cannot be combined with document_ids (packed sequences)")
        if not self.causal:
            raise PosencError("cache requires causal=True: a bidirectional layer must see the whole sequence")
        if self.encoding is not None and not self.encoding.supports_kv_cache:
            raise PosencError(
                f"encoding {type(self.encoding).__name__} does not support a KV cache "
                "(supports_kv_cache=False); run the full sequence with cache=None"
            )
        if cache.owner is None:
            cache.owner = id(self)
        elif cache.owner != id(self):
            raise PosencError("cache already belongs to another attention layer; use one KVCache per layer")

    def _check_context(self, context, batch) -> torch.Tensor:
        context = check_tensor("context", context, ndim=3, floating=True)
        if context.shape[0] != batch or context.shape[2] != self.d_model:
            raise PosencError(
                f"context must have shape ({batch}, m, {self.d_model}), got {tuple(context.shape)}"
            )
        return context

    def extra_repr(self) -> str:
        kv = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        return f"d_model={self.d_model}, num_heads={self.num_heads}{kv}, causal={self.causal}, path={self.path!r}"


def _rotate_cached(
    rotary: RotaryEncoding, cache: KVCache, q, k, v, q_pos: Positions, k_pos: Positions, key_mask
):
    """Rotary step for an encoding that caches raw keys: append the raw chunk, then rotate.

    The cached rotated keys stay valid while the rotation (``rotation_key`` at the bound of
    every position in the call) is the same one they were made with: then only the new
    chunk is rotated and appended. Otherwise (the frequencies changed) every cached key is
    rotated again with the current positions.
    """
    valid = cache.rotated
    previous = cache.rotated_with
    raw, v, k_all, key_mask = cache.append(k, v, k_pos, key_mask)
    bound = joint_bound(q_pos, k_all)
    key = rotary.rotation_key(bound)
    if valid is not None and previous is key:
        chunk_bound = joint_bound(q_pos, k_pos)  # what rotating the chunk alone will use
        if chunk_bound == bound or rotary.rotation_key(chunk_bound) is key:
            q, k_new = rotary.rotate(q, k, q_positions=q_pos, k_positions=k_pos)
            return q, cache.append_rotated(k_new), v, k_all, key_mask
    q, k = rotary.rotate(q, raw, q_positions=q_pos, k_positions=k_all)
    cache.store_rotated(k, key)
    return q, k, v, k_all, key_mask


def _resolve_docs(ids, n, batch, device) -> torch.Tensor | None:
    if ids is None:
        return None
    return resolve_positions(ids, n, batch=batch, device=device, name="document_ids")
