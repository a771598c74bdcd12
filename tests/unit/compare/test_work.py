"""One run (posenc.compare.work.execute) on the smoke profile: determinism, the same evaluation data for every encoding, what an LM run records, scalings evaluated without retraining, randomized positions; common random numbers across encodings (with SHARED_INIT every weight the encodings share starts equal within a seed)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.compare import work
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.work import execute
from posenc.records.spec import RunSpec

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def _numbers(payload: dict) -> dict:
    return {"loss": payload["train"]["loss"], "eval": payload["eval"]}


@pytest.mark.parametrize("task", ["copy", "lm"])
def test_same_seed_gives_identical_numbers_and_another_seed_does_not(task):
    (spec,) = smoke_specs(encodings=("sinusoidal",), tasks=(task,))
    first, second = execute(spec), execute(spec)
    assert _numbers(first) == _numbers(second)
    other = execute(dataclasses.replace(spec, seed=1))
    assert other["train"]["loss"] != first["train"]["loss"]


def test_every_encoding_sees_the_same_eval_data():
    a, b = (execute(s) for s in smoke_specs(tasks=("copy",)))
    assert a["eval"]["default"]["eval_data_sha256"] == b["eval"]["default"]["eval_data_sha256"]
    assert a["eval"]["default"]["lengths"] == list(SMOKE.eval.lengths)


def test_lm_run_records_python_version_and_data_hash():
    (spec,) = smoke_specs(encodings=("nope",), tasks=("lm",))
    payload = execute(spec)
    data = payload["data"]
    assert data["python_version"].count(".") == 2 and len(data["sha256"]) == 64
    ev = payload["eval"]["default"]
    assert ev["lengths"] == list(SMOKE.eval.lm_lengths)
    assert ev["ratio_to_train"][ev["lengths"].index(SMOKE.lm_train.max_len)] == pytest.approx(1.0)
    assert (
        len(ev["loss_by_position"]["nats_per_byte"]) == SMOKE.eval.position_multiple * SMOKE.lm_train.max_len
    )
    assert len(ev["lastk"]["nats_per_byte"]) == len(SMOKE.eval.lastk_contexts)
    assert payload["timing"]["steps_per_second"] > 0 and payload["timing"]["wall_seconds"] > 0


def test_rope_scalings_are_evaluated_without_retraining():
    (spec,) = smoke_specs(encodings=("rope",), tasks=("lm",))
    spec = dataclasses.replace(spec, scalings=("linear:2", "yarn:4"))
    payload = execute(spec)
    assert set(payload["eval"]) == {"default", "linear:2", "yarn:4"}
    default, linear = payload["eval"]["default"], payload["eval"]["linear:2"]
    assert default["nats_per_byte"] != linear["nats_per_byte"]  # the scaling changed the model's outputs


def test_randomized_positions_variant_runs_and_differs():
    (spec,) = smoke_specs(encodings=("sinusoidal",), tasks=("copy",))
    rand = dataclasses.replace(spec, randomized_max_len=64)
    assert rand.label == "sinusoidal+rand" and rand.run_id != spec.run_id
    assert execute(rand)["train"]["loss"] != execute(spec)["train"]["loss"]


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
