"""Common random numbers across encodings: with SHARED_INIT every weight the encodings share starts
equal within a seed (posenc.compare.work.share_initial_weights)."""

from __future__ import annotations

import torch

from posenc.compare import work
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile


def _specs(seed: int = 0) -> dict:
    grid = build_grid(get_profile("smoke"), seeds=(seed,), encodings=("rope", "t5", "alibi"), tasks=("copy",))
    return {s.encoding: s for s in grid.specs}


def _shared(a: torch.nn.Module, b: torch.nn.Module) -> tuple[int, int]:
    """(equal, differing) tensors the two models share by name and shape."""
    theirs = dict(b.named_parameters())
    same = [
        torch.equal(p, theirs[n])
        for n, p in a.named_parameters()
        if n in theirs and theirs[n].shape == p.shape
    ]
    return sum(same), len(same) - sum(same)


def test_an_encoding_with_weights_of_its_own_shifts_the_others_draws_unless_shared(monkeypatch):
    specs = _specs()
    assert work.SHARED_INIT  # benchmark version 3 runs every model so
    monkeypatch.setattr(work, "SHARED_INIT", False)
    rope, t5, alibi = (work.initial_model(specs[name]) for name in ("rope", "t5", "alibi"))
    assert _shared(rope, alibi)[1] == 0  # nothing of their own: equal already
    assert _shared(rope, t5)[1] > 0  # T5's bias table is drawn first: its embeddings start unlike RoPE's
    monkeypatch.setattr(work, "SHARED_INIT", True)
    rope, t5 = work.initial_model(specs["rope"]), work.initial_model(specs["t5"])
    same, differ = _shared(rope, t5)
    assert differ == 0 and same > 10
    plain = work.build_model(specs["t5"])  # T5's own table keeps its draw
    tables = [n for n, _ in t5.named_parameters() if "encoding" in n]
    assert tables and all(
        torch.equal(dict(t5.named_parameters())[n], dict(plain.named_parameters())[n]) for n in tables
    )


def test_shared_weights_are_drawn_as_the_model_draws_them_and_differ_by_seed():
    model = work.build_model(_specs()["rope"])
    drawn = work.share_initial_weights(model, 0)
    assert drawn >= 1 + 4 * model.config.num_layers  # token embeddings, projections, feed-forward
    weight = model.blocks[0].ffn[0].weight.detach()
    assert abs(float(weight.std()) - work.INIT_STD) < 0.002 and abs(float(weight.mean())) < 0.002
    assert model.lm_head.weight is model.tok_emb.weight  # tied weights stay tied
    other = work.build_model(_specs(1)["rope"])
    work.share_initial_weights(other, 1)
    assert not torch.equal(other.tok_emb.weight, model.tok_emb.weight)
