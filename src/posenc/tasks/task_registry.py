"""The tasks of ``posenc compare``, by name: posenc's own, and yours. Everything iterates over it.

Axis legend: b batch, t tokens, n the length an example is drawn at.

Two kinds of task. ``"lm"`` is the byte-level language model on the Python standard library's
sources (:mod:`posenc.tasks.text`; built in, not extensible here). Every other task is a
**synthetic task**: a :class:`Task` subclass whose examples are drawn at a length ``n``. Yours
come in the ways encodings do (:mod:`posenc.core.plugins`): ``register_task("sort", Sort)`` for a
notebook, an import spec ``"mypkg.tasks:Sort"`` wherever a task name is taken
(``posenc compare --tasks mypkg.tasks:Sort``), or an entry point of the group ``posenc.tasks``.

The task protocol (what a run does with a task; ``posenc check`` checks it):

- **Drawing an example at a length.** ``example(n, generator)`` returns ``(x, y)``, two 1-D
  int64 tensors of token ids: what the model reads and the answer it must produce. Everything
  random comes from ``generator`` (a CPU :class:`torch.Generator`), so a seed fixes the data.
  ``n`` is the task's own measure of length (the number of content tokens for the built-ins);
  ``input_length(n)`` / ``answer_length(n)`` bound ``len(x)`` / ``len(y)`` (default ``n``).
- **The sequence.** Each example becomes one causal-LM row ``[BOS] x [SEP] y [EOS]``; ids 0-3
  are those markers and PAD, so ``x`` and ``y`` use ids from 4 (``BLANK``) up to
  ``vocab_size - 1`` (the built-ins' symbols start at ``FIRST_SYMBOL`` = 5). The model has
  ``vocab_size`` tokens.
- **Scoring.** The loss and the metrics count the predictions of ``y`` and ``EOS`` only. One
  teacher-forced pass gives exact match (every one right, which for a causal model equals greedy
  decoding) and teacher-forced answer-token accuracy (:func:`posenc.tasks.synthetic.score`);
  greedy decoding that feeds the model its own outputs gives the free-running exact match and
  correct prefix (the benchmark's ``posenc.compare.evaluation.free_running``; for tasks whose
  answer is read back as it is produced). ``chance`` is the accuracy of guessing one answer token.
- **In-distribution.** Training draws ``n ~ U{min_len .. max_len}`` (the profile's
  ``task_train``), fresh every step; training stops when a held-out set drawn the same way
  reaches ``converge_at`` exact match. Evaluation scores ``samples`` examples at each of the
  profile's ``eval.lengths`` (or the n that ``eval.scales`` gives: :func:`lengths_at_scales`), the
  same examples for every encoding; an ``n`` above ``max_len`` is a length never trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from posenc.core.checks import check_int
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.plugins import PluginGroup, origin
from posenc.tasks import grid_task as grid
from posenc.tasks import synthetic, text
from posenc.tasks.task import Task

#: The entry-point group an installed package declares its tasks in.
ENTRY_POINT_GROUP = "posenc.tasks"
#: The language-model task (built in; not a :class:`Task`).
LM = "lm"
LM_DESCRIPTION = "byte-level language model on the Python standard library's own sources"
#: Ids a task's tokens may not use: the markers of the sequence and padding.
RESERVED_TOKENS = (synthetic.PAD, synthetic.BOS, synthetic.SEP, synthetic.EOS)
FIRST_TASK_TOKEN = synthetic.BLANK  # the smallest id a task's x and y may use


class BuiltinTask(Task):
    """One of posenc's synthetic tasks (:mod:`posenc.tasks.synthetic`)."""

    task_name: ClassVar[str]

    def example(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return synthetic.TASKS[self.task_name](n, generator)

    def max_sequence_length(self, n: int) -> int:
        return synthetic.max_sequence_length(self.task_name, n)


def _builtin(name: str) -> type[Task]:
    doc = (synthetic.TASKS[name].__doc__ or "").strip().splitlines()
    attributes = {
        "task_name": name,
        "description": doc[0] if doc else "",
        "chance": synthetic.CHANCE[name],
        "__module__": __name__,
        "__qualname__": f"BuiltinTask[{name}]",
    }
    return type(f"BuiltinTask[{name}]", (BuiltinTask,), attributes)


#: posenc's own synthetic tasks, in the order of :data:`posenc.tasks.synthetic.TASKS`, then the
#: grid task (:mod:`posenc.tasks.grid_task`).
BUILTINS: dict[str, type[Task]] = {name: _builtin(name) for name in synthetic.TASKS}
BUILTINS["grid"] = grid.GridTask


def check_task_class(cls: Any, source: str) -> type[Task]:
    """Return ``cls`` if it is a usable task class, else raise naming ``source``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise PosencTypeError(f"{source} is {cls!r}, not a task class (a subclass of posenc.tasks.Task)")
    if cls.example is Task.example and cls.draw_batch is Task.draw_batch:
        raise PosencTypeError(f"{source} ({cls.__qualname__}) does not define example(n, generator)")
    vocab = cls.vocab_size
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= FIRST_TASK_TOKEN:
        raise PosencError(
            f"{source} ({cls.__qualname__}): vocab_size must be an integer > {FIRST_TASK_TOKEN} (ids "
            f"0-3 are PAD, BOS, SEP, EOS), got {vocab!r}"
        )
    chance = cls.chance
    if not isinstance(chance, (int, float)) or isinstance(chance, bool) or not 0 < chance <= 1:
        raise PosencError(
            f"{source} ({cls.__qualname__}): chance must be a number in (0, 1] (the accuracy of "
            f"guessing one answer token), got {chance!r}"
        )
    return cls


#: The three ways in, one lookup (:mod:`posenc.core.plugins`).
GROUP: PluginGroup[type[Task]] = PluginGroup(
    ENTRY_POINT_GROUP, "task", BUILTINS, check_task_class, extra_names=(LM,)
)


def register_task(name: str, cls: type[Task], *, replace: bool = False) -> type[Task]:
    """Register ``cls`` under ``name`` in this process (a benchmark's spawned workers are handed its
    import spec, :func:`task_spec`, and register it there). Built-in names (and ``"lm"``) are refused."""
    return GROUP.register(name, cls, replace=replace)


def unregister_task(name: str) -> None:
    GROUP.unregister(name)


def task_names() -> tuple[str, ...]:
    """Every task name without importing any entry point: built-in, registered, entry points, ``"lm"``."""
    return tuple(GROUP.names())


def sequence_task_names() -> tuple[str, ...]:
    """What ``"all"`` tasks means in a profile: every task of sequences (the grid task, whose
    tokens lie on a grid, has a profile of its own); entry points are not imported to tell."""
    return tuple(n for n in task_names() if n not in BUILTINS or BUILTINS[n].position_axes == 1)


def tasks(*, on_error: Callable[[str], None] | None = None) -> dict[str, type[Task]]:
    """Every synthetic task class by name (entry points loaded now; a broken one raises, or with
    ``on_error`` is said there and left out)."""
    return GROUP.all(on_error=on_error)


def task_class(name: str) -> type[Task]:
    """The class of a synthetic task's name or import spec (``"lm"`` is not one)."""
    if name == LM:
        raise PosencError(f"{LM!r} is the language-model task, not a synthetic task")
    return GROUP.get(name)


_instances: dict[type[Task], Task] = {}  # one instance per class (a task has no parameters)


def _instance(cls: type[Task]) -> Task:
    task = _instances.get(cls)
    if task is None:
        task = _instances[cls] = cls()
    return task


def get_task(name: str) -> Task:
    """The synthetic task named ``name`` (a registry name or an import spec), ready to draw from."""
    return _instance(task_class(name))


def validate_task(name: str) -> str:
    """``name`` if it is a task (``"lm"``, a registry name, or an import spec that imports)."""
    if name != LM:
        task_class(name)
    return name


def task_spec(name: str) -> str:
    """What names task ``name``'s class in any fresh process: a built-in or entry-point name (or an
    import spec) as it is, a registered name as its import spec ``"module:qualname"``."""
    if name == LM:
        return name
    GROUP.get(name)  # unknown names raise, with a suggestion
    return GROUP.import_for(name) or name


def task_origin(name: str) -> dict[str, Any] | None:
    """Where a task's class comes from (:func:`posenc.core.plugins.origin`); None for posenc's own."""
    if name == LM or name in BUILTINS:
        return None
    return origin(task_class(name))


def vocab_size(name: str) -> int:
    """Tokens of the model a run of task ``name`` trains."""
    return text.VOCAB_SIZE if name == LM else get_task(name).vocab_size


def describe(*, on_error: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Name, kind, description and source of every task (``posenc list --tasks``; ``on_error``: as
    :func:`tasks`)."""
    rows = []
    for name, cls in tasks(on_error=on_error).items():
        source = "posenc" if name in BUILTINS else f"{cls.__module__}:{cls.__qualname__}"
        rows.append(
            {"name": name, "kind": "synthetic", "description": cls.description, "chance": cls.chance,
             "vocab_size": cls.vocab_size, "source": source}
        )  # fmt: skip
    rows.append({"name": LM, "kind": "language model", "description": LM_DESCRIPTION, "chance": None,
                 "vocab_size": text.VOCAB_SIZE, "source": "posenc"})  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# Batches of any synthetic task (the benchmark's training, held-out and evaluation sets).
# ---------------------------------------------------------------------------


def max_sequence_length(name: str, n: int) -> int:
    """Longest ``inputs`` row (sequence minus one) an example of task ``name`` at ``n`` can give."""
    return get_task(name).max_sequence_length(n)


#: Longest n :func:`lengths_at_scales` looks at (far past any sequence a CPU profile evaluates).
MAX_SCALED_N = 100_000


def lengths_at_scales(name: str, trained_n: int, scales: tuple[float, ...] | list[float]) -> tuple[int, ...]:
    """Evaluation lengths n of task ``name`` given as multiples of its trained sequence length in
    tokens (the longest row at ``trained_n``, :func:`max_sequence_length`): for each scale s, the
    longest n whose longest row is at most s times as long, so that a length bucket named "2x"
    holds sequences of at most twice the trained tokens. Sorted, without repeats (two scales
    may give the same n)."""
    trained = max_sequence_length(name, trained_n)
    shortest = max(1, get_task(name).min_length)
    found = set()
    for scale in scales:
        budget = scale * trained
        if max_sequence_length(name, shortest) > budget:
            raise PosencError(
                f"eval.scales: {scale:g} x the {trained} tokens task {name!r} trains on is {budget:g} tokens, "
                f"shorter than its shortest example ({max_sequence_length(name, shortest)} tokens at n = {shortest})"
            )
        n = shortest
        while n < MAX_SCALED_N and max_sequence_length(name, n + 1) <= budget:
            n += 1
        found.add(n)
    return tuple(sorted(found))


def check_example(name: str, task: Task, example: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``example`` (what ``task.example(n, ...)`` returned) if it follows the protocol, else a
    PosencError naming the task, n and what is wrong."""
    if not (isinstance(example, tuple) and len(example) == 2):
        raise PosencError(
            f"task {name!r}: example({n}, generator) must return (x, y), got {type(example).__name__}"
        )
    for label, tokens in zip("xy", example):
        if not (isinstance(tokens, torch.Tensor) and tokens.dtype == torch.long and tokens.ndim == 1):
            raise PosencError(f"task {name!r}: {label} at n={n} must be a 1-D int64 tensor")
        if label == "y" and tokens.numel() == 0:
            raise PosencError(f"task {name!r}: y at n={n} is empty (there is nothing to score)")
        if tokens.numel() and (int(tokens.min()) < FIRST_TASK_TOKEN or int(tokens.max()) >= task.vocab_size):
            raise PosencError(
                f"task {name!r}: {label} at n={n} holds ids outside [{FIRST_TASK_TOKEN}, {task.vocab_size}) "
                "(0-3 are PAD, BOS, SEP, EOS; vocab_size bounds the rest)"
            )
    return example


def _resolve(task: str | Task) -> tuple[str, Task]:
    """``(name, task)`` of a name, an import spec or a task instance (named by its class)."""
    if isinstance(task, Task):
        return f"{type(task).__module__}:{type(task).__qualname__}", task
    return task, get_task(task)


def _draw(task: str | Task, lengths: list[int], generator: torch.Generator) -> synthetic.TaskBatch:
    name, found = _resolve(task)
    if type(found).draw_batch is not Task.draw_batch or type(found) is BUILTINS.get(name):
        return found.draw_batch(lengths, generator)  # posenc's own: no per-example checks on the hot path
    examples = [check_example(name, found, found.example(n, generator), n) for n in lengths]
    return synthetic.collate(examples, lengths)


def sample_batch(
    task: str | Task, batch_size: int, *, min_len: int, max_len: int, generator: torch.Generator
) -> synthetic.TaskBatch:
    """A training (or held-out) batch of ``task`` (a name, an import spec or a :class:`Task`):
    each example's n ~ U{min_len .. max_len}, all from ``generator``."""
    check_int("batch_size", batch_size, minimum=1)
    check_int("min_len", min_len, minimum=1)
    check_int("max_len", max_len, minimum=min_len)
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator).tolist()
    return _draw(task, lengths, generator)


def eval_batch(task: str | Task, n: int, num_samples: int, *, seed: int = 0) -> synthetic.TaskBatch:
    """``num_samples`` examples of exactly length n, the same for everyone who asks (the seed
    follows the task's name, n and ``seed``)."""
    check_int("n", n, minimum=1)
    check_int("num_samples", num_samples, minimum=1)
    name = _resolve(task)[0]
    generator = torch.Generator().manual_seed(synthetic.eval_seed(name, n, seed))
    return _draw(task, [n] * num_samples, generator)
