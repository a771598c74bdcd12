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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from posenc.attention import MultiHeadAttention
from posenc.base import AdditiveEncoding, PositionalEncoding, check_float, check_int, check_tensor
from posenc.errors import PosencError
from posenc.model import Transformer, TransformerConfig
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
    """An untrained ``posenc.model.Transformer`` with encoding ``name``, in float64, eval mode."""
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
    words = sorted(set(original) | set(permuted))
    if sorted(original) != sorted(permuted):
        raise PosencError(f"permuted must reorder the words of original, got {original!r} vs {permuted!r}")
    ids = {w: i for i, w in enumerate(words)}
    x = torch.tensor([[ids[w] for w in original]])  # (1, n)
    px = torch.tensor([[ids[w] for w in permuted]])
    # perm[t] = index in `original` of the word at position t of `permuted` (first unused match).
    used: set[int] = set()
    perm = []
    for w in permuted:
        i = next(k for k, o in enumerate(original) if o == w and k not in used)
        used.add(i)
        perm.append(i)
    model = small_model(name, causal=causal, seed=seed, vocab_size=max(8, len(words)), **model_kwargs)
    with torch.no_grad():
        out, pout = model(x)[0], model(px)[0]  # (n, V)
    token = float((pout - out[perm]).norm() / out.norm())
    pooled = float((pout.mean(0) - out.mean(0)).norm() / out.mean(0).norm())
    return Sensitivity(name, causal, token, pooled)


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
    positions = torch.arange(n).unsqueeze(0)
    maps = []
    with torch.no_grad():
        x = model.embed(tokens, positions)  # (1, n, D)
        for block in model.blocks:
            _, weights = block.attn(block.ln_attn(x), positions=positions, return_weights=True)
            maps.append(weights[0].to(torch.float64).numpy())  # (h, i, j)
            x = block(x, positions=positions, padding_mask=None, cache=None)
    return np.stack(maps)
