"""Which code a run ran: the class of each encoding and of the task, with their distributions.

Every record keeps ``result.code``::

    {"encodings": {"mine": {"class": "posenc_mine:LogBias", "distribution": "posenc-mine",
                            "version": "0.1.0", "source_sha256": "...", "code_sha256": "..."}},
     "task": {"class": ..., ...} | None}        # None: the language model

(:func:`posenc.core.plugins.origin`). A run's identity is its spec, which names an encoding by name;
the class behind a name can change (a new release of the package, an edit in an editable
install: ``code_sha256`` hashes what the class's behaviour depends on). Resuming a grid
compares the code of each finished record with what this process would run (:func:`changes`) and refuses to mix records of a changed class with new ones unless
told to (``posenc compare --allow-changed``). posenc's own classes are not compared: what
changes their meaning is the benchmark version (:data:`~posenc.records.spec.BENCHMARK_VERSION`).
"""

from __future__ import annotations

from typing import Any

from posenc import schedules
from posenc.core.errors import PosencError
from posenc.core.plugins import origin
from posenc.records.spec import RunSpec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.registry import get_encoding_class
from posenc.tasks import task_registry

OWN_DISTRIBUTION = "posenc"  # classes of posenc itself: their meaning is the benchmark version's


def register_imports(spec: RunSpec) -> None:
    """Register in this process the names ``spec`` was given by import spec (names registered
    only where the grid was made: ``spec.imports``), unless this process already knows them."""
    for registry, name, target in spec.imports:
        group = ENCODING_GROUP if registry == "encoding" else task_registry.GROUP
        if group.lookup(name) is None:
            group.register(name, group.resolve_spec(target))


def imports_of(encodings: tuple[str, ...] | list[str], tasks: tuple[str, ...] | list[str]):
    """``(imports, problems)``: the ``RunSpec.imports`` entries of names registered only in this
    process, and why a registered class could not go to another process (defined in
    ``__main__`` or a function: fine in this process, refused for spawned or Ray workers)."""
    imports: list[tuple[str, str, str]] = []
    problems: list[str] = []
    for registry, group, names in (
        ("encoding", ENCODING_GROUP, encodings),
        ("task", task_registry.GROUP, tasks),
    ):
        for name in names:
            if name == task_registry.LM:
                continue
            try:
                target = group.import_for(name)
            except PosencError as exc:
                problems.append(f"{registry} {name!r}: {exc}")
                continue
            if target is not None:
                imports.append((registry, name, target))
    return tuple(imports), problems


def encodings_of(spec: RunSpec) -> tuple[str, ...]:
    """The encoding names (or import specs) a run builds: one, or every one of its schedule."""
    if spec.schedule:
        return schedules.parse(spec.schedule, spec.model.num_layers).encodings
    return (spec.encoding,)


def code_of(spec: RunSpec) -> dict[str, Any]:
    """``{"encodings": {name: origin}, "task": origin | None}`` of the classes ``spec`` runs here."""
    register_imports(spec)
    task = None
    if spec.task != task_registry.LM:
        task = origin(task_registry.task_class(spec.task), task_registry.GROUP.distribution(spec.task))
    classes = (
        {spec.encoding: spec.resolved_class()}
        if not spec.schedule
        else {name: get_encoding_class(name) for name in encodings_of(spec)}
    )
    encodings = {name: origin(cls, ENCODING_GROUP.distribution(name)) for name, cls in classes.items()}
    return {"encodings": encodings, "task": task}


def _differs(what: str, old: Any, new: Any) -> str | None:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None  # a record from before records kept their code, or the language model
    if new.get("distribution") == OWN_DISTRIBUTION and old.get("distribution") == OWN_DISTRIBUTION:
        return None
    if old.get("class") != new.get("class"):
        return f"{what} was {old.get('class')}, is now {new.get('class')}"
    if old.get("distribution") != new.get("distribution"):
        return (
            f"{what} ({new.get('class')}) came from {old.get('distribution') or 'no distribution'}, now from "
            f"{new.get('distribution') or 'no distribution'}"
        )
    if old.get("version") != new.get("version"):
        dist = new.get("distribution") or old.get("distribution")
        return f"{what} ({new.get('class')}): {dist} was version {old.get('version')}, is now {new.get('version')}"
    if old.get("code_sha256") is not None and new.get("code_sha256") is not None:
        if old["code_sha256"] != new["code_sha256"]:
            return (
                f"{what} ({new.get('class')}): its code changed since the record was written (the class, "
                "what it uses of its module, its bases or a module of its package it imports)"
            )
        return None  # the same code: an edit elsewhere in its file does not count
    if old.get("source_sha256") != new.get("source_sha256"):  # a record from before code_sha256
        return f"{what} ({new.get('class')}): its source file changed since the record was written"
    return None


def changes(recorded: Any, current: dict[str, Any]) -> list[str]:
    """How the code a record names (``recorded``, its ``result.code``) differs from ``current``."""
    if not isinstance(recorded, dict):
        return []
    out = []
    old_encodings = recorded.get("encodings")
    if not isinstance(old_encodings, dict):
        old_encodings = {}
    for name, new in current["encodings"].items():
        problem = _differs(f"encoding {name!r}", old_encodings.get(name), new)
        if problem:
            out.append(problem)
    problem = _differs("the task", recorded.get("task"), current["task"])
    if problem:
        out.append(problem)
    return out
