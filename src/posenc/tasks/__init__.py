"""Benchmark data: synthetic length-generalisation tasks and byte-level text, and the task registry.

``posenc.tasks.tasks()`` lists the synthetic tasks (posenc's own, generated on the fly from a
seed, and any registered, named by import spec or installed as a ``posenc.tasks`` entry point;
the protocol a task follows is in :mod:`posenc.tasks.task_registry`), plus the language-model task
``"lm"`` on the Python standard library's own sources (:mod:`posenc.tasks.text`).
"""

from posenc.tasks.synthetic import (
    CHANCE,
    FIRST_SYMBOL,
    TASKS,
    VOCAB_SIZE,
    TaskBatch,
    answer_accuracy,
    score,
)
from posenc.tasks.task_registry import (
    LM,
    Task,
    eval_batch,
    get_task,
    max_sequence_length,
    register_task,
    sample_batch,
    task_names,
    task_spec,
    tasks,
    unregister_task,
    validate_task,
)
from posenc.tasks.text import TextCorpus, stdlib_corpus

#: posenc's own task names: the built-in synthetic ones, then the language model (every name a
#: user may give, theirs included: :func:`task_names`).
ALL_TASKS: tuple[str, ...] = (*TASKS, LM)

__all__ = [
    "ALL_TASKS",
    "CHANCE",
    "FIRST_SYMBOL",
    "LM",
    "TASKS",
    "VOCAB_SIZE",
    "Task",
    "TaskBatch",
    "TextCorpus",
    "answer_accuracy",
    "eval_batch",
    "get_task",
    "max_sequence_length",
    "register_task",
    "sample_batch",
    "score",
    "stdlib_corpus",
    "task_names",
    "task_spec",
    "tasks",
    "unregister_task",
    "validate_task",
]
