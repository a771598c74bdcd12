"""The contract's properties inside attention: padding, packing, KV-cache decoding, grouped-query
attention and, where declared, relative-position invariance (:mod:`posenc.testing.encodings`
runs them)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from posenc.core.positions import from_attention_mask, from_document_ids
from posenc.encoding.base import PositionalEncoding
from posenc.nn.attention import MultiHeadAttention
from posenc.nn.kv_cache import KVCache
from posenc.testing.contract_report import PropertyResult
from posenc.testing.hook_driver import Subject, close, perturb


class _Layer(torch.nn.Module):
    """An attention layer around the encoding: additive ones embed first, others act inside."""

    def __init__(self, enc: PositionalEncoding, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.enc = enc
        inside = None if enc.kind == "additive" else enc
        self.attn = MultiHeadAttention(d_model, num_heads, encoding=inside, causal=True)

    def forward(self, x, *, positions=None, padding_mask=None, cache=None, document_ids=None):
        if self.enc.kind == "additive":
            if positions is None:
                start = 0 if cache is None else cache.length
                positions = torch.arange(start, start + x.shape[1]).expand(x.shape[0], -1)
                if padding_mask is not None:
                    positions = from_attention_mask(padding_mask)
            x = self.enc.embed(x, positions=positions)  # type: ignore[operator]
        return self.attn(
            x, positions=positions, padding_mask=padding_mask, cache=cache, document_ids=document_ids
        )


def _layer(s: Subject) -> _Layer:
    enc = s.make()
    layer = _Layer(enc, s.d_model, s.num_heads).double().eval()
    perturb(enc)
    return layer


def _tokens(s: Subject, b: int, n: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(b, n, s.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _padding(s: Subject) -> PropertyResult:
    layer, pad, n = _layer(s), 3, 6
    x = _tokens(s, 1, n)
    padded = torch.cat([_tokens(s, 1, pad, seed=4), x], dim=1)
    mask = torch.tensor([[False] * pad + [True] * n])
    with torch.no_grad():
        got = layer(padded, padding_mask=mask)[:, pad:]
        want = layer(x)
    return close("padding", got, want, torch.float64, f"{pad} left pads + {n} tokens vs the {n} tokens alone")


def _packing(s: Subject) -> PropertyResult:
    layer, lengths = _layer(s), (4, 5)
    docs = [_tokens(s, 1, n, seed=10 + i) for i, n in enumerate(lengths)]
    ids = torch.tensor([[i for i, n in enumerate(lengths) for _ in range(n)]])
    with torch.no_grad():
        got = layer(torch.cat(docs, dim=1), positions=from_document_ids(ids), document_ids=ids)
        want = torch.cat([layer(doc) for doc in docs], dim=1)
    return close("packing", got, want, torch.float64, f"documents of {list(lengths)} packed vs each alone")


def _kv_cache(s: Subject) -> PropertyResult:
    enc = s.make()
    if not enc.supports_kv_cache:
        return PropertyResult("kv_cache", None, "declares supports_kv_cache = False")
    layer, n, prefill = _layer(s), 9, 4
    x = _tokens(s, 2, n)
    cache = KVCache()
    with torch.no_grad():
        steps = [layer(x[:, :prefill], cache=cache)]
        steps += [layer(x[:, t : t + 1], cache=cache) for t in range(prefill, n)]
        # each step against a full recompute of the prefix it ends (a length-dependent encoding,
        # e.g. dynamic NTK, sees a different length in each)
        want = [layer(x[:, :prefill])] + [layer(x[:, : t + 1])[:, -1:] for t in range(prefill, n)]
    result = close(
        "kv_cache",
        torch.cat(steps, dim=1),
        torch.cat(want, dim=1),
        torch.float64,
        f"prefill {prefill}, then {n - prefill} single-token steps vs recomputing each prefix",
    )
    if result.passed:
        return result
    declared = "declares supports_kv_cache = True"
    if enc.kind == "rotary" and not getattr(enc, "cache_unrotated_keys", False):
        declared += " and cache_unrotated_keys = False"
    return dataclasses.replace(result, detail=f"{declared}, but {result.detail}")


def _hook_scores(enc: Any, dims: tuple[int, int, int], positions: torch.Tensor):
    """What the hook makes of ``positions`` that attention scores see (None: its hook takes none):
    a bias, rotated q.k, a relative encoding's score terms (and its values term)."""
    _, heads, head_dim = dims
    b, n = positions.shape
    g = torch.Generator().manual_seed(6)
    q = torch.randn(b, heads, n, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(b, heads, n, head_dim, generator=g, dtype=torch.float64)
    if enc.kind == "bias":
        return enc.bias(n, n, q_positions=positions, k_positions=positions).double()
    if enc.kind == "rotary":
        rq, rk = enc.rotate(q, k, q_positions=positions, k_positions=positions)
        return rq @ rk.transpose(-1, -2)
    if enc.kind == "relative":
        scores = enc.scores(q, k, q_positions=positions, k_positions=positions)
        if not getattr(enc, "has_values", False):
            return scores
        probs = torch.softmax(torch.randn(b, heads, n, n, generator=g, dtype=torch.float64), dim=-1)
        values = enc.values(probs, q_positions=positions, k_positions=positions)
        return torch.cat([scores, values], dim=-1)
    return None


def _relative_invariance(s: Subject) -> PropertyResult:
    enc = s.make().double()
    if not enc.translation_invariant:
        return PropertyResult("relative_invariance", None, "not declared (translation_invariant is False)")
    n, shift = 7, 11
    positions = torch.stack([torch.arange(n), torch.arange(n) + 3])  # rows at offsets 0 and 3
    perturb(enc)
    with torch.no_grad():
        checks = []  # (what, shifted, as given)
        want = _hook_scores(enc, s.dims, positions)
        if want is not None:
            what = {"bias": "the bias", "rotary": "rotated q.k", "relative": "the score terms"}[enc.kind]
            checks.append((what, _hook_scores(enc, s.dims, positions + shift), want))
        layer, x = _layer(s), _tokens(s, 2, n)
        checks.append(("attention", layer(x, positions=positions + shift), layer(x, positions=positions)))
    for what, got, given in checks:
        result = close("relative_invariance", got, given, torch.float64, what)
        if not result.passed:
            why = (
                result.detail.removeprefix(what).lstrip(": ")
                or f"changes when every position shifts by {shift}"
            )
            return dataclasses.replace(
                result, detail=f"declares translation_invariant = True, but {what}: {why}"
            )
    where = " and ".join(what for what, _, _ in checks)
    return dataclasses.replace(
        result,
        detail=f"declared translation_invariant: {where} unchanged when every position shifts by {shift}",
    )


def _grouped_kv(s: Subject) -> PropertyResult:
    enc = s.make()
    if enc.kind in ("additive", "none"):
        return PropertyResult("grouped_kv", None, f"kind {enc.kind!r} does not act inside attention")
    if not enc.supports_grouped_kv:
        return PropertyResult("grouped_kv", None, "declares supports_grouped_kv = False")
    if s.num_heads < 2:
        return PropertyResult("grouped_kv", None, "one head: nothing to group")
    heads = s.num_heads
    grouped = MultiHeadAttention(s.d_model, heads, num_kv_heads=1, encoding=enc, causal=True).double().eval()
    full = MultiHeadAttention(s.d_model, heads, encoding=enc, causal=True).double().eval()
    perturb(enc)
    with torch.no_grad():  # every query head reads the one key/value head: its copy per head
        full.q_proj.weight.copy_(grouped.q_proj.weight)
        full.out_proj.weight.copy_(grouped.out_proj.weight)
        for name in ("k_proj", "v_proj"):
            weight = getattr(grouped, name).weight  # (head_dim, d_model)
            getattr(full, name).weight.copy_(weight.repeat(heads, 1))
        x, positions = _tokens(s, 2, 7), torch.stack([torch.arange(7), torch.arange(7) + 3])
        got, want = grouped(x, positions=positions), full(x, positions=positions)
    result = close(
        "grouped_kv", got, want, torch.float64,
        f"1 key/value head for {heads} query heads vs each query head with its own copy",
    )  # fmt: skip
    if result.passed:
        return result
    return dataclasses.replace(result, detail=f"declares supports_grouped_kv = True, but {result.detail}")


#: These properties, in the order they run.
ATTENTION_PROPERTIES = {
    "padding": _padding,
    "packing": _packing,
    "kv_cache": _kv_cache,
    "grouped_kv": _grouped_kv,
    "relative_invariance": _relative_invariance,
}
