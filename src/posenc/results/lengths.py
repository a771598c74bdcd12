"""How long each evaluation length of a task run is, in the unit the length buckets are named in:
the trained sequence length in tokens.

A bucket "2x" holds the evaluation lengths whose longest row (``[BOS] x [SEP] y``, what the
model reads) is more than 1.5 and at most 2 times the longest training row. Each record of a task
run keeps both (``tokens`` per length, ``train_tokens``); for a record written before it did,
posenc's own tasks are measured by their formula (:func:`posenc.tasks.task_registry.max_sequence_length`)
and any other task has no buckets (no code named by a record is imported to measure it).
"""

from __future__ import annotations

from typing import Any

from posenc.tasks import task_registry


def token_lengths(ev: dict[str, Any], spec: dict[str, Any]) -> tuple[list[int], int] | None:
    """``(tokens per evaluation length, tokens of the longest training row)`` of one evaluation of a
    task run; None where they cannot be known (an older record of a task that is not posenc's)."""
    tokens, trained = ev.get("tokens"), ev.get("train_tokens")
    if tokens is not None and trained:
        return [int(t) for t in tokens], int(trained)
    task = spec["task"]
    if task not in task_registry.BUILTINS:
        return None
    lengths = [task_registry.max_sequence_length(task, int(n)) for n in ev["lengths"]]
    return lengths, task_registry.max_sequence_length(task, int(spec["train"]["max_len"]))


def in_range(ev: dict[str, Any], spec: dict[str, Any], lo: float, hi: float) -> list[int] | None:
    """Indices of the evaluation lengths whose rows are more than ``lo`` and at most ``hi`` times
    the trained tokens (None: not known, see :func:`token_lengths`)."""
    known = token_lengths(ev, spec)
    if known is None:
        return None
    tokens, trained = known
    return [i for i, t in enumerate(tokens) if lo * trained < t <= hi * trained]


def ratios(ev: dict[str, Any], spec: dict[str, Any]) -> list[float] | None:
    """Each evaluation length's longest row over the longest training row (1.0 = trained length)."""
    known = token_lengths(ev, spec)
    if known is None:
        return None
    tokens, trained = known
    return [t / trained for t in tokens]
