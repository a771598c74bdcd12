"""The checks of a profile's declared questions and of its plan for deciding them
(:mod:`posenc.records.questions`): an encoding the profile runs as the reference, the encodings
compared with it among the profile's, each primary column a column of one of its tasks, each task's
test one of :data:`~posenc.records.questions.TESTS`, and a plan whose looks grow. Each raises one
:class:`~posenc.core.errors.PosencError` naming the key, the value and what is valid."""

from __future__ import annotations

import dataclasses

from posenc.compare.profile.definition import Profile
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import MISSING, Where
from posenc.core.plugins import is_spec
from posenc.records.columns import columns
from posenc.records.questions import CORRECTIONS, SPENDING, TESTS, Questions, SequentialSpec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.tasks.task_registry import task_names


def fit_questions(profile: Profile, where: Where) -> tuple[Profile, str | None]:
    """``profile`` with its questions narrowed to its grid, after options such as ``--encodings`` and
    ``--tasks`` chose part of it: the encodings compared and the primary columns the grid runs; no
    questions (and no plan) where it leaves out the reference or every primary column, with a note
    saying so (else None). A reference that names no registered encoding is an error (a typo is not
    a narrowed grid)."""
    q = profile.questions
    if not q.declared:
        return profile, None
    if not is_spec(q.reference) and q.reference not in ENCODING_GROUP.names():
        names = list(ENCODING_GROUP.names())
        raise where.error(
            "questions.reference", q.reference, f"not an encoding{did_you_mean(q.reference, names)}"
        )
    _check_names(q, where)
    primary = tuple(item for item in q.primary if item.partition(":")[0] in profile.tasks)
    encodings = profile.encodings
    unasked = dataclasses.replace(profile, questions=Questions(), sequential=SequentialSpec())
    declared = (
        f"the profile's declared questions (each encoding against {q.reference} in {', '.join(q.primary)})"
    )
    exploratory = "every pair of the table is exploratory"
    if encodings is not None and q.reference not in encodings:
        return unasked, f"{declared} need {q.reference}, which this grid leaves out: {exploratory}"
    if q.primary and not primary:
        tasks = sorted({item.partition(":")[0] for item in q.primary})
        return (
            unasked,
            f"{declared} need the task(s) {', '.join(tasks)}, which this grid leaves out: {exploratory}",
        )
    against = q.against
    if against is not None and encodings is not None:
        against = tuple(name for name in against if name in encodings)
    if encodings is not None and not [
        e for e in (encodings if against is None else against) if e != q.reference
    ]:
        return (
            unasked,
            f"{declared} have no encoding to compare with {q.reference} in this grid: {exploratory}",
        )
    tests = {task: test for task, test in q.tests.items() if any(p.startswith(f"{task}:") for p in primary)}
    narrowed = dataclasses.replace(q, primary=primary, against=against, tests=tests)
    return dataclasses.replace(profile, questions=narrowed), None


def _check_names(q: Questions, where: Where) -> None:
    """Before the questions are narrowed to the grid: each encoding compared is a registered one (or an
    import spec) other than the reference, each primary column's task a task posenc knows (a typo is not
    a narrowed grid)."""
    names = list(ENCODING_GROUP.names())
    for name in q.against or ():
        if name == q.reference or not (is_spec(name) or name in names):
            raise where.error(
                "questions.against", list(q.against or ()),
                f"{name!r}: each must be an encoding other than the reference{did_you_mean(name, names)}",
            )  # fmt: skip
    tasks = list(task_names())
    for item in q.primary:
        task = item.partition(":")[0]
        if not (is_spec(task) or task in tasks):
            raise where.error(
                "questions.primary", item, f"{task!r} is not a task ({', '.join(tasks)}); write TASK:COLUMN"
            )


def check_questions(profile: Profile, where: Where) -> None:
    """``profile.questions`` and ``profile.sequential`` agree with the profile and with each other."""
    q = profile.questions
    if not q.declared:
        if q.primary or q.against is not None or q.tests:
            raise where.error(
                "questions.reference", MISSING, "missing: declared questions need a reference encoding"
            )
        if profile.sequential.declared:
            raise where.error(
                "sequential.looks", list(profile.sequential.looks),
                "a plan decides declared questions: set [questions] (reference, primary) too",
            )  # fmt: skip
        return
    encodings = list(profile.encodings) if profile.encodings is not None else None
    if encodings is not None and q.reference not in encodings:
        raise where.error(
            "questions.reference", q.reference,
            f"must be one of the profile's encodings: {', '.join(encodings)}{did_you_mean(q.reference, encodings)}",
        )  # fmt: skip
    for name in q.against or ():
        if name == q.reference or (encodings is not None and name not in encodings):
            valid = [e for e in encodings or () if e != q.reference]
            raise where.error(
                "questions.against", list(q.against or ()),
                f"{name!r}: each must be another of the profile's encodings than the reference"
                + (f" ({', '.join(valid)})" if valid else ""),
            )  # fmt: skip
    _check_primary(profile, where)
    _check_tests(profile, where)
    if q.correction not in CORRECTIONS:
        raise where.error("questions.correction", q.correction, f"must be one of {', '.join(CORRECTIONS)}")
    if not 0 < q.alpha < 0.5:
        raise where.error("questions.alpha", q.alpha, "must be > 0 and < 0.5 (the family's error rate)")
    _check_plan(profile, where)


def _check_primary(profile: Profile, where: Where) -> None:
    q = profile.questions
    if not q.primary:
        raise where.error("questions.primary", [], 'must name at least one column, e.g. "copy:tok_1.25x"')
    for item in q.primary:
        task, _, column = item.partition(":")
        if task not in profile.tasks:
            raise where.error(
                "questions.primary", item,
                f"{task!r} is not a task of the profile ({', '.join(profile.tasks)}); write TASK:COLUMN",
            )  # fmt: skip
        valid = columns(task)
        if column not in valid:
            raise where.error(
                "questions.primary", item, f"{column!r} is not a column of {task}: {', '.join(valid)}"
                f"{did_you_mean(column, valid)}",
            )  # fmt: skip
    if len(set(q.primary)) != len(q.primary):
        raise where.error("questions.primary", list(q.primary), "names a column twice")


def _check_tests(profile: Profile, where: Where) -> None:
    q = profile.questions
    tasks = {item.partition(":")[0] for item in q.primary}
    for task, test in q.tests.items():
        if task not in tasks:
            raise where.error(
                f"questions.tests.{task}",
                test,
                f"not a task of a primary column ({', '.join(sorted(tasks))})",
            )
        if test not in TESTS:
            raise where.error(
                f"questions.tests.{task}",
                test,
                f"must be one of {', '.join(TESTS)}{did_you_mean(test, TESTS)}",
            )


def _check_plan(profile: Profile, where: Where) -> None:
    plan = profile.sequential
    if not plan.declared:
        return
    looks = list(plan.looks)
    if looks[0] < 3 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise where.error(
            "sequential.looks", looks,
            "must grow from at least 3 (a test over seeds needs 3 on each side): seeds per encoding at each "
            "look, e.g. [3, 6, 8, 10]",
        )  # fmt: skip
    if plan.spending not in SPENDING:
        raise where.error("sequential.spending", plan.spending, f"must be one of {', '.join(SPENDING)}")
