"""The contract every task of ``posenc compare`` follows (``posenc.testing.check_task``).

The task protocol is :mod:`posenc.tasks.task_registry`'s; each property below checks one part of it
on a user's class, with numbers where there are some. Axis legend: n the length an example is
drawn at, b batch, t tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from posenc.core.errors import PosencError, PosencTypeError
from posenc.tasks import synthetic, task_registry
from posenc.tasks.task_registry import FIRST_TASK_TOKEN, GROUP, Task, check_task_class
from posenc.testing.contract_report import CheckReport, PropertyResult

#: The lengths examples are drawn at (the built-ins' distinct symbols allow up to 128).
LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
SAMPLES = 16  # examples per length


class _Subject:
    """A task under check: its name (what the benchmark would call it), class and instance."""

    def __init__(self, name: str, cls: type[Task], lengths: tuple[int, ...]) -> None:
        usable = tuple(n for n in lengths if n >= cls.min_length)
        self.name, self.cls, self.lengths = name, cls, usable if len(usable) >= 2 else lengths
        try:
            self.task = cls()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001  (a user's class may fail in any way, sys.exit too)
            raise PosencError(
                f"task {name!r}: {cls.__qualname__}() raised {type(exc).__name__}: {exc}"
            ) from exc
        self.batches: str | Task = (
            name if name in task_registry.BUILTINS else self.task
        )  # what batching takes

        # a task that lays out whole batches itself (a grid task) instead of (x, y) examples
        self.batched = cls.draw_batch is not Task.draw_batch

    def draw(self, n: int, seed: int) -> tuple[Any, Any]:
        """An example at ``n``: ``(x, y)``; for a batched task the one row's inputs and its scored
        targets."""
        generator = torch.Generator().manual_seed(seed)
        if self.batched:
            row = self.task.draw_batch([n], generator)
            return row.inputs[0], row.targets[0][row.loss_mask[0]]
        return self.task.example(n, generator)


def _declares(s: _Subject) -> PropertyResult:
    check_task_class(s.cls, f"task {s.name!r}")  # raises naming what is wrong
    if not isinstance(s.cls.description, str) or not s.cls.description.strip():
        return PropertyResult("declares", False, "description is empty (one line: what x and y are)")
    detail = f"a description, vocab_size {s.cls.vocab_size}, chance {s.cls.chance:g}"
    if s.name not in task_registry.BUILTINS:
        try:
            detail += f"; workers import it as {GROUP.spec_of(s.cls)}"
        except PosencError:  # fine in this process; a benchmark with workers says so before it starts
            detail += "; not importable by another process (a benchmark runs it with --workers 1 only)"
    return PropertyResult("declares", True, detail)


def _examples(s: _Subject) -> PropertyResult:
    """Every example is (x, y) of 1-D int64 ids in [4, vocab_size), y not empty, its row within the
    task's ``max_sequence_length(n)`` (which sizes learned position tables)."""
    if s.batched:
        return _batched_rows(s)
    count = 0
    for n in s.lengths:
        for seed in range(SAMPLES):
            example = s.draw(n, seed)
            task_registry.check_example(s.name, s.task, example, n)
            x, y = example
            row = 1 + len(x) + 1 + len(y)
            if row > s.task.max_sequence_length(n):
                return PropertyResult(
                    "examples", False, f"at n={n}: a row of {row} tokens, max_sequence_length({n}) = {s.task.max_sequence_length(n)} "
                    "(override input_length / answer_length, or max_sequence_length)"
                )  # fmt: skip
            count += 1
    lengths = ", ".join(map(str, s.lengths))
    detail = f"{count} examples at n = {lengths}: token ids in [{FIRST_TASK_TOKEN}, {s.task.vocab_size}), each row within max_sequence_length(n)"
    return PropertyResult("examples", True, detail, {"examples": count})


