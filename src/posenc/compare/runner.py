"""Run a grid: skip finished work, execute the rest, write each record the moment it lands.

Resuming is the default: rerunning the same command recomputes the same run
ids, finds their valid records and skips them; missing or corrupt records are
(re)done. Records made with an encoding or task class that has changed since
(:mod:`posenc.records.provenance`) are refused before anything runs, unless the caller
allows mixing them with new ones (:func:`check_code`).

The progress display: one bar covers the whole grid (in work units ~ training steps),
with ETA, and each run in progress has a row of its own with its latest held-out
check (step, held-out exact match or loss), as its worker reports it (local workers
report as they go; Ray tasks only when they finish). Where no bar can draw (output to a
file or a pipe: nohup, CI), a line per finished run says the same (:class:`PlainLines`).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from posenc.compare.executor import Executor
from posenc.compare.work import execute
from posenc.core.errors import PosencError
from posenc.records.benchmark_scalings import FAILED_KEY
from posenc.records.files import read_record_file
from posenc.records.provenance import changes, code_of, encodings_of
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


def check_code(
    specs: Sequence[RunSpec],
    store: ResultStore,
    *,
    allow_changed: bool = False,
    log: Callable[[str], None] = print,
    said: set[str] | None = None,
) -> int:
    """Refuse records in ``store`` of ``specs`` made with other encoding or task classes than this
    installation runs (another class under the name, another version of its distribution, an
    edited class): one PosencError naming each change once with its runs, before anything runs.
    With ``allow_changed`` they are kept (resumed next to new runs) and said once; ``said``
    (shared by the checks of one invocation) keeps a change said before from being said again.
    Returns how many records were made with changed code."""
    current: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
    changed: dict[str, list[RunSpec]] = {}  # what changed -> the runs made before the change
    count = 0
    for spec in specs:
        data, reason = read_record_file(store.path_for(spec))
        if reason is not None or not isinstance(data, dict) or not isinstance(data.get("result"), dict):
            continue  # absent or unreadable: nothing to mix (plan redoes a corrupt one)
        key = (encodings_of(spec), spec.task)
        if key not in current:
            current[key] = code_of(spec)
        found = changes(data["result"].get("code"), current[key])
        count += bool(found)
        for change in found:
            changed.setdefault(change, []).append(spec)
    if not changed:
        return 0
    listed = "; ".join(
        f"{change} ({len(runs)} run(s), e.g. {runs[0].label} on {runs[0].task}, seed {runs[0].seed})"
        for change, runs in changed.items()
    )
    if not allow_changed:
        raise PosencError(
            f"{count} finished run(s) in {store.root} were made with other code than this installation "
            f"runs: {listed}; pass --allow-changed to keep them next to new runs, or write to another --out"
        )
    said = set() if said is None else said
    new = {change: runs for change, runs in changed.items() if change not in said}
    if new:
        said.update(new)
        log(f"keeping {count} run(s) made with a changed class (--allow-changed): {'; '.join(new)}")
    return count


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
    console: Console | None = None,
    work_fn=execute,
    title: str = "posenc compare",
    allow_changed: bool = False,
    said: set[str] | None = None,
) -> GridOutcome:
    """Execute every spec without a valid record; each finished run is written at once.
    Records of a changed class: :func:`check_code` (``said``: the changes said already)."""

    start = time.perf_counter()
    check_code(specs, store, allow_changed=allow_changed, log=log, said=said)
    todo, outcome = plan(specs, store)
    _say_plan(store, outcome, len(specs), log)
    with GridProgress(
        title, todo, noun="run", show_progress=show_progress, log=log, console=console
    ) as progress:
        for spec, result in executor.map(work_fn, todo, progress.advance):
            _keep(spec, result, store, outcome, log)
            progress.finished(spec, result)
    outcome.wall_seconds = time.perf_counter() - start
    return outcome


def _say_plan(store: ResultStore, outcome: GridOutcome, runs: int, log: Callable[[str], None]) -> None:
    """Log what the directory holds already: other versions' records, corrupt ones, resumed runs."""
    for version, count in sorted(store.other_versions().items()):
        log(
            f"{count} record(s) in {store.runs} were {version_problem({'spec': {'benchmark': version}})}: "
            "they are kept but never resumed or summarised as current results; this grid's runs are done anew"
        )
    for run_id, reason in outcome.redone:
        log(f"record {run_id} is corrupt ({reason}); redoing it")
    if outcome.skipped:
        log(f"resuming: {len(outcome.skipped)} of {runs} runs already have valid records")


