"""Passkey retrieval (Mohtashami & Jaggi 2023): a key hidden at a depth of filler, asked for at the end.

A prompt of ``L`` tokens is an instruction, filler sentences repeated, the key sentence at
``depth`` (0 = right after the instruction, 1 = right before the question) and the question;
the model answers by greedy generation and scores 1 when the first number it writes is the key,
exactly. The instruction and the filler are posenc's own sentences in the protocol's style (a
short instruction, then a few plain sentences repeated).

Every prompt of one scaling shares its beginning, the instruction and the filler up to its key,
so the prompts of a trial are forks of one trunk: the trunk's KV cache is computed once up to each
key, each prompt's rest (key, filler, question, answer) is run on a copy of it, and the cache is
cut back (:meth:`transformers.Cache.crop`) before the trunk goes on. The key is drawn from the
protocol's seed, the trial, the length and the depth, so a resumed run asks the same questions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from posenc.core.errors import PosencError

INSTRUCTION = (
    "A pass key is hidden somewhere in the long text below. Find it and keep it in mind: "
    "you will be asked for it at the end.\n"
)
FILLER = "The river runs to the sea. The hills are quiet. The wind is cool. Here we go. On and on it goes. "
KEY = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "\nWhat is the pass key? The pass key is"
DIGITS = 5
ANSWER = DIGITS + 3  # tokens generated per prompt (the key and a few after it)


@dataclass(frozen=True)
class Fork:
    """One prompt branching off the trunk at ``position`` (tokens of the trunk before it)."""

    position: int
    suffix: tuple[int, ...]  # key sentence, more filler, the question
    answer: str  # the key's digits
    length: int  # the prompt's length in tokens (trunk part + suffix)
    depth: float  # the depth asked for (0 .. 1)
    placed: float  # where the key is, as a share of the filler (at a sentence boundary)


def key_for(seed: int, trial: int, length: int, depth: float) -> str:
    """The key of one prompt: DIGITS digits, the first not 0, drawn from its coordinates."""
    digest = hashlib.sha256(f"{seed}:{trial}:{length}:{depth!r}".encode()).digest()
    return str(10 ** (DIGITS - 1) + int.from_bytes(digest[:8], "big") % (9 * 10 ** (DIGITS - 1)))


def trunk(
    tokenize: Callable[[str, bool], list[int]],
    cells: list[tuple[int, float]],
    *,
    seed: int,
    trial: int,
) -> tuple[tuple[int, ...], tuple[Fork, ...]]:
    """The trunk's tokens and one fork per ``(length, depth)`` of ``cells``.

    ``tokenize(text, special)`` gives token ids (``special``: with the tokenizer's start-of-text
    ids). The key goes at a filler-sentence boundary, so a depth moves by at most one block of
    filler sentences (about 30 tokens)."""
    head = tokenize(INSTRUCTION, True)
    block = tokenize(FILLER, False)
    question = tokenize(QUESTION, False)
    forks = []
    for length, depth in cells:
        key = key_for(seed, trial, length, depth)
        key_ids = tokenize(KEY.format(key=key), False)
        body = length - len(head) - len(key_ids) - len(question)
        if body < len(block):
            raise PosencError(
                f"passkey length {length} is too short for the prompt ({length - body + len(block)} tokens at least)"
            )
        position = round(depth * body / len(block)) * len(block)
        position = min(position, body)
        rest = body - position
        filler = [block[(position + i) % len(block)] for i in range(rest)]
        forks.append(
            Fork(
                len(head) + position, tuple(key_ids + filler + question), key, length, depth, position / body
            )
        )
    deepest = max(fork.position for fork in forks) - len(head)
    tokens = head + [block[i % len(block)] for i in range(deepest)]
    forks.sort(key=lambda fork: (fork.position, fork.length))
    return tuple(tokens), tuple(forks)


def score(answer: str, generated: str) -> bool:
    """Whether the first number in ``generated`` is ``answer`` exactly."""
    found = re.search(r"\d+", generated)
    return found is not None and found.group(0) == answer


__all__ = [
    "ANSWER",
    "DIGITS",
    "FILLER",
    "INSTRUCTION",
    "KEY",
    "QUESTION",
    "Fork",
    "key_for",
    "score",
    "trunk",
]
