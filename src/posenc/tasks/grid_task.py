"""A resolution-extrapolation task on a 2-D grid: train on one grid size, test on larger ones.

Axis legend: b batch, t tokens, (h, w) grid rows and columns, q queries per example.

An example is an ``h x w`` grid of random symbols in row-major order, then ``q`` queries. A
query is a direction token (one of the 8 king moves: up, down, left, right and the diagonals)
placed AT a grid cell, its anchor: it carries the anchor's coordinates as its position, not
its content. Its answer is the symbol of the cell one step from the anchor in that direction::

    cells  s(0,0) s(0,1) .. s(h-1,w-1)      positions (r, c) of each cell
    query  UP_LEFT  RIGHT  DOWN  ...         positions (r, c) of each query's anchor
    target s(r-1,c-1) s(r,c+1) s(r+1,c) ...  at the query tokens only (the loss mask)

Every cell is drawn at random (64 symbols, with repetition), so nothing but position finds the
answer: the query must attend to the key one step away from its own position. A relative
2-D encoding (axial RoPE, RoPE-Mixed, M-RoPE) can express "one row up" at every grid size;
a 1-D encoding on the flattened grid sees "one row up" as ``w`` tokens back, a distance that
grows with the grid; a learned table has no trained rows past the training grid. Queries come
after the whole grid, so a causal model sees every cell from every query.

Sizes: training draws every example on the training grid (``size``); evaluation uses square
grids whose side is the training side times 1, 1.25, 1.5, 2 and 4 (:func:`eval_sizes`). In
distribution means exactly the training grid (:func:`in_distribution`): the coordinates and
the flattened distances seen in training. Evaluation sets are fixed per (size, seed), the
same for every encoding (:func:`eval_batch`). Chance is 1/64 per query.

Positions for an encoding with ``a`` axes: :func:`positions_for` (``(b, t, 2)`` coordinates,
``(b, t, 3)`` with ``t = 0`` for ``(t, h, w)`` encodings, or the row-major index
``r w + c`` as ``(b, t)`` sequence positions for 1-D encodings).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch

from posenc.core.axes import flatten_grid, grid_positions, with_time
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.tasks.synthetic import FIRST_SYMBOL, NUM_SYMBOLS, PAD, VOCAB_SIZE, TaskBatch
from posenc.tasks.task import Task

#: The 8 king moves (row step, column step), in the order of their tokens.
DIRECTIONS: dict[str, tuple[int, int]] = {
    "up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1),
    "up_left": (-1, -1), "up_right": (-1, 1), "down_left": (1, -1), "down_right": (1, 1),
}  # fmt: skip
CELL_SYMBOLS = 64  # cell contents: symbols 0 .. 63 (tokens FIRST_SYMBOL + s)
#: Direction k is the last symbols of the shared vocabulary (never a cell's content).
DIRECTION_TOKENS = tuple(FIRST_SYMBOL + NUM_SYMBOLS - len(DIRECTIONS) + k for k in range(len(DIRECTIONS)))
CHANCE = 1 / CELL_SYMBOLS
TRAIN_SIZE = (4, 4)  # the default training grid
EVAL_SCALES = (1.0, 1.25, 1.5, 2.0, 4.0)  # evaluation side / training side (the benchmark's buckets)
QUERIES = 4  # queries per example
MAX_SIDE = 64

__all__ = [
    "CHANCE",
    "GridTask",
    "DIRECTIONS",
    "DIRECTION_TOKENS",
    "EVAL_SCALES",
    "VOCAB_SIZE",
    "GridBatch",
    "eval_batch",
    "eval_sizes",
    "in_distribution",
    "positions_for",
    "sample_batch",
    "score",
    "sequence_length",
]


@dataclass(frozen=True)
class GridBatch:
    """One batch; every example on a grid of the same ``size``.

    Attributes:
        inputs: ``(b, t)`` int64: the ``h w`` cells, then the query tokens.
        targets: ``(b, t)`` int64: the answer at each query token, PAD elsewhere.
        loss_mask: ``(b, t)`` bool, True exactly at the query tokens.
        positions: ``(b, t, 2)`` int64 ``(row, column)``: the cell's own, the query's anchor.
        size: ``(h, w)``.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    positions: torch.Tensor
    size: tuple[int, int]


