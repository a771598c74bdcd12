"""What a spawned worker does with an encoding it knows only by a string (name or import spec):
build it, and train a small Transformer with it for a few steps on one fixed batch."""

from __future__ import annotations

import torch

import posenc
from posenc.nn.transformer import Transformer, TransformerConfig


def train(encoding: str, steps: int = 12) -> dict:
    torch.manual_seed(0)
    built = posenc.build_for_model(encoding, d_model=16, num_heads=2)
    config = TransformerConfig(
        vocab_size=11, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, encoding=encoding
    )
    model = Transformer(config)
    tokens = torch.randint(0, 11, (4, 12), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    kinds = {type(enc).__module__ + ":" + type(enc).__qualname__ for enc in model.encodings()}
    return {
        "class": f"{type(built).__module__}:{type(built).__qualname__}",
        "model": sorted(kinds),
        "losses": losses,
    }
