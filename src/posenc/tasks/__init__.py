"""Benchmark data: synthetic length-generalisation tasks and byte-level text.

``TASKS`` (synthetic, generated on the fly from a seed) plus the language-model
task ``"lm"`` on the Python standard library's own sources (:mod:`posenc.tasks.text`).
"""

from posenc.tasks.synthetic import (
    CHANCE,
    TASKS,
    VOCAB_SIZE,
    TaskBatch,
    answer_accuracy,
    eval_batch,
    max_sequence_length,
    sample_batch,
    score,
)
from posenc.tasks.text import TextCorpus, stdlib_corpus

#: Every task name the benchmark accepts: the synthetic ones, then the language model.
ALL_TASKS: tuple[str, ...] = (*TASKS, "lm")

__all__ = [
    "ALL_TASKS",
    "CHANCE",
    "TASKS",
    "VOCAB_SIZE",
    "TaskBatch",
    "TextCorpus",
    "answer_accuracy",
    "eval_batch",
    "max_sequence_length",
    "sample_batch",
    "score",
    "stdlib_corpus",
]