def _batched_rows(s: _Subject) -> PropertyResult:
    """A batched task's rows: token ids in range, at least one scored token each, coordinates
    ``(b, t, position_axes)`` beside them (and the flattened ones for sequence encodings), each
    row within ``max_sequence_length(n)``."""
    count = 0
    for n in s.lengths:
        batch = s.task.draw_batch([n] * 4, torch.Generator().manual_seed(n))
        b, t = batch.inputs.shape
        if batch.inputs.min() < 0 or batch.inputs.max() >= s.task.vocab_size:
            return PropertyResult("examples", False, f"at n={n}: input ids outside [0, {s.task.vocab_size})")
        if bool((batch.loss_mask.sum(-1) == 0).any()):
            return PropertyResult("examples", False, f"at n={n}: a row with nothing to score")
        axes = s.cls.position_axes
        if axes > 1 and (batch.positions is None or tuple(batch.positions.shape) != (b, t, axes)):
            return PropertyResult(
                "examples", False, f"at n={n}: positions must be (b, t, {axes}) coordinates"
            )
        if axes > 1 and (batch.flat_positions is None or tuple(batch.flat_positions.shape) != (b, t)):
            return PropertyResult("examples", False, f"at n={n}: flat_positions must be (b, t)")
        if t > s.task.max_sequence_length(n):
            return PropertyResult(
                "examples",
                False,
                f"at n={n}: rows of {t} tokens, max_sequence_length {s.task.max_sequence_length(n)}",
            )
        count += b
    return PropertyResult("examples", True, f"{count} rows (whole batches) at n = {', '.join(map(str, s.lengths))}", {"examples": count})  # fmt: skip


def _deterministic(s: _Subject) -> PropertyResult:
    """The same generator seed gives the same example; other seeds give other examples."""
    for n in s.lengths:
        a, b = s.draw(n, 7), s.draw(n, 7)
        if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
            return PropertyResult("deterministic", False, f"at n={n}, seed 7 gave two different examples: draw "
                                  "every random number from the generator passed in")  # fmt: skip
    n = s.lengths[-1]
    drawn = {(tuple(x.tolist()), tuple(y.tolist())) for x, y in (s.draw(n, seed) for seed in range(SAMPLES))}
    if len(drawn) == 1:
        return PropertyResult(
            "deterministic", False, f"{SAMPLES} seeds at n={n} gave one and the same example"
        )
    return PropertyResult(
        "deterministic", True, f"seed -> example; {len(drawn)} different examples from {SAMPLES} seeds at n={n}",
        {"distinct": len(drawn)},
    )  # fmt: skip


def _longest_row(s: _Subject, n: int) -> int:
    return max(2 + len(x) + len(y) for x, y in (s.draw(n, seed) for seed in range(SAMPLES)))


def _lengths(s: _Subject) -> PropertyResult:
    """n is a length: rows get longer with n (else testing longer n tests nothing new), and the
    declared bound never shrinks."""
    bounds = [s.task.max_sequence_length(n) for n in s.lengths]
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        return PropertyResult(
            "lengths", False, f"max_sequence_length decreases along n = {list(s.lengths)}: {bounds}"
        )
    short, long = s.lengths[0], s.lengths[-1]
    a, b = _longest_row(s, short), _longest_row(s, long)
    if b <= a:
        return PropertyResult(
            "lengths",
            False,
            f"the longest row at n={long} ({b} tokens) is not longer than at n={short} ({a})",
        )
    return PropertyResult(
        "lengths", True, f"longest row {a} tokens at n={short}, {b} at n={long}", {"short": a, "long": b}
    )


def _batches(s: _Subject) -> PropertyResult:
    """Training and evaluation batches: the answer is what is scored (y and EOS), the evaluation
    set is the same on every call."""
    generator = torch.Generator().manual_seed(0)
    batch = task_registry.sample_batch(
        s.batches, 8, min_len=s.lengths[0], max_len=s.lengths[-1], generator=generator
    )
    answers = batch.loss_mask.sum(-1)  # (b,)
    eos = (batch.targets == synthetic.EOS) & batch.loss_mask
    if s.batched:  # its own layout: something to score in every row
        if bool((answers < 1).any()):
            return PropertyResult("batches", False, "every row must have a scored token")
    elif not bool((eos.sum(-1) == 1).all()) or bool((answers < 2).any()):
        return PropertyResult(
            "batches", False, "every scored row must end in EOS after at least one answer token"
        )
    first = task_registry.eval_batch(s.batches, s.lengths[-1], 4, seed=0)
    again = task_registry.eval_batch(s.batches, s.lengths[-1], 4, seed=0)
    if not torch.equal(first.inputs, again.inputs):
        return PropertyResult("batches", False, "the evaluation set differs between two calls with one seed")
    return PropertyResult(
        "batches", True, f"8 training rows (n ~ U{{{s.lengths[0]}..{s.lengths[-1]}}}), {int(answers.sum())} scored tokens; "
        "the evaluation set is fixed by its seed",
    )  # fmt: skip