def _columns() -> tuple[Any, ...]:
    """The progress display's columns."""
    return (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),  # of the training steps (work units), not of the runs
        TextColumn("{task.fields[note]}"),  # the grid: runs done; a run: its latest check
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


def _keep(
    spec: RunSpec, result: Any, store: ResultStore, outcome: GridOutcome, log: Callable[[str], None]
) -> None:
    """A finished run: its record written at once, or its failure noted."""
    if isinstance(result, BaseException):
        outcome.failed.append(
            (f"{spec.label}/{spec.task}/seed{spec.seed}", f"{type(result).__name__}: {result}")
        )
        log(f"run {spec.label} on {spec.task} failed: {type(result).__name__}: {result}")
    else:
        store.write(spec, result)
        outcome.done.append(spec.run_id)


#: How the display names a held-out metric.
METRIC_NAMES = {"valid_exact_match": "held-out exact match", "valid_loss": "held-out loss"}


def status_text(status: dict[str, Any]) -> str:
    """``"step 300: held-out exact match 0.84"`` (a check as the trainer reports it)."""
    name = METRIC_NAMES.get(status.get("metric", ""), status.get("metric", "held-out"))
    value = status.get("value")
    shown = f"{value:.3f}" if isinstance(value, (int, float)) else "-"
    return f"step {status.get('step', '?')}: {name} {shown}"


def _ended(result: Any) -> str:
    """How a finished run ended, in a few words: converged at which step, not converged, failed."""
    if isinstance(result, BaseException):
        return f"failed ({type(result).__name__})"
    training = result.get("train", result) if isinstance(result, dict) else {}
    failed = result.get(FAILED_KEY) if isinstance(result, dict) else None
    said = (
        f"; the evaluation of {', '.join(failed)} failed (its other evaluations are kept)" if failed else ""
    )
    if training.get("converged"):
        return f"converged at step {training.get('steps_to_converge', training.get('steps', '?'))}{said}"
    if "converged" in training:
        return f"not converged in {training.get('steps', '?')} steps{said}"
    return "done"  # work that does not train (a posenc extend cell)


def _clock(seconds: float) -> str:
    """``0:18:13``, as the live bar shows elapsed and remaining time."""
    return str(datetime.timedelta(seconds=max(0, round(seconds))))


class PlainLines:
    """Progress where no live bar can draw: with the display on and its console not a terminal
    (output to a file or a pipe, as under nohup or in CI), one line per finished run or cell, with
    the time so far and an estimate of the time left from the work done; on a terminal, nothing
    (the bar shows it)."""

    def __init__(
        self, bar: Progress, task: TaskID, count: int, log: Callable[[str], None], *, noun: str
    ) -> None:
        console = bar.console
        self.on = not bar.disable and not (console.is_terminal or console.is_jupyter)
        self.bar, self.task, self.count, self.log, self.noun = bar, task, count, log, noun
        self.done = 0
        self.start = time.perf_counter()
        if self.on and count:
            self.log(f"{count} {noun}(s) to do; a line as each one finishes")

    def finished(self, name: str, result: Any) -> None:
        """One more finished: ``name`` (the run or cell) and its ``result`` (a payload or an error);
        the work done and to do are the bar's own (its task's completed and total units)."""
        self.done += 1
        if not self.on:
            return
        grid = next(t for t in self.bar.tasks if t.id == self.task)
        done, total = grid.completed, grid.total or 1
        elapsed = time.perf_counter() - self.start
        left = elapsed * max(total - done, 0) / done if done > 0 else None
        eta = f", about {_clock(left)} left" if left is not None and self.done < self.count else ""
        self.log(
            f"{self.noun} {self.done}/{self.count} ({_clock(elapsed)} so far{eta}): {name} {_ended(result)}"
        )


