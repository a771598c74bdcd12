"""A tiny pre-LN Transformer that takes any positional encoding.

Axis legend: b batch, n sequence, D d_model, V vocab_size, L num_layers.

Decoder-only language model when ``causal=True``, encoder (bidirectional, same
token-level output head) when ``causal=False``::

    x = tok_emb(tokens)                       (b, n, D)
    x = encoding.embed(x, positions)          additive encodings only, once at the input
    for each of L blocks:                     pre-LN residual blocks
        x = x + Attention(LN(x))              other kinds act inside every attention
        x = x + FFN(LN(x))                    Linear(D, ffn_dim) -> GELU -> Linear(ffn_dim, D)
    logits = LN(x) @ tok_emb.weight^T         (b, n, V), tied embeddings by default

The model never asks which encoding it holds: additive encodings are applied to
the embeddings, every other kind is handed to each layer's
:class:`~posenc.nn.attention.MultiHeadAttention` (one shared instance, or one per
layer: ``share_encoding``, default the encoding class's ``share_across_layers``).

``encoding`` is a registry name or an import spec (``"mypkg.pe:MyEncoding"``), an encoding
instance (used as built: the same module in every layer when the class shares across layers,
else a copy per layer; its dims must be the model's), or a schedule.

Per-layer encodings: ``encoding`` may also be a :class:`~posenc.schedules.Schedule`, one
entry per layer (Llama 4's NoPE every 4th layer, Gemma 3's local/global RoPE bases, a
scaling on global layers only; see :mod:`posenc.schedules`). ``encoding_config`` then maps
registry names to config defaults for every layer using that encoding
(``{"rope": {"max_position_embeddings": 64}}``); each layer's own config wins.

Options for additive encodings (the "how do we add position?" questions):

- ``combine="add"`` (the usual ``tok + PE``) or ``"concat"``: ``W [tok ; PE]`` with a
  learned ``Linear(2D, D)``. Concatenation followed by a linear map equals
  ``W_1 tok + W_2 PE``, i.e. addition after two learned projections; we keep the
  full-width token embedding so the output head can stay tied.
- ``inject="input"`` (once) or ``"every_layer"``: the positional signal is added again
  before every block (as in some Universal-Transformer-style models). This is *not* the
  Sandwich bias of Chi et al. 2023, which is a bias-kind encoding of its own.
- ``model.position_scale`` in ``[0, 1]`` multiplies the positional signal, for a
  schedule that introduces position gradually (1.0 = the encoding as published).
- ``scale_embeddings``: token embeddings times ``sqrt(D)`` (Vaswani et al. 2017, sec. 3.4).
  None (the default) sets the model up as the encoding's paper does (the class's
  ``paper_setting``): Vaswani et al.'s sinusoid is trained with scaled token embeddings,
  otherwise its amplitude-1 signal is 35x louder than N(0, 0.02) tokens at D = 64;
  True / False is one setting for every encoding.

The positional signal of an additive encoding is ``encoding.embed(x) - x``, so
content-dependent ones (complex-valued embeddings) work with every option.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from posenc.core.axes import check_encoding_axes
from posenc.core.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_tensor,
    did_you_mean,
    is_integer_dtype,
)
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.fields import plain_value
from posenc.core.positions import Positions
from posenc.encoding.base import AdditiveEncoding, PaperSetting, PositionalEncoding
from posenc.nn.attention import MultiHeadAttention, check_kv_heads, check_padding_mask
from posenc.nn.kv_cache import KVCache, step_positions
from posenc.registry import (
    build_for_model,
    check_encoding_class,
    encoding_spec,
    get_encoding_class,
    model_values,
)
from posenc.schedules import Schedule

COMBINES = ("add", "concat")
INJECTS = ("input", "every_layer")


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int  # V, number of token ids
    d_model: int = 64  # D, residual width
    num_heads: int = 4  # h; D must be divisible by h
    num_kv_heads: int | None = None  # key/value heads g (grouped-query attention), dividing h; None = h
    num_layers: int = 3  # L, number of pre-LN blocks
    ffn_dim: int = 256  # hidden width of the GELU feed-forward
    causal: bool = True  # True: decoder-only LM; False: bidirectional encoder
    # a registry name or import spec ("pkg.mod:Class"), an encoding class, an encoding instance, or
    # a per-layer Schedule (a name is looked up once, here: :attr:`encoding_class`)
    encoding: str | type[PositionalEncoding] | Schedule | PositionalEncoding = "rope"
    # extra Config fields for the encoding; with a Schedule: {registry name: config defaults}
    encoding_config: dict = field(default_factory=dict)
    tie_embeddings: bool = True  # output head shares the token embedding matrix
    dropout: float = 0.0  # on attention probabilities, attention output and FFN output
    share_encoding: bool | None = None  # one encoding for all layers; None = the class's default
    combine: str = "add"  # additive encodings: "add" or "concat" (see module docstring)
    inject: str = "input"  # additive encodings: "input" or "every_layer"
    # Token embeddings (N(0, 0.02), as GPT-2) times sqrt(D), as Vaswani et al. 3.4. None: as the
    # encoding's paper sets it up (its ``paper_setting``: sinusoidal, hybrid and hierarchical
    # scale, every other built-in does not); True / False: one setting whatever the encoding.
    scale_embeddings: bool | None = None

    def __post_init__(self) -> None:
        # The given values in their normal form, written as the config is made (dataclasses have no
        # converters; docs/architecture.md lists this write): NumPy scalars as Python values, so
        # that to_dict() is JSON, dicts as private copies, an encoding read from JSON (a dict) as
        # the Schedule it stands for.
        for f in dataclasses.fields(self):
            value = plain_value(getattr(self, f.name))  # a dict comes back a new dict
            if f.name == "encoding" and isinstance(value, dict):  # from to_dict() / JSON
                value = Schedule.from_dict(value)
            object.__setattr__(self, f.name, value)
        check_int("vocab_size", self.vocab_size, minimum=1)
        check_int("d_model", self.d_model, minimum=1)
        check_int("num_heads", self.num_heads, minimum=1)
        if self.d_model % self.num_heads:
            raise PosencError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )
        check_kv_heads(self.num_kv_heads, self.num_heads)
        check_int("num_layers", self.num_layers, minimum=1)
        check_int("ffn_dim", self.ffn_dim, minimum=1)
        check_float("dropout", self.dropout, minimum=0.0, maximum=1.0)
        for name in ("causal", "tie_embeddings"):
            check_bool(name, getattr(self, name))
        if self.scale_embeddings is not None:
            check_bool("scale_embeddings", self.scale_embeddings)
        if self.share_encoding is not None and not isinstance(self.share_encoding, bool):
            raise PosencTypeError(f"share_encoding must be a bool or None, got {self.share_encoding!r}")
        if not isinstance(self.encoding_config, dict):
            raise PosencTypeError(
                f"encoding_config must be a dict, got {type(self.encoding_config).__name__}"
            )
        kind = self._check_encoding()
        check_choice("combine", self.combine, COMBINES)
        check_choice("inject", self.inject, INJECTS)
        if kind != "additive" and (self.combine, self.inject) != ("add", "input"):
            raise PosencError(
                f"combine/inject apply to additive encodings only; {self.encoding!r} is of kind {kind!r}"
            )
        if self.combine == "concat" and self.inject == "every_layer":
            raise PosencError("inject='every_layer' requires combine='add'")

    def _check_encoding(self) -> str:
        """Check ``encoding`` against the rest of the config; its kind ("per-layer" for a schedule).
        A name (unknown ones raise PosencError with a suggestion) or a class is resolved once, here."""
        if isinstance(self.encoding, Schedule):
            kind = "per-layer"
            if self.encoding.num_layers != self.num_layers:
                raise PosencError(
                    f"the schedule has {self.encoding.num_layers} layers but num_layers={self.num_layers}"
                )
            for name, config in self.encoding_config.items():
                if name not in self.encoding.encodings or not isinstance(config, dict):
                    raise PosencError(
                        f"with a schedule, encoding_config maps the schedule's encodings "
                        f"{list(self.encoding.encodings)} to config dicts; got {name!r}: {config!r}"
                    )
        elif isinstance(self.encoding, PositionalEncoding):
            kind = self.encoding.kind
            if self.encoding_config:
                raise PosencError(
                    "encoding_config goes with an encoding name; an encoding instance carries its own "
                    f"config, got encoding_config={self.encoding_config!r}"
                )
            check_model_dims(self.encoding, d_model=self.d_model, num_heads=self.num_heads)
        else:
            # a name is looked up, a class checked: here, once (the cache encoding_class keeps it)
            kind = cast("type[PositionalEncoding]", self.encoding_class).kind
        return kind

    @functools.cached_property
    def encoding_class(self) -> type[PositionalEncoding] | None:
        """The class of the encoding (None with a per-layer Schedule): a cache, filled when the config
        is made (the check reads it: a name is looked up once, a class checked once) and kept, since
        a frozen config never changes its ``encoding``."""
        if isinstance(self.encoding, PositionalEncoding):
            return type(self.encoding)
        if isinstance(self.encoding, Schedule):
            return None
        if isinstance(self.encoding, type):
            return check_encoding_class(self.encoding, source="encoding")
        return get_encoding_class(self.encoding)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; an encoding class becomes its spec (:func:`posenc.encoding_spec`), an
        instance its spec and its config, which :meth:`from_dict` builds again (weights live in the
        model's state)."""
        if isinstance(self.encoding, type):
            return dataclasses.asdict(dataclasses.replace(self, encoding=encoding_spec(self.encoding)))
        if not isinstance(self.encoding, PositionalEncoding):
            return dataclasses.asdict(self)
        named = dataclasses.replace(
            self, encoding=encoding_spec(self.encoding), encoding_config=self.encoding.config.to_dict()
        )
        return dataclasses.asdict(named)

    def paper_setting(self) -> PaperSetting:
        """How the encoding's paper sets up the model around it (:func:`paper_setting`)."""
        cls = self.encoding_class
        if cls is not None and not isinstance(self.encoding, PositionalEncoding):
            return cls.paper_setting_for(dict(self.encoding_config))
        return paper_setting(self.encoding, self.encoding_config)

    @property
    def embeddings_scaled(self) -> bool:
        """Whether token embeddings are multiplied by sqrt(d_model): ``scale_embeddings``, or when
        it is None, what the encoding's paper does (:meth:`paper_setting`)."""
        if self.scale_embeddings is not None:
            return self.scale_embeddings
        return self.paper_setting().scale_embeddings

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerConfig:
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                raise PosencError(f"unknown TransformerConfig key {key!r}{did_you_mean(key, names)}")
        return cls(**data)


