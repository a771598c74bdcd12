"""The base class of a synthetic task of ``posenc compare`` (the protocol: :mod:`posenc.tasks.task_registry`).

Axis legend: b batch, t tokens, n the length an example is drawn at.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from posenc.tasks import synthetic


class Task:
    """A synthetic task: examples drawn at a length ``n`` (the protocol: module docstring).

    Subclass it, set the class attributes and define :meth:`example`; override
    :meth:`input_length` / :meth:`answer_length` when ``x`` / ``y`` can be longer than ``n``.
    """

    #: One line: what x and y are (``posenc list --tasks``, ``posenc compare --help``).
    description: ClassVar[str] = ""
    #: Tokens of the model: ids 0-3 are PAD, BOS, SEP, EOS; x and y use 4 .. vocab_size - 1.
    vocab_size: ClassVar[int] = synthetic.VOCAB_SIZE
    #: Accuracy of guessing one answer token (1 / the size of the answer alphabet).
    chance: ClassVar[float] = 0.0
    #: Axes of the tokens' positions: 1 for a sequence; a task whose tokens lie on a grid (2 for
    #: (row, column)) draws whole batches with their coordinates (:meth:`draw_batch`).
    position_axes: ClassVar[int] = 1
    #: The smallest n the task can draw at (a grid needs two rows).
    min_length: ClassVar[int] = 1

    def example(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)``: one example at length ``n``, all randomness from ``generator``."""
        raise NotImplementedError

    def draw_batch(self, lengths: list[int], generator: torch.Generator) -> synthetic.TaskBatch:
        """One batch, a row per length: ``[BOS] x [SEP] y [EOS]`` rows of :meth:`example`.

        A task whose rows are laid out otherwise overrides it instead of :meth:`example`: the
        grid task (:mod:`posenc.tasks.grid_task`) answers each query at the query's own token, and
        gives its tokens' coordinates (``TaskBatch.positions``) and the flattened grid
        (``TaskBatch.flat_positions``) for encodings of sequence positions.
        """
        return synthetic.collate([self.example(n, generator) for n in lengths], lengths)

    def input_length(self, n: int) -> int:
        """The longest ``x`` an example at ``n`` can have."""
        return n

    def answer_length(self, n: int) -> int:
        """The longest ``y`` an example at ``n`` can have."""
        return n

    def max_sequence_length(self, n: int) -> int:
        """Tokens in the longest row the model reads at ``n``: ``[BOS] x [SEP] y`` (EOS is only
        predicted)."""
        return 1 + self.input_length(n) + 1 + self.answer_length(n)


__all__ = ["Task"]