def run_name(spec: RunSpec) -> str:
    """How the display names a run: ``copy: rope (seed 0)``."""
    return f"{spec.task}: {spec.label} (seed {spec.seed})"


class RunRows:
    """One row per run in progress under the grid's bar: its name, its own bar and its latest
    held-out check; the row goes when the run finishes. Runs are told apart by ``run_id``; ``name``
    and ``units`` say how a run is called and how much work it is (a :class:`RunSpec`'s by default;
    ``posenc extend`` passes its cells')."""

    def __init__(
        self,
        bar: Progress,
        *,
        name: Callable[[Any], str] = run_name,
        units: Callable[[Any], int] = RunSpec.work_units,
    ) -> None:
        self.bar, self.name, self.units = bar, name, units
        self.rows: dict[str, Any] = {}  # run id -> the row's task id
        self.last: dict[str, str] = {}  # run id -> its latest status text (kept for tests)

    def _row(self, item: Any) -> Any:
        row = self.rows.get(item.run_id)
        if row is None:
            row = self.rows[item.run_id] = self.bar.add_task(
                f"  {self.name(item)}", total=self.units(item), note=""
            )
        return row

    def report(self, item: Any, status: dict[str, Any]) -> None:
        self.last[item.run_id] = text = status_text(status)
        self.bar.update(self._row(item), note=text)

    def advance(self, item: Any, units: int) -> None:
        self.bar.update(self._row(item), advance=units)

    def finish(self, item: Any) -> None:
        row = self.rows.pop(item.run_id, None)
        if row is not None:
            self.bar.remove_task(row)


class GridProgress:
    """The display of a grid of work (the runs of ``posenc compare``, the cells of ``posenc
    extend``) while it runs: one bar over the grid's work units with the count done, a row per
    item in progress (:class:`RunRows`) and, where no bar can draw, a line per finished item
    (:class:`PlainLines`). A context manager; :meth:`advance` is what an executor reports to
    (``executor.map(fn, items, progress.advance)``) and :meth:`finished` takes each result."""

    def __init__(
        self,
        title: str,
        items: Sequence[Any],
        *,
        noun: str,
        name: Callable[[Any], str] = run_name,
        units: Callable[[Any], int] = RunSpec.work_units,
        show_progress: bool = True,
        log: Callable[[str], None] = print,
        console: Console | None = None,
    ) -> None:
        self.noun, self.count, self.done = noun, len(items), 0
        self.name, self.units = name, units
        self.bar = Progress(*_columns(), disable=not show_progress, transient=False, console=console)
        self.share = {item.run_id: units(item) for item in items}  # run id -> its work units, worked out once
        self.task = self.bar.add_task(title, total=max(sum(self.share.values()), 1), note=self._count())
        self.rows = RunRows(self.bar, name=name, units=units)
        self.lines = PlainLines(self.bar, self.task, self.count, log, noun=noun)
        self.given: dict[str, int] = {}  # run id -> units shown so far

    def _count(self) -> str:
        return f"{self.noun}s {self.done}/{self.count}"

    def __enter__(self) -> GridProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def advance(self, item: Any, units: int, status: dict[str, Any] | None = None) -> None:
        """``units`` more of ``item``'s work done (never past its share), and its latest check."""
        if status is not None:
            self.rows.report(item, status)
        key = item.run_id
        units = min(units, self.share[key] - self.given.get(key, 0))
        if units > 0:
            self.given[key] = self.given.get(key, 0) + units
            self.bar.update(self.task, advance=units)
            self.rows.advance(item, units)

    def finished(self, item: Any, result: Any) -> None:
        """``item`` is done (``result``: its payload or its error): its share topped up, its row gone."""
        self.advance(item, self.share[item.run_id])
        self.rows.finish(item)
        self.done += 1
        self.bar.update(self.task, note=self._count())
        self.lines.finished(self.name(item), result)