def paper_setting(
    encoding: str | type[PositionalEncoding] | Schedule | PositionalEncoding,
    encoding_config: dict | None = None,
) -> PaperSetting:
    """How the paper of ``encoding`` (a name or import spec with its ``encoding_config``, an
    instance, or a schedule) sets up the model around it: its class's ``paper_setting``. The
    encodings of a schedule must agree."""
    config = dict(encoding_config or {})
    if isinstance(encoding, PositionalEncoding):
        return type(encoding).paper_setting_for(encoding.config.to_dict())
    if isinstance(encoding, Schedule):
        settings = [
            get_encoding_class(layer.encoding).paper_setting_for(
                {**config.get(layer.encoding, {}), **layer.config}
            )
            for layer in encoding.layers
        ]
        if len({setting.scale_embeddings for setting in settings}) > 1:
            raise PosencError(
                f"the schedule's encodings {list(encoding.encodings)} are set up differently in their papers; "
                "pass scale_embeddings=True or False for one setting"
            )
        return settings[0]
    cls = encoding if isinstance(encoding, type) else get_encoding_class(encoding)
    return cls.paper_setting_for(config)


def check_model_dims(encoding: PositionalEncoding, *, d_model: int, num_heads: int) -> None:
    """Raise unless the instance's model-level fields (``dim``, ``head_dim``, ``num_heads``) are
    the model's, naming the field and both values."""
    want = model_values(type(encoding), d_model=d_model, num_heads=num_heads)
    for field_name, value in want.items():
        if field_name == "bidirectional":
            continue
        got = getattr(encoding.config, field_name)
        if got != value:
            raise PosencError(
                f"the encoding instance has {field_name}={got} but the model needs {field_name}={value} "
                f"(d_model={d_model}, num_heads={num_heads})"
            )


