"""Probes through a small untrained (seeded) Transformer built on each encoding.

Axis legend: b batch, n sequence, L layers, h heads, i/j query/key positions, V vocab.

* :func:`position_sensitivity` -- a probing task from a widely shared interview answer on
  positional encodings: feed "The quick brown fox jumps" and "brown quick The fox jumps"
  and measure how much the output changes.
* :func:`permutation_equivariance_gap` -- one attention layer's distance from
  permutation equivariance (:func:`equivariance_gap` for a registry name).
* :func:`attention_maps` -- attention probabilities of every layer and head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from posenc.core.checks import check_float, check_int, check_tensor
from posenc.core.errors import PosencError
from posenc.encoding.base import AdditiveEncoding, PositionalEncoding
from posenc.nn.attention import MultiHeadAttention
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.registry import build_for_model

# The probing task's sentences: "The quick brown fox jumps" and a permutation of it.
PROBE_ORIGINAL = ("The", "quick", "brown", "fox", "jumps")
PROBE_PERMUTED = ("brown", "quick", "The", "fox", "jumps")


def small_model(
    name: str,
    *,
    causal: bool = True,
    d_model: int = 32,
    num_heads: int = 4,
    num_layers: int = 2,
    vocab_size: int = 64,
    seed: int = 0,
    **encoding_config,
):
    """An untrained ``posenc.nn.transformer.Transformer`` with encoding ``name``, in float64, eval mode."""
    config = TransformerConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        ffn_dim=2 * d_model,
        causal=causal,
        encoding=name,
        encoding_config=dict(encoding_config),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(config)
    return model.double().eval()


@dataclass(frozen=True)
class Sensitivity:
    encoding: str
    causal: bool
    token_change: float  # ||f(Px) - P f(x)|| / ||f(x)||: each word's output, aligned by word
    pooled_change: float  # ||mean_n f(Px) - mean_n f(x)|| / ||mean_n f(x)||: the sentence's output


def position_sensitivity(
    name: str,
    *,
    original=PROBE_ORIGINAL,
    permuted=PROBE_PERMUTED,
    causal: bool = False,
    seed: int = 0,
    **model_kwargs,
) -> Sensitivity:
    """How much a model's output changes when the words of a sentence are permuted.

    The probe's ``model_difference(original, permuted)``: both sentences are mapped to
    token ids (one id per distinct word), run through the same untrained model, and
    the logits compared. Word-aligned change is 0 for a permutation-equivariant model
    (no encoding, bidirectional); causal masks alone already break equivariance.
    """
    word_order(original, permuted)  # a bad permutation fails before any model is built
    words = sorted(set(original) | set(permuted))
    ids = {w: i for i, w in enumerate(words)}
    model = small_model(name, causal=causal, seed=seed, vocab_size=max(8, len(words)), **model_kwargs)
    token, pooled = word_order_change(model, original, permuted, lambda w: [ids[w]])
    return Sensitivity(name, causal, token, pooled)


def word_order(original: Sequence[str], permuted: Sequence[str]) -> list[int]:
    """``perm[t]`` = index in ``original`` of the word at position t of ``permuted`` (first unused match)."""
    if sorted(original) != sorted(permuted):
        raise PosencError(f"permuted must reorder the words of original, got {original!r} vs {permuted!r}")
    used: set[int] = set()
    perm = []
    for w in permuted:
        i = next(k for k, o in enumerate(original) if o == w and k not in used)
        used.add(i)
        perm.append(i)
    return perm


def word_order_change(
    model: Transformer,
    original: Sequence[str],
    permuted: Sequence[str],
    tokens_of: Callable[[str], list[int]],
    *,
    prefix: Sequence[int] = (),
) -> tuple[float, float]:
    """``(word-aligned change, pooled change)`` of ``model``'s logits when the words are permuted.

    Each word becomes the token ids ``tokens_of(word)`` (one or more); both sentences
    follow the same ``prefix`` (e.g. a BOS token). Word-aligned: each word's logits in
    the permuted sentence against the same word's in the original,
    ``||f(Px) - P f(x)|| / ||f(x)||`` over the words' positions; pooled: the mean over
    those positions, ``||mean f(Px) - mean f(x)|| / ||mean f(x)||``.
    """
    perm = word_order(original, permuted)
    pieces = [list(tokens_of(w)) for w in original]
    if any(not p for p in pieces):
        raise PosencError("every word must map to at least one token")
    start = len(prefix)
    spans, offset = [], start  # spans[k]: positions of original word k in the original sentence
    for piece in pieces:
        spans.append(list(range(offset, offset + len(piece))))
        offset += len(piece)
    moved: list[list[int]] = [[] for _ in pieces]
    offset = start  # positions of original word k in the permuted one
    for k in perm:
        moved[k] = list(range(offset, offset + len(pieces[k])))
        offset += len(pieces[k])
    x = torch.tensor([[*prefix, *(t for p in pieces for t in p)]])  # (1, n)
    px = torch.tensor([[*prefix, *(t for k in perm for t in pieces[k])]])
    first = next(model.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    with torch.no_grad():
        out, pout = model(x.to(device))[0].double().cpu(), model(px.to(device))[0].double().cpu()  # (n, V)
    pairs = [(i, j) for k in perm for i, j in zip(moved[k], spans[k])]  # (permuted position, original)
    here, there = [i for i, _ in pairs], [j for _, j in pairs]
    base = out[sorted(there)]
    token = float((pout[here] - out[there]).norm() / base.norm())
    pooled = float((pout[here].mean(0) - base.mean(0)).norm() / base.mean(0).norm())
    return token, pooled


def permutation_equivariance_gap(
    encoding: str | PositionalEncoding | None,
    *,
    inputs: torch.Tensor | None = None,
    permutation: Sequence[int] | torch.Tensor | None = None,
    d_model: int = 16,
    num_heads: int = 2,
    seq_len: int = 6,
    seed: int = 0,
    perturb: float = 0.0,
) -> float:
    """How far one bidirectional attention layer is from permutation-equivariant.

    Feeds token vectors ``x`` and the permuted ``x[perm]`` through the same layer (in
    float64; additive encodings added at positions ``0..n-1`` as usual) and returns
    ``max |f(x[perm]) - f(x)[perm]|``. Without a positional encoding the gap is ~0:
    attention alone cannot tell "dog bites man" from "man bites dog" — each word gets
    the same vector in both. Every positional encoding makes the gap clearly > 0.

    Random draws (weights, inputs, noise) come from ``seed``; the global RNG is left alone.

    Args:
        encoding: a registry name, a built encoding, or None (no encoding).
        inputs: ``(b, n, d_model)`` token vectors (default: random from ``seed``).
        permutation: a permutation of ``range(n)`` (default: rotate left by one). Not the
            reversal: a reversal keeps every distance ``|i - j|``, so encodings whose
            bidirectional bias is symmetric (ALiBi, KERPLE, Sandwich) are exactly
            equivariant to it -- they cannot tell "dog bites man" from "man bites dog".
        perturb: std of Gaussian noise added to the encoding's learnable parameters, to
            stand in for a trained encoding (CoPE's table starts at zero, i.e. as NoPE).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # parameter init from `seed`, global RNG untouched
        torch.manual_seed(seed)
        if isinstance(encoding, str):
            encoding = build_for_model(encoding, d_model=d_model, num_heads=num_heads, causal=False)
        layer = MultiHeadAttention(d_model, num_heads, encoding=encoding, causal=False).double().eval()
    if encoding is not None and check_float("perturb", perturb, minimum=0.0) > 0:
        with torch.no_grad():
            for param in encoding.parameters():
                noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
                param.add_(perturb * noise.to(param.dtype))
    if inputs is None:
        inputs = torch.randn(1, seq_len, d_model, generator=generator, dtype=torch.float64)
    x = check_tensor("inputs", inputs, ndim=3, floating=True).double()
    n = x.shape[1]
    perm = torch.arange(n).roll(-1) if permutation is None else torch.as_tensor(permutation)
    if sorted(perm.tolist()) != list(range(n)):
        raise PosencError(f"permutation must be a permutation of range({n}), got {perm.tolist()}")

    def run(tokens: torch.Tensor) -> torch.Tensor:
        if encoding is not None and encoding.kind == "additive":
            tokens = cast(AdditiveEncoding, encoding).embed(tokens)
        return layer(tokens)

    with torch.no_grad():
        return float((run(x[:, perm]) - run(x)[:, perm]).abs().max())


def equivariance_gap(name: str, *, seq_len: int = 6, seed: int = 0, **kwargs) -> float:
    """``max |f(x[perm]) - f(x)[perm]|`` of one bidirectional attention layer, for a registry name."""
    return permutation_equivariance_gap(name, seq_len=seq_len, seed=seed, **kwargs)


def attention_maps(
    name: str,
    *,
    seq_len: int = 16,
    causal: bool = True,
    seed: int = 0,
    **model_kwargs,
) -> np.ndarray:
    """Attention probabilities ``(L, h, i, j)`` of an untrained model on random tokens."""
    n = check_int("seq_len", seq_len, minimum=1)
    model = small_model(name, causal=causal, seed=seed, **model_kwargs)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, model.config.vocab_size, (1, n), generator=g)  # (1, n)
    return model_attention_maps(model, tokens)


