"""Training stops at in-distribution convergence (held-out checks, a step cap) and says so."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.trainer import Checker, heldout_task_batch, learning_rate, plateaued
from posenc.compare.work import execute
from posenc.records.models import build_model
from posenc.records.spec import RunSpec
from posenc.tasks import synthetic

SMOKE = get_profile("smoke")


def _spec(task: str, **train):
    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=(task,), seeds=(0,)).specs
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **train))


def test_a_task_run_stops_at_the_first_check_that_reaches_the_threshold():
    # Threshold 0: the first held-out check (step check_every) already passes.
    spec = _spec("copy", steps=30, check_every=4, converge_at=0.0)
    out = execute(spec)["train"]
    assert out["converged"] is True and out["steps_to_converge"] == 4 == out["steps"]
    assert len(out["loss"]) == 4 and out["checks"]["step"] == [4]
    assert list(out["checks"]) == ["step", "train_loss", "valid_exact_match"]  # the learning curve


def test_a_run_that_cannot_converge_trains_to_the_cap_and_is_marked():
    spec = _spec("copy", steps=12, check_every=4, converge_at=1.01)  # unreachable
    out = execute(spec)["train"]
    assert out["converged"] is False and out["steps_to_converge"] is None
    assert out["steps"] == 12 == len(out["loss"]) and out["checks"]["step"] == [4, 8, 12]


def test_the_check_scores_the_held_out_training_distribution_not_an_evaluation_length():
    spec = _spec("copy", valid_samples=40)
    batch = heldout_task_batch(spec)
    assert batch.inputs.shape[0] == 40
    assert int(batch.lengths.min()) >= spec.train.min_len and int(batch.lengths.max()) <= spec.train.max_len
    # A fixed set: the same examples at every check, and not the training stream's first batch.
    assert torch.equal(heldout_task_batch(spec).inputs, batch.inputs)
    stream = synthetic.sample_batch(
        "copy", 40, min_len=1, max_len=spec.train.max_len, generator=torch.Generator().manual_seed(spec.seed)
    )
    assert not torch.equal(stream.inputs[:, :4], batch.inputs[:, :4])


def test_exact_match_check_counts_solved_examples():
    spec = _spec("copy", valid_samples=16)
    checker = Checker(spec)
    model = build_model(spec)
    batch = checker.batch
    answers = batch.targets.clone()

    class Oracle(torch.nn.Module):  # predicts the right token wherever the answer is scored
        def forward(self, inputs, positions=None):
            logits = torch.zeros(*inputs.shape, synthetic.VOCAB_SIZE)
            rows = {tuple(r.tolist()): i for i, r in enumerate(batch.inputs)}
            for i, row in enumerate(inputs):
                logits[i].scatter_(1, answers[rows[tuple(row.tolist())]][:, None], 1.0)
            return logits

    oracle = Oracle()
    oracle.position_scale = 1.0
    assert checker.score(oracle) == 1.0
    assert 0.0 <= checker.score(model) < 1.0  # an untrained model does not solve copy


@pytest.mark.parametrize(
    ("losses", "expected"),
    [
        ([3.0, 2.0, 1.5, 1.2], False),  # still falling fast
        ([3.0, 2.0, 1.99, 1.985], True),  # last two within 1% of the best before them
        ([3.0, 2.0, 2.1, 2.05], True),  # no better at all
        ([2.0, 1.99], False),  # too few checks to tell
    ],
)
def test_lm_plateau_rule(losses, expected):
    assert plateaued(losses, checks=2, tolerance=0.01) is expected


def test_an_lm_run_stops_on_a_plateau():
    spec = _spec("lm", steps=40, check_every=2, plateau_checks=1, plateau=1.0)  # any loss counts as flat
    out = execute(spec)["train"]
    assert out["converged"] is True and out["steps"] == 4 and out["checks"]["step"] == [2, 4]
    assert list(out["checks"]) == ["step", "train_loss", "valid_loss"]


def test_an_lm_plateau_before_plateau_after_does_not_count():
    spec = _spec("lm", steps=40, check_every=2, plateau_checks=1, plateau=1.0, plateau_after=6)
    out = execute(spec)["train"]
    assert out["converged"] is True and out["steps"] == 6 and out["checks"]["step"] == [2, 4, 6]


def test_a_converged_run_hands_back_its_unused_progress():
    spec = _spec("copy", steps=30, check_every=4, converge_at=0.0)
    seen, checks = [], []
    execute(spec, lambda units, status=None: (seen.append(units), status and checks.append(status)))
    assert sum(seen) == spec.work_units()  # the bar reaches the end although training stopped early
    assert [c["step"] for c in checks] == [4]  # and the display heard of the one check


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def test_learning_rate_schedule():
    (spec,) = smoke_specs(encodings=("nope",), tasks=("copy",))
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, steps=200, warmup_steps=20))
    lrs = [learning_rate(s, spec) for s in range(200)]
    assert lrs[19] == pytest.approx(spec.train.lr)  # end of warm-up: peak
    assert all(a < b for a, b in zip(lrs[:19], lrs[1:20]))  # linear warm-up rises
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:]))  # cosine decays
    assert lrs[-1] == pytest.approx(spec.train.min_lr_ratio * spec.train.lr, rel=1e-3)
