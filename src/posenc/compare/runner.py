"""Run a grid: skip finished work, execute the rest, write each record the moment it lands.

Resuming is the default: rerunning the same command recomputes the same run
ids, finds their valid records and skips them; missing or corrupt records are
(re)done. One rich progress bar covers the whole grid (in work units ~ training
steps), with ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from posenc.compare.executor import Executor
from posenc.compare.trainer import execute
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore, version_problem


@dataclass
class GridOutcome:
    done: list[str] = field(default_factory=list)  # run ids finished in this invocation
    skipped: list[str] = field(default_factory=list)  # already had a valid record
    redone: list[tuple[str, str]] = field(default_factory=list)  # (run id, why the old record was rejected)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label/task, error)
    wall_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "done": len(self.done),
            "skipped": len(self.skipped),
            "redone": [{"run_id": r, "reason": why} for r, why in self.redone],
            "failed": [{"run": r, "error": e} for r, e in self.failed],
            "wall_seconds": self.wall_seconds,
        }


def plan(specs: Sequence[RunSpec], store: ResultStore) -> tuple[list[RunSpec], GridOutcome]:
    """Split the grid into work still to do and valid records to keep; quarantine corrupt ones."""
    outcome = GridOutcome()
    todo = []
    store.clean_temp_files()
    for spec in specs:
        record, reason = store.load(spec)
        if record is None and reason is not None and store.quarantine(spec) is None:
            record, reason = store.load(spec)  # not moved: another process rewrote (or moved) it
        if record is not None:
            outcome.skipped.append(spec.run_id)
            continue
        if reason is not None:
            outcome.redone.append((spec.run_id, reason))
        todo.append(spec)
    return todo, outcome


def run_grid(
    specs: Sequence[RunSpec],
    store: ResultStore,
    executor: Executor,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    work_fn=execute,
    title: str = "posenc compare",
) -> GridOutcome:
    """Execute every spec without a valid record; each finished run is written at once."""

    start = time.perf_counter()
    todo, outcome = plan(specs, store)
    for version, count in sorted(store.other_versions().items()):
        log(
            f"{count} record(s) in {store.runs} were {version_problem({'spec': {'benchmark': version}})}: "
            "they are kept but never resumed or summarised as current results; this grid's runs are done anew"
        )
    for run_id, reason in outcome.redone:
        log(f"record {run_id} is corrupt ({reason}); redoing it")
    if outcome.skipped:
        log(f"resuming: {len(outcome.skipped)} of {len(specs)} runs already have valid records")
    total = sum(s.work_units() for s in todo)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),  # of the training steps (work units), not of the runs
        TextColumn("runs {task.fields[runs]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, disable=not show_progress, transient=False) as bar:
        task = bar.add_task(title, total=max(total, 1), runs=f"0/{len(todo)}")
        given: dict[str, int] = {}

        def advance(spec: RunSpec, units: int) -> None:
            units = min(units, spec.work_units() - given.get(spec.run_id, 0))  # never overshoot a run
            if units > 0:
                given[spec.run_id] = given.get(spec.run_id, 0) + units
                bar.update(task, advance=units, description=f"{spec.task}: {spec.label}")

        finished = 0
        for spec, result in executor.map(work_fn, todo, advance):
            finished += 1
            advance(spec, spec.work_units())  # top up the estimate for this run
            if isinstance(result, BaseException):
                outcome.failed.append(
                    (f"{spec.label}/{spec.task}/seed{spec.seed}", f"{type(result).__name__}: {result}")
                )
                log(f"run {spec.label} on {spec.task} failed: {type(result).__name__}: {result}")
            else:
                store.write(spec, result)
                outcome.done.append(spec.run_id)
            bar.update(task, runs=f"{finished}/{len(todo)}")
    outcome.wall_seconds = time.perf_counter() - start
    return outcome
