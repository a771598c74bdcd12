"""Synthetic length-generalisation tasks, generated on the fly from a seed.

Axis legend: b batch, t tokens of the (shifted) sequence, n input length, m output length.

Every example is one causal-LM sequence (the benchmark protocol, docs/benchmark.md)::

    [BOS] x_1 .. x_n [SEP] y_1 .. y_m [EOS]

The model reads ``sequence[:-1]`` and predicts ``sequence[1:]``; the loss (and
every metric) counts only the predictions of ``y_1 .. y_m`` and ``EOS``. Because a
causal model's teacher-forced argmax at each answer position equals what greedy
decoding would emit there *when every earlier answer token was right*, "all answer
tokens right in one teacher-forced pass" is exactly greedy exact match (for positions that do
not depend on the whole row). Past a first error the two part: teacher-forced accuracy puts the
model back on the gold answer; the benchmark also decodes free-running (its own outputs fed back)
to say how far a model copies.

The vocabulary is shared by every task: 5 special tokens, then 128 symbols.

| task | x | y | why |
|---|---|---|---|
| ``copy`` | n distinct symbols | x | content can align |
| ``reverse`` | n distinct symbols | x reversed | needs positional lookup |
| ``copy_binary`` | n bits | x | content cannot align |
| ``selective_copy`` | n symbols with 0-3 blanks after each (but the last) | the n symbols | count what matters |
| ``parity`` | n bits | parity bit | control: nothing should extrapolate |
| ``passkey`` | a 2-symbol passkey, then n filler symbols | the passkey | retrieval from far back |

``n`` is always the number of *content* tokens (for ``selective_copy`` the input
holds up to ``4n - 3`` tokens; the answer has n), except for ``passkey``, where it is
the number of filler tokens between the passkey and the question (``SEP``): the key
always comes first, so a longer n puts what must be retrieved farther back, past any
distance seen in training (the passkey probe of Mohtashami and Jaggi 2023, which
separates "perplexity stays flat" from "far context is used"; the key comes from one
half of the symbols and the filler from the other, so it is found by content, and
only the distance changes).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from posenc.core.checks import check_choice, check_int
from posenc.core.errors import PosencError

PAD, BOS, SEP, EOS, BLANK = 0, 1, 2, 3, 4
SPECIAL_TOKENS = ("PAD", "BOS", "SEP", "EOS", "BLANK")
NUM_SYMBOLS = 128
FIRST_SYMBOL = len(SPECIAL_TOKENS)  # symbol s is token FIRST_SYMBOL + s
VOCAB_SIZE = FIRST_SYMBOL + NUM_SYMBOLS  # 133


@dataclass(frozen=True)
class TaskBatch:
    """One padded batch. Padding is on the right (a causal model never sees it).

    Attributes:
        inputs: ``(b, t)`` int64, ``sequence[:-1]`` padded with PAD.
        targets: ``(b, t)`` int64, ``sequence[1:]`` padded with PAD.
        loss_mask: ``(b, t)`` bool, True exactly at the predictions of y and EOS.
        lengths: ``(b,)`` int64, the n of each example.
        positions: ``(b, t, a)`` int64 coordinates of tokens on a grid (``-1``: no grid position),
            for tasks whose tokens are not a sequence (:mod:`posenc.tasks.grid_task`); None: the
            tokens are a sequence and every encoding reads ``arange(t)``.
        flat_positions: ``(b, t)`` int64, what an encoding of sequence positions reads instead
            of ``positions`` (the grid flattened row by row); None with ``positions`` None.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    lengths: torch.Tensor
    positions: torch.Tensor | None = None
    flat_positions: torch.Tensor | None = None

    def rows(self, index: slice) -> TaskBatch:
        """The batch of rows ``index``."""
        return self._map(lambda t: t[index], lengths=self.lengths[index])

    def to(self, device: str | torch.device) -> TaskBatch:
        """The batch on ``device`` (its lengths stay on the CPU)."""
        return self._map(lambda t: t.to(device), lengths=self.lengths)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor], *, lengths: torch.Tensor) -> TaskBatch:
        def opt(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else fn(t)

        return TaskBatch(fn(self.inputs), fn(self.targets), fn(self.loss_mask), lengths,
                         opt(self.positions), opt(self.flat_positions))  # fmt: skip

    def positions_for(self, axes: int) -> torch.Tensor | None:
        """What an encoding whose positions have ``axes`` axes reads: None for a sequence task;
        for a grid task its coordinates, with a time axis 0 in front for ``(t, h, w)``
        encodings, or the flattened grid for sequence encodings."""
        if self.positions is None or axes == self.positions.shape[-1]:
            return self.positions
        if axes == 1:
            return self.flat_positions
        if axes == self.positions.shape[-1] + 1:  # an image as one frame: t = 0 (-1 stays -1)
            time = torch.where(self.positions[..., :1] < 0, -1, 0)
            return torch.cat([time, self.positions], dim=-1)
        raise PosencError(
            f"the task's tokens have {self.positions.shape[-1]} coordinates; an encoding with {axes} "
            "position axes cannot read them"
        )


# ---------------------------------------------------------------------------
# One function per task: (n, generator) -> (x (n',), y (m,)) as token ids.
# ---------------------------------------------------------------------------


def _distinct_symbols(n: int, g: torch.Generator) -> torch.Tensor:
    if n > NUM_SYMBOLS:
        raise PosencError(f"n must be <= {NUM_SYMBOLS} for tasks with distinct symbols, got {n}")
    return torch.randperm(NUM_SYMBOLS, generator=g)[:n] + FIRST_SYMBOL


def _bits(n: int, g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n,), generator=g) + FIRST_SYMBOL


