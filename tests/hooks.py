"""Drive any encoding through its kind's hook, so contract tests never branch on names."""

from __future__ import annotations

import torch

import posenc

D_MODEL, NUM_HEADS = 16, 2
HEAD_DIM = D_MODEL // NUM_HEADS


def make(name: str, **config) -> posenc.PositionalEncoding:
    torch.manual_seed(0)
    return posenc.build_for_model(name, d_model=D_MODEL, num_heads=NUM_HEADS, **config)


def inputs(enc, batch: int, seq: int, dtype=torch.float32, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random inputs for the encoding's hook (the tensors gradcheck differentiates)."""
    g = torch.Generator().manual_seed(seed)
    if enc.kind == "additive":
        return {"x": torch.randn(batch, seq, D_MODEL, generator=g, dtype=torch.float64).to(dtype)}
    if enc.kind in ("rotary", "relative", "contextual"):
        shape = (batch, NUM_HEADS, seq, HEAD_DIM)
        q = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        k = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        return {"q": q, "k": k}
    return {}


def apply(enc, batch: int, seq: int, tensors: dict, positions: torch.Tensor | None) -> torch.Tensor:
    """Call the kind's hook; return one tensor summarising every output."""
    if enc.kind == "additive":
        return enc.embed(tensors["x"], positions=positions)
    if enc.kind == "rotary":
        q, k = enc.rotate(tensors["q"], tensors["k"], q_positions=positions, k_positions=positions)
        return torch.cat([q, k], dim=-1)
    if enc.kind == "bias":
        if positions is None:
            return enc.bias(seq, seq).expand(batch, -1, -1, -1)
        return enc.bias(seq, seq, q_positions=positions, k_positions=positions).expand(batch, -1, -1, -1)
    if enc.kind == "relative":
        q, k = tensors["q"], tensors["k"]
        s = enc.scores(q, k, q_positions=positions, k_positions=positions)
        if not enc.has_values:
            return s
        probs = torch.softmax(s + q @ k.transpose(-1, -2), dim=-1)
        v = enc.values(probs, q_positions=positions, k_positions=positions)
        return torch.cat([s, v], dim=-1)
    if enc.kind == "contextual":
        q, k = tensors["q"], tensors["k"]
        logits = (q @ k.transpose(-1, -2)) / HEAD_DIM**0.5
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        logits = logits.masked_fill(~causal, float("-inf"))
        return enc.scores(q, k, logits)
    if enc.kind == "none":
        return torch.zeros(batch, seq)
    raise AssertionError(f"unknown kind {enc.kind}")