def model_attention_maps(model: Transformer, tokens: torch.Tensor) -> np.ndarray:
    """Attention probabilities ``(L, h, i, j)`` of ``model`` on one sequence ``tokens`` ``(1, n)``.

    Read from the model's own forward pass (every layer's attention is asked for its
    weights), so whatever the model does between layers (position at every layer,
    per-layer schedules) is what the maps show.
    """
    tokens = check_tensor("tokens", tokens, ndim=2)
    if tokens.shape[0] != 1:
        raise PosencError(f"tokens must be one sequence (1, n), got shape {tuple(tokens.shape)}")
    maps: list[np.ndarray] = []

    def ask(_module, args, kwargs):
        return args, {**kwargs, "return_weights": True}

    def keep(_module, _args, _kwargs, output):
        out, weights = output
        maps.append(weights[0].detach().to(torch.float64).cpu().numpy())  # (h, i, j)
        return out

    handles = []
    for block in model.blocks:
        attn = cast(MultiHeadAttention, block.attn)
        handles.append(attn.register_forward_pre_hook(ask, with_kwargs=True))
        handles.append(attn.register_forward_hook(keep, with_kwargs=True))
    try:
        first = next(model.parameters(), None)
        with torch.no_grad():
            model(tokens.to(first.device if first is not None else "cpu"))
    finally:
        for handle in handles:
            handle.remove()
    return np.stack(maps)