def _size(size: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise PosencError(f"size must be a grid (rows, columns), e.g. (4, 4); got {size!r}")
    h, w = (check_int(f"size[{k}]", v, minimum=2, maximum=MAX_SIDE) for k, v in enumerate(size))
    return h, w


def sequence_length(size: tuple[int, int], queries: int = QUERIES) -> int:
    """Tokens per example on a grid of ``size``: ``h w`` cells plus the queries."""
    h, w = _size(size)
    return h * w + check_int("queries", queries, minimum=1)


def _examples(batch_size: int, size: tuple[int, int], queries: int, g: torch.Generator) -> GridBatch:
    h, w = size
    n = h * w
    cells = torch.randint(0, CELL_SYMBOLS, (batch_size, h, w), generator=g)  # (b, h, w)
    steps = torch.tensor(list(DIRECTIONS.values()))  # (8, 2)
    direction = torch.randint(0, len(DIRECTIONS), (batch_size, queries), generator=g)  # (b, q)
    step = steps[direction]  # (b, q, 2)
    # anchors uniform over the cells whose neighbour in that direction is inside the grid
    low = (-step).clamp_min(0)  # (b, q, 2): row/col >= 1 when stepping up/left
    high = torch.tensor([h, w]) - step.clamp_min(0)  # exclusive
    u = torch.rand(batch_size, queries, 2, generator=g)
    anchor = low + (u * (high - low)).floor().long()  # (b, q, 2)
    target_cell = anchor + step
    rows = torch.arange(batch_size)[:, None]
    answers = cells[rows, target_cell[..., 0], target_cell[..., 1]] + FIRST_SYMBOL  # (b, q)
    inputs = torch.cat(
        [cells.reshape(batch_size, n) + FIRST_SYMBOL, torch.tensor(DIRECTION_TOKENS)[direction]], 1
    )
    targets = torch.cat([torch.full((batch_size, n), PAD), answers], 1)
    loss_mask = torch.cat(
        [torch.zeros(batch_size, n, dtype=torch.bool), torch.ones(batch_size, queries, dtype=torch.bool)], 1
    )
    coords = grid_positions((h, w))[0].expand(batch_size, n, 2)
    positions = torch.cat([coords, anchor], 1)  # (b, t, 2)
    return GridBatch(inputs, targets, loss_mask, positions, (h, w))


def sample_batch(
    batch_size: int,
    *,
    size: tuple[int, int] = TRAIN_SIZE,
    queries: int = QUERIES,
    generator: torch.Generator,
) -> GridBatch:
    """A training batch on the ``size`` grid, fresh from ``generator``."""
    check_int("batch_size", batch_size, minimum=1)
    return _examples(batch_size, _size(size), check_int("queries", queries, minimum=1), generator)


def eval_seed(size: tuple[int, int], seed: int) -> int:
    """Seed of the fixed evaluation set for (size, seed): identical across encodings and runs."""
    h, w = size
    return (zlib.crc32(b"grid") * 1_000_003 + h * 7919 + w * 104_729 + seed * 15_485_863) % (2**62)


def eval_batch(
    size: tuple[int, int], num_samples: int, *, queries: int = QUERIES, seed: int = 0
) -> GridBatch:
    """``num_samples`` examples on the ``size`` grid, the same for everyone who asks."""
    size = _size(size)
    check_int("num_samples", num_samples, minimum=1)
    g = torch.Generator().manual_seed(eval_seed(size, seed))
    return _examples(num_samples, size, check_int("queries", queries, minimum=1), g)


def eval_sizes(
    train_size: tuple[int, int] = TRAIN_SIZE, scales: tuple[float, ...] = EVAL_SCALES
) -> list[tuple[int, int]]:
    """Evaluation grids: each side of ``train_size`` times each scale (rounded, distinct, sorted)."""
    h, w = _size(train_size)
    sizes = {(max(2, round(h * s)), max(2, round(w * s))) for s in scales}
    return sorted(_size(size) for size in sizes)


def in_distribution(size: tuple[int, int], train_size: tuple[int, int] = TRAIN_SIZE) -> bool:
    """True for the training grid itself: every coordinate and every flattened distance was seen."""
    return _size(size) == _size(train_size)


def positions_for(batch: GridBatch, axes: int) -> torch.Tensor:
    """What an encoding with ``axes`` position axes is given: ``(b, t, 2)`` coordinates,
    ``(b, t, 3)`` with ``t = 0``, or ``(b, t)`` row-major indices ``r w + c`` (1-D encodings)."""
    axes = check_int("axes", axes, minimum=1, maximum=3)
    if axes == 2:
        return batch.positions
    if axes == 3:
        return with_time(batch.positions, 0)
    return flatten_grid(batch.positions, batch.size)


def score(logits: torch.Tensor, batch: GridBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example exact match (every query right, bool ``(b,)``) and query accuracy (``(b,)``).

    Args:
        logits: ``(b, t, V)`` from one pass over ``batch.inputs`` with :func:`positions_for`.
    """
    if logits.shape[:2] != batch.inputs.shape:
        raise PosencError(
            f"logits have shape {tuple(logits.shape)}; expected {tuple(batch.inputs.shape)} + (V,)"
        )
    correct = (logits.argmax(-1) == batch.targets) & batch.loss_mask  # (b, t)
    counts = batch.loss_mask.sum(-1)
    return correct.sum(-1) == counts, correct.sum(-1).float() / counts.float()


def side_ratio(size: tuple[int, int], train_size: tuple[int, int] = TRAIN_SIZE) -> float:
    """How much larger a grid is than the training one, per side (the geometric mean of both)."""
    (h, w), (th, tw) = _size(size), _size(train_size)
    return math.sqrt((h / th) * (w / tw))


class GridTask(Task):
    """The grid task in ``posenc compare`` (``--tasks grid``): ``n`` is the side of a square grid.

    Training draws every example on the ``max_len x max_len`` grid of the profile's
    ``task_train`` (one grid size: in distribution means exactly that grid); evaluation at a
    side ``n`` uses the ``n x n`` grid. Each row is the ``n^2`` cells, then :data:`QUERIES`
    queries answered at their own tokens; the loss and the scores count the queries.
    """

    description = "an n x n grid of random symbols, then queries 'the cell one king move from here'"
    vocab_size = VOCAB_SIZE
    chance = CHANCE
    position_axes = 2
    min_length = 2

    def draw_batch(self, lengths: list[int], generator: torch.Generator) -> TaskBatch:
        """One batch on the grid of side ``max(lengths)`` (a batch shares one grid size)."""
        side = _side(max(lengths))
        batch = _examples(len(lengths), (side, side), QUERIES, generator)
        flat = flatten_grid(batch.positions, batch.size)
        return TaskBatch(
            batch.inputs, batch.targets, batch.loss_mask, torch.tensor(lengths, dtype=torch.long),
            positions=batch.positions, flat_positions=flat,
        )  # fmt: skip

    def input_length(self, n: int) -> int:
        return _side(n) ** 2 + QUERIES

    def answer_length(self, n: int) -> int:
        return QUERIES

    def max_sequence_length(self, n: int) -> int:
        return sequence_length((_side(n), _side(n)))


def _side(n: int) -> int:
    """The side of the square grid a benchmark length ``n`` names (``eval.lengths``, the lengths
    ``eval.scales`` gives, ``task_train``'s ``min_len`` / ``max_len``), checked."""
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_SIDE:
        raise PosencError(
            f"task grid: n = {n!r} is the side of its square grid and must be an integer in [2, {MAX_SIDE}] "
            f"(a {MAX_SIDE} x {MAX_SIDE} grid is {MAX_SIDE * MAX_SIDE} tokens); set eval.lengths (or eval.scales) "
            "and task_train.min_len / max_len within it"
        )
    return n