def _scoring(s: _Subject) -> PropertyResult:
    """Perfect predictions score 1, predictions of a marker token score 0 (exact match and
    answer-token accuracy)."""
    batch = task_registry.eval_batch(s.batches, s.lengths[len(s.lengths) // 2], 8, seed=1)
    perfect = torch.nn.functional.one_hot(batch.targets, s.task.vocab_size).float()  # (b, t, V)
    exact, token = synthetic.score(perfect, batch)
    wrong = torch.zeros_like(perfect)
    wrong[..., synthetic.BOS] = 1.0  # never an answer token
    exact_wrong, token_wrong = synthetic.score(wrong, batch)
    numbers = {"perfect": float(exact.float().mean()), "wrong": float(exact_wrong.float().mean())}
    if not (bool(exact.all()) and bool((token == 1).all())):
        return PropertyResult("scoring", False, "perfect predictions did not score 1", numbers)
    if bool(exact_wrong.any()) or bool((token_wrong > 0).any()):
        return PropertyResult("scoring", False, "predicting BOS everywhere scored above 0", numbers)
    return PropertyResult("scoring", True, "perfect predictions score 1, wrong ones 0", numbers)


#: The task contract, in the order it runs.
TASK_PROPERTIES: dict[str, Callable[[_Subject], PropertyResult]] = {
    "declares": _declares,
    "examples": _examples,
    "deterministic": _deterministic,
    "lengths": _lengths,
    "batches": _batches,
    "scoring": _scoring,
}


def _subject(task: Any, lengths: tuple[int, ...]) -> _Subject:
    if isinstance(task, Task):
        task = type(task)
    if isinstance(task, str):
        if task == task_registry.LM:
            raise PosencError("'lm' is the language-model task; posenc check checks synthetic tasks")
        return _Subject(task, task_registry.task_class(task), lengths)
    if isinstance(task, type):
        cls = check_task_class(task, "task")
        named = [n for n, c in (*task_registry.BUILTINS.items(), *GROUP.registered.items()) if c is cls]
        return _Subject(named[0] if named else f"{cls.__module__}:{cls.__qualname__}", cls, lengths)
    raise PosencTypeError(
        f"task must be a task name, an import spec, a Task class or instance, got {type(task).__name__}"
    )


def check_task(
    task: str | type[Task] | Task,
    *,
    properties: Iterable[str] | None = None,
    lengths: Iterable[int] = LENGTHS,
) -> CheckReport:
    """Run the task contract (:data:`TASK_PROPERTIES`, or the ``properties`` named) on ``task``:
    a registry name, an import spec ``"package.module:Class"``, a :class:`~posenc.tasks.Task`
    subclass or instance; examples are drawn at ``lengths``. A property that raises is a failure
    naming the exception."""
    names = list(TASK_PROPERTIES) if properties is None else list(properties)
    for name in names:
        if name not in TASK_PROPERTIES:
            raise PosencError(f"unknown task property {name!r}; valid: {list(TASK_PROPERTIES)}")
    chosen = tuple(sorted(set(lengths)))
    if not chosen or chosen[0] < 1 or len(chosen) < 2:
        raise PosencError(f"lengths must hold at least two lengths >= 1, got {list(lengths)}")
    subject = _subject(task, chosen)
    results = []
    for name in names:
        try:
            results.append(TASK_PROPERTIES[name](subject))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001  (a user's class may fail in any way, sys.exit too)
            results.append(PropertyResult(name, False, f"raised {type(exc).__name__}: {exc}"))
    return CheckReport(subject.name, "task", tuple(results))


def assert_task(task: str | type[Task] | Task, **kwargs: Any) -> CheckReport:
    """:func:`check_task`, raising AssertionError with the failed properties (for pytest)."""
    report = check_task(task, **kwargs)
    report.raise_for_failures()
    return report
