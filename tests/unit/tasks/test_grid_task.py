"""The 2-D resolution-extrapolation task: sampling at a grid size, answers, fixed evaluation
sets, scoring, what 'in distribution' means, and the positions each kind of encoding gets."""

from __future__ import annotations

import pytest
import torch

from posenc.core.errors import PosencError
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.tasks import grid_task as grid
from posenc.tasks.synthetic import FIRST_SYMBOL, PAD


def answer_by_hand(batch: grid.GridBatch, example: int, query: int) -> int:
    h, w = batch.size
    cells = batch.inputs[example, : h * w].reshape(h, w)
    token = int(batch.inputs[example, h * w + query])
    dr, dc = list(grid.DIRECTIONS.values())[grid.DIRECTION_TOKENS.index(token)]
    r, c = batch.positions[example, h * w + query].tolist()
    assert 0 <= r + dr < h and 0 <= c + dc < w  # the neighbour is on the grid
    return int(cells[r + dr, c + dc])


@pytest.mark.parametrize("size", [(2, 2), (4, 4), (3, 7), (12, 12)])
def test_examples_are_grids_then_queries_with_the_right_answers(size):
    batch = grid.sample_batch(16, size=size, queries=5, generator=torch.Generator().manual_seed(1))
    h, w = size
    assert batch.inputs.shape == (16, h * w + 5) == batch.targets.shape == batch.loss_mask.shape
    assert batch.positions.shape == (16, h * w + 5, 2) and batch.size == size
    assert batch.positions[0, : h * w].tolist() == [[r, c] for r in range(h) for c in range(w)]
    cells = batch.inputs[:, : h * w] - FIRST_SYMBOL
    assert int(cells.min()) >= 0 and int(cells.max()) < grid.CELL_SYMBOLS
    assert set(batch.inputs[:, h * w :].flatten().tolist()) <= set(grid.DIRECTION_TOKENS)
    assert not set(grid.DIRECTION_TOKENS) & set(cells.flatten().add(FIRST_SYMBOL).tolist())
    assert (batch.targets[~batch.loss_mask] == PAD).all() and int(batch.loss_mask.sum()) == 16 * 5
    for e in range(16):
        for q in range(5):
            assert int(batch.targets[e, h * w + q]) == answer_by_hand(batch, e, q)


def test_every_direction_and_anchor_occurs():
    batch = grid.sample_batch(512, size=(3, 3), generator=torch.Generator().manual_seed(0))
    tokens = batch.inputs[:, 9:]
    assert set(tokens.flatten().tolist()) == set(grid.DIRECTION_TOKENS)
    anchors = {tuple(p) for p in batch.positions[:, 9:].reshape(-1, 2).tolist()}
    assert anchors == {(r, c) for r in range(3) for c in range(3)}  # the centre and the rim


def test_eval_sets_are_fixed_per_size_and_seed():
    a, b = grid.eval_batch((5, 5), 8), grid.eval_batch((5, 5), 8)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.positions, b.positions)
    assert not torch.equal(a.inputs, grid.eval_batch((5, 5), 8, seed=1).inputs)
    assert grid.eval_batch((6, 6), 8).inputs.shape[1] == 40
    train = grid.sample_batch(
        8, size=(5, 5), generator=torch.Generator().manual_seed(grid.eval_seed((5, 5), 0) + 1)
    )
    assert not torch.equal(train.inputs, a.inputs)


def test_eval_sizes_and_in_distribution():
    assert grid.eval_sizes((4, 4)) == [(4, 4), (5, 5), (6, 6), (8, 8), (16, 16)]
    assert grid.eval_sizes((6, 4), (1.0, 2.0)) == [(6, 4), (12, 8)]
    assert (
        grid.in_distribution((4, 4)) and not grid.in_distribution((5, 5)) and not grid.in_distribution((3, 3))
    )
    assert grid.side_ratio((8, 8)) == 2.0
    assert grid.sequence_length((4, 4)) == 20


def test_score_counts_queries_only():
    batch = grid.eval_batch((3, 3), 4, queries=2)
    perfect = torch.nn.functional.one_hot(batch.targets, grid.VOCAB_SIZE).float()
    exact, acc = grid.score(perfect, batch)
    assert exact.all() and (acc == 1).all()
    wrong = perfect.clone()
    wrong[0, 9] = torch.nn.functional.one_hot(
        torch.tensor(PAD), grid.VOCAB_SIZE
    ).float()  # one query of one example
    wrong[1, :9] = 0  # predictions at cells do not count
    exact, acc = grid.score(wrong, batch)
    assert exact.tolist() == [False, True, True, True] and acc.tolist() == [0.5, 1.0, 1.0, 1.0]
    with pytest.raises(PosencError, match="logits have shape"):
        grid.score(perfect[:, :-1], batch)