def copy(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n distinct symbols out of 128; y = x."""
    x = _distinct_symbols(n, g)
    return x, x.clone()


def reverse(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n distinct symbols; y = x reversed."""
    x = _distinct_symbols(n, g)
    return x, x.flip(0)


def copy_binary(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x in {0,1}^n; y = x (content cannot tell the model where it is)."""
    x = _bits(n, g)
    return x, x.clone()


def selective_copy(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n symbols (with repetition) separated by 0-3 BLANKs; y = the symbols."""
    content = torch.randint(0, NUM_SYMBOLS, (n,), generator=g) + FIRST_SYMBOL
    gaps = torch.randint(0, 4, (max(n - 1, 0),), generator=g).tolist() + [0]
    pieces = []
    for token, gap in zip(content.tolist(), gaps):
        pieces.append(token)
        pieces.extend([BLANK] * gap)
    return torch.tensor(pieces, dtype=torch.long), content


def parity(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x in {0,1}^n; y = (sum x) mod 2, one token."""
    x = _bits(n, g)
    return x, (((x - FIRST_SYMBOL).sum() % 2) + FIRST_SYMBOL).reshape(1)


PASSKEY_LEN = 2  # symbols in a passkey
_HALF = NUM_SYMBOLS // 2  # passkey symbols: [64, 128); filler: [0, 64)


def passkey(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A 2-symbol passkey, then n filler symbols; y = the passkey."""
    key = torch.randint(_HALF, NUM_SYMBOLS, (PASSKEY_LEN,), generator=g) + FIRST_SYMBOL
    filler = torch.randint(0, _HALF, (n,), generator=g) + FIRST_SYMBOL
    return torch.cat([key, filler]), key.clone()


TASKS: dict[str, Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]] = {
    "copy": copy,
    "reverse": reverse,
    "copy_binary": copy_binary,
    "selective_copy": selective_copy,
    "parity": parity,
    "passkey": passkey,
}

#: Chance level of one answer token (1 / size of the answer alphabet).
CHANCE = {"copy": 1 / NUM_SYMBOLS, "reverse": 1 / NUM_SYMBOLS, "copy_binary": 0.5,
          "selective_copy": 1 / NUM_SYMBOLS, "parity": 0.5, "passkey": 1 / _HALF}  # fmt: skip


def max_sequence_length(task: str, n: int) -> int:
    """Longest ``inputs`` row (sequence minus one) an example of length n can produce."""
    check_choice("task", task, tuple(TASKS))
    x_len = {"selective_copy": 4 * n - 3, "passkey": PASSKEY_LEN + n}.get(task, n)
    y_len = {"parity": 1, "passkey": PASSKEY_LEN}.get(task, n)
    return 1 + x_len + 1 + y_len + 1 - 1


# ---------------------------------------------------------------------------
# Batching.
# ---------------------------------------------------------------------------


def collate(examples: list[tuple[torch.Tensor, torch.Tensor]], lengths: list[int]) -> TaskBatch:
    """Build ``[BOS] x [SEP] y [EOS]`` rows, shift them, pad right, mark the answer."""
    rows, answer_starts = [], []
    for x, y in examples:
        rows.append(torch.cat([torch.tensor([BOS]), x, torch.tensor([SEP]), y, torch.tensor([EOS])]))
        answer_starts.append(len(x) + 2)  # index (in the full row) of y_1
    t = max(len(r) for r in rows) - 1
    inputs = torch.full((len(rows), t), PAD, dtype=torch.long)
    targets = torch.full((len(rows), t), PAD, dtype=torch.long)
    loss_mask = torch.zeros((len(rows), t), dtype=torch.bool)
    for i, (row, start) in enumerate(zip(rows, answer_starts)):
        inputs[i, : len(row) - 1] = row[:-1]
        targets[i, : len(row) - 1] = row[1:]
        loss_mask[i, start - 1 : len(row) - 1] = True  # targets[start-1] == row[start] == y_1
    return TaskBatch(inputs, targets, loss_mask, torch.tensor(lengths, dtype=torch.long))


def sample_batch(
    task: str, batch_size: int, *, min_len: int, max_len: int, generator: torch.Generator
) -> TaskBatch:
    """A training batch: each example's n ~ U{min_len .. max_len}, fresh from ``generator``."""
    fn = TASKS[check_choice("task", task, tuple(TASKS))]
    check_int("batch_size", batch_size, minimum=1)
    check_int("min_len", min_len, minimum=1)
    check_int("max_len", max_len, minimum=min_len)
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator).tolist()
    return collate([fn(n, generator) for n in lengths], lengths)


def eval_seed(task: str, n: int, seed: int) -> int:
    """Seed of the fixed evaluation set for (task, n): identical across encodings and runs."""
    return (zlib.crc32(task.encode()) * 1_000_003 + n * 7919 + seed * 104_729) % (2**62)


def eval_batch(task: str, n: int, num_samples: int, *, seed: int = 0) -> TaskBatch:
    """``num_samples`` examples of exactly length n, the same for everyone who asks."""
    fn = TASKS[check_choice("task", task, tuple(TASKS))]
    check_int("n", n, minimum=1)
    check_int("num_samples", num_samples, minimum=1)
    g = torch.Generator().manual_seed(eval_seed(task, n, seed))
    return collate([fn(n, g) for _ in range(num_samples)], [n] * num_samples)


def answer_accuracy(logits: torch.Tensor, batch: TaskBatch) -> torch.Tensor:
    """Per-example share of the answer's own tokens ``y_1 .. y_m`` predicted right (float ``(b,)``).

    EOS is left out (:func:`score`'s token accuracy counts it): a model that copies every token
    but does not stop still scores 1, and the floor is the chance of the answer's alphabet (1/128
    for copy, 1/64 for a passkey symbol) rather than the share EOS has of the answer (a third of a
    passkey's). Answer tokens are symbols, never EOS, so they are the loss mask's non-EOS targets.

    Args:
        logits: ``(b, t, V)`` from one teacher-forced pass over ``batch.inputs``.
    """
    answer = batch.loss_mask & (batch.targets != EOS)  # (b, t)
    correct = (logits.argmax(-1) == batch.targets) & answer
    return correct.sum(-1).float() / answer.sum(-1).float()


def score(logits: torch.Tensor, batch: TaskBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example exact match (bool ``(b,)``) and answer-token accuracy (float ``(b,)``).

    Args:
        logits: ``(b, t, V)`` from one teacher-forced pass over ``batch.inputs``.
    """
    correct = (logits.argmax(-1) == batch.targets) & batch.loss_mask  # (b, t)
    counts = batch.loss_mask.sum(-1)  # (b,)
    exact = correct.sum(-1) == counts
    return exact, correct.sum(-1).float() / counts.float()