class Block(nn.Module):
    """Pre-LN block: ``x + Attn(LN(x))`` then ``x + FFN(LN(x))``."""

    def __init__(self, config: TransformerConfig, encoding: PositionalEncoding | None) -> None:
        super().__init__()
        d = config.d_model
        self.ln_attn = nn.LayerNorm(d)
        self.attn = MultiHeadAttention(
            d,
            config.num_heads,
            num_kv_heads=config.num_kv_heads,
            encoding=encoding,
            causal=config.causal,
            dropout=config.dropout,
        )
        self.ln_ffn = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, config.ffn_dim), nn.GELU(), nn.Linear(config.ffn_dim, d))
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, *, positions, padding_mask, cache) -> torch.Tensor:
        h = self.attn(self.ln_attn(x), positions=positions, padding_mask=padding_mask, cache=cache)
        x = x + self.drop(h)  # (b, n, D)
        return x + self.drop(self.ffn(self.ln_ffn(x)))


class Transformer(nn.Module):
    """Decoder-only LM (``causal=True``) or encoder (``causal=False``); see the module docstring."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise PosencTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = config
        d = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, d)
        self.input_encoding: AdditiveEncoding | None = None
        self.concat_proj = nn.Linear(2 * d, d, bias=False) if config.combine == "concat" else None
        layer_encodings: list[PositionalEncoding | None]
        if isinstance(config.encoding, Schedule):  # one entry per layer
            layer_encodings = list(
                config.encoding.build(
                    d_model=d,
                    num_heads=config.num_heads,
                    causal=config.causal,
                    share=config.share_encoding,
                    defaults=config.encoding_config,
                )
            )
        else:
            given = config.encoding
            cls = config.encoding_class
            assert cls is not None  # set for everything but a Schedule
            share = cls.share_across_layers if config.share_encoding is None else config.share_encoding
            copies = iter(range(config.num_layers))

            def make() -> PositionalEncoding:
                if isinstance(given, PositionalEncoding):  # the instance first, then copies of it
                    return given if next(copies) == 0 else copy.deepcopy(given)
                return build_for_model(
                    cls,
                    d_model=d,
                    num_heads=config.num_heads,
                    causal=config.causal,
                    **config.encoding_config,
                )

            if cls.kind == "additive":
                self.input_encoding = cast(AdditiveEncoding, make())
                layer_encodings = [None] * config.num_layers
            elif share:
                layer_encodings = [make()] * config.num_layers  # one instance, seen by every layer
            else:
                layer_encodings = [make() for _ in range(config.num_layers)]
        self.blocks = nn.ModuleList(Block(config, enc) for enc in layer_encodings)
        self.ln_final = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self._position_scale = 1.0
        _init_weights(self)
        self._embed_scale = d**0.5 if config.embeddings_scaled else 1.0
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    # -- positional signal ---------------------------------------------------

    @property
    def position_scale(self) -> float:
        """Factor in ``[0, 1]`` on the additive positional signal (1.0 = as published)."""
        return self._position_scale

    @position_scale.setter
    def position_scale(self, value: float) -> None:
        self._position_scale = check_float("position_scale", value, minimum=0.0, maximum=1.0)

    def encodings(self) -> Iterator[PositionalEncoding]:
        """Each distinct encoding module once (input encoding first, then per layer)."""
        seen: set[int] = set()
        candidates = [self.input_encoding] + [cast(Block, block).attn.encoding for block in self.blocks]
        for enc in candidates:
            if enc is not None and id(enc) not in seen:
                seen.add(id(enc))
                yield enc

    def _position_signal(self, x: torch.Tensor, positions: torch.Tensor | Positions) -> torch.Tensor:
        """``encoding.embed(x) - x`` times ``position_scale``: ``(b, n, D)``."""
        assert self.input_encoding is not None  # only called for additive encodings
        return (self.input_encoding.embed(x, positions=positions) - x) * self._position_scale

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings alone (times sqrt(D) when scaled: ``config.embeddings_scaled``):
        ``(b, n) -> (b, n, D)``."""
        return self.tok_emb(tokens) * self._embed_scale

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor | Positions) -> torch.Tensor:
        """Token embeddings combined with an additive encoding (if any): ``(b, n) -> (b, n, D)``."""
        x = self.token_embeddings(tokens)  # (b, n, D)
        if self.input_encoding is None:
            return x
        if self.concat_proj is not None:
            signal = self._position_signal(x, positions)
            return self.concat_proj(torch.cat([x, signal], dim=-1))  # (b, n, 2D) -> (b, n, D)
        if self._position_scale == 1.0:
            return self.input_encoding.embed(x, positions=positions)
        return x + self._position_signal(x, positions)

    # -- running ---------------------------------------------------------------

    def new_cache(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer, for incremental decoding."""
        if not self.config.causal:
            raise PosencError("new_cache requires causal=True: an encoder must see the whole sequence")
        for enc in self.encodings():
            if not enc.supports_kv_cache:
                raise PosencError(
                    f"encoding {type(enc).__name__} does not support a KV cache (supports_kv_cache=False)"
                )
        return [KVCache() for _ in self.blocks]

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """Logits ``(b, n, V)`` for token ids ``(b, n)``.

        Args:
            positions: ``(b|1, n)`` int positions; None = ``arange`` (counted over real
                tokens when ``padding_mask`` is given; continued after the cache). Multi-axis
                encodings also take ``(b|1, n, a)`` coordinates (:mod:`posenc.core.axes`).
            padding_mask: ``(b, n)`` bool, True = real token (use left padding for decoding).
            cache: from :meth:`new_cache`; each call appends its tokens.
        """
        tokens = check_tensor("tokens", tokens, ndim=2)
        if not is_integer_dtype(tokens.dtype):
            raise PosencTypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.dtype not in (
            torch.int32,
            torch.int64,
        ):  # int8/uint8/int16 ids: nn.Embedding takes int32/64
            tokens = tokens.long()
        self._check_token_values(tokens)
        if cache is not None:
            if not isinstance(cache, (list, tuple)) or len(cache) != len(self.blocks):
                raise PosencError(
                    f"cache must be a list of {len(self.blocks)} KVCache (use model.new_cache())"
                )
            if self.input_encoding is not None and not self.input_encoding.supports_kv_cache:
                raise PosencError(f"encoding {self.config.encoding!r} does not support a KV cache")
        b, n = tokens.shape
        padding_mask = check_padding_mask(padding_mask, b, n)
        caches = [None] * len(self.blocks) if cache is None else list(cache)
        checked = step_positions(
            n, batch=b, positions=positions, padding_mask=padding_mask, cache=caches[0], device=tokens.device
        )  # checked once here; every layer trusts it
        for enc in self.encodings():  # coordinates (b, n, a) must fit every encoding (posenc.core.axes)
            check_encoding_axes(enc, checked)
        x = self.embed(tokens, checked)  # (b, n, D)
        for index, (block, layer_cache) in enumerate(zip(self.blocks, caches)):
            if index > 0 and self.config.inject == "every_layer":
                x = x + self._position_signal(x, checked)
            x = block(x, positions=checked, padding_mask=padding_mask, cache=layer_cache)
        return self.lm_head(self.ln_final(x))  # (b, n, V)

    def _check_token_values(self, tokens: torch.Tensor) -> None:
        """Ids in ``[0, vocab_size)``: one read of the extremes (a device-side assert under compile)."""
        vocab = self.config.vocab_size
        if torch.compiler.is_compiling():
            torch._assert_async(
                ((tokens >= 0) & (tokens < vocab)).all(), f"tokens must be in [0, {vocab - 1}]"
            )
            return
        if not tokens.numel():
            return
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= vocab:
            raise PosencError(f"tokens must be in [0, {vocab - 1}] (vocab_size={vocab}), got [{low}, {high}]")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init_weights(module: nn.Module) -> None:
    """N(0, 0.02) for linear and embedding weights, zero biases; encodings keep their own init."""
    for child in module.children():
        if isinstance(child, PositionalEncoding):
            continue
        if isinstance(child, (nn.Linear, nn.Embedding)):
            nn.init.normal_(child.weight, mean=0.0, std=0.02)
            if isinstance(child, nn.Linear) and child.bias is not None:
                nn.init.zeros_(child.bias)
        _init_weights(child)