def test_positions_for_each_kind_of_encoding():
    batch = grid.eval_batch((3, 4), 2)
    assert torch.equal(grid.positions_for(batch, 2), batch.positions)
    three = grid.positions_for(batch, 3)
    assert three.shape == (2, 16, 3) and (three[..., 0] == 0).all()
    flat = grid.positions_for(batch, 1)
    r, c = batch.positions[..., 0], batch.positions[..., 1]
    assert torch.equal(flat, r * 4 + c)  # queries sit at their anchor's row-major index


def test_bad_sizes_are_named():
    with pytest.raises(PosencError, match=r"size\[1\] must be an integer in \[2, 64\], got 1"):
        grid.sample_batch(2, size=(3, 1), generator=torch.Generator())
    with pytest.raises(PosencError, match="size must be a grid"):
        grid.eval_batch(4, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["rope_axial", "mrope", "rope", "sincos_axial"])
def test_a_model_runs_on_every_evaluation_grid(name):
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(vocab_size=grid.VOCAB_SIZE, d_model=24, num_heads=2, num_layers=1, encoding=name)
    )
    axes = next(model.encodings()).position_axes
    for size in grid.eval_sizes((3, 3)):
        batch = grid.eval_batch(size, 2)
        logits = model(batch.inputs, positions=grid.positions_for(batch, axes))
        exact, acc = grid.score(logits, batch)
        assert exact.shape == acc.shape == (2,)


# ---------------------------------------------------------------------------
# The grid task in posenc compare (a registered task: posenc compare --tasks grid).
# ---------------------------------------------------------------------------


def test_the_grid_task_is_registered_and_passes_the_task_contract():
    import posenc.testing
    from posenc.tasks import task_registry as registry

    assert registry.task_class("grid") is grid.GridTask and "grid" in registry.task_names()
    report = posenc.testing.check_task("grid")
    assert report.passed, str(report)
    batch = registry.eval_batch("grid", 6, 5, seed=0)  # n is the side: a 6 x 6 grid
    assert batch.inputs.shape == (5, 36 + grid.QUERIES) and batch.positions.shape == (5, 40, 2)
    assert torch.equal(batch.inputs, registry.eval_batch("grid", 6, 5, seed=0).inputs)
    # what each kind of encoding reads: coordinates, (t=0, h, w), or the grid flattened row by row
    assert torch.equal(batch.positions_for(2), batch.positions)
    assert batch.positions_for(3)[..., 0].eq(0).all() and torch.equal(
        batch.positions_for(3)[..., 1:], batch.positions
    )
    rows, cols = batch.positions.unbind(-1)
    assert torch.equal(batch.positions_for(1), rows * 6 + cols)


def test_posenc_compare_trains_and_evaluates_on_the_grid(tmp_path):
    """The grid profile at smoke size: grid encodings read coordinates, 1-D ones the flattened grid;
    every evaluation side is scored, exact match and query accuracy, converged or not."""
    import json

    from click.testing import CliRunner

    from posenc.cli import main

    args = ["compare", "--profile", "grid", "--out", str(tmp_path), "--encodings", "rope_axial,mrope,rope",
            "--seeds", "0", "--workers", "1", "--set", "model.d_model=16", "--set", "model.num_heads=2",
            "--set", "task_train.steps=4", "--set", "task_train.warmup_steps=1", "--set", "task_train.check_every=2",
            "--set", "task_train.valid_samples=8",
            "--set", "eval.samples=4", "--no-report"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(p.read_text()) for p in tmp_path.glob("runs/grid/*.json")]
    assert {r["spec"]["encoding"] for r in records} == {"rope_axial", "mrope", "rope"}
    for record in records:
        evaluation = record["result"]["eval"]["default"]
        assert evaluation["lengths"] == [4, 5, 6, 8]  # 20, 29, 40, 68 tokens: in, 1.5x, 2x, 4x
        assert evaluation["tokens"] == [20, 29, 40, 68] and evaluation["train_tokens"] == 20
        assert evaluation["free_running"]["decoding"] is None  # queries are answered where they stand
        assert len(evaluation["token_accuracy"]) == 4 and all(
            0 <= a <= 1 for a in evaluation["token_accuracy"]
        )
