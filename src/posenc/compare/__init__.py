"""The train-short / test-long benchmark (``posenc compare``); protocol and results in docs/benchmark.md.

Pieces, each usable alone:

- :mod:`~posenc.bench.profiles`: budget tiers and the grid of :class:`~posenc.bench.spec.RunSpec`
- :mod:`~posenc.bench.trainer`: ``execute(spec) -> payload`` (train, then evaluate every length)
- :mod:`~posenc.bench.executor`: the seam that runs a grid (``LocalExecutor``; Ray later)
- :mod:`~posenc.bench.store`: atomic, checksummed JSON records; resume and redo
- :mod:`~posenc.bench.runner`: skip finished work, execute the rest, write each record at once
- :mod:`~posenc.bench.tuning`: a learning rate per encoding, by in-distribution validation
- :mod:`~posenc.bench.scalings`: RoPE context extension as each paper uses it
- :mod:`~posenc.bench.stats`: per-cell means and 95% intervals (:func:`cells`: every cell of a
  results directory or of records, with seeds and convergence)
- :mod:`~posenc.bench.claims`: the papers' claims (data) judged with those intervals
- :mod:`~posenc.bench.tables`: CSV/JSON summaries, the terminal and Markdown tables
- :mod:`~posenc.bench.figures`: curves with bands
- :mod:`~posenc.bench.report_section`: the HTML fragment for ``posenc report``
- :mod:`~posenc.bench.trained`: a finished run's trained model, its attention, the word-order probe

:func:`compare` ties them together; the CLI is a thin wrapper around it.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.bench import trained, tuning
from posenc.bench.executor import LocalExecutor, make_executor
from posenc.bench.figures import save_all
from posenc.bench.profiles import PROFILES, Profile, build_grid, get_profile
from posenc.bench.report_section import write_page
from posenc.bench.runner import GridOutcome, run_grid
from posenc.bench.spec import BENCHMARK_VERSION, EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.bench.stats import Cell, cell, cells
from posenc.bench.store import ResultStore, atomic_write_text, versions
from posenc.bench.tables import render_table, summarize, summary_csv, to_csv, to_json

__all__ = [
    "PROFILES",
    "CompareResult",
    "EvalSpec",
    "LocalExecutor",
    "ModelSpec",
    "Profile",
    "ResultStore",
    "RunSpec",
    "TrainSpec",
    "Cell",
    "build_grid",
    "cell",
    "cells",
    "compare",
    "get_profile",
    "load_model",
]


@dataclass
class CompareResult:
    profile: Profile
    out: Path
    outcome: GridOutcome
    summary: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    missing_encodings: list[str] = field(default_factory=list)
    tuning: GridOutcome | None = None  # the learning-rate candidates run by this invocation, if any

    def table(self):
        return render_table(self.summary, title=f"posenc compare --profile {self.profile.name}")

    def notes(self) -> list[str]:
        lines = [
            f"runs: {len(self.outcome.done)} done, {len(self.outcome.skipped)} resumed, "
            f"{len(self.outcome.failed)} failed; {self.outcome.wall_seconds:.0f} s"
        ]
        if self.missing_encodings:
            lines.append(
                f"profile names unregistered encodings (skipped): {', '.join(self.missing_encodings)}"
            )
        failed_to_converge = len(self.summary.get("not_converged", []))
        if failed_to_converge:
            lines.append(
                f"{failed_to_converge} run(s) did not converge in-distribution (n.c.; left out of claims)"
            )
        for run, error in self.outcome.failed:
            lines.append(f"FAILED {run}: {error}")
        lines += [f"{kind}: {path}" for kind, path in self.files.items()]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "out": str(self.out),
            "outcome": self.outcome.to_dict(),
            "summary": json.loads(to_json(self.summary)),
            "files": self.files,
            "missing_encodings": self.missing_encodings,
        }


def load_model(record_path: str | os.PathLike):
    """The trained model of a run, rebuilt from its record and the weights kept next to it
    (checksums verified), in eval mode: e.g. to draw its attention (see :mod:`posenc.bench.trained`)."""
    return trained.load_run(record_path)[0]


def default_threads(workers: int) -> int:
    """Torch threads per worker: 1 unless there are spare cores beyond the workers.

    The model is tiny: a second intra-op thread gains little, and on a shared
    (oversubscribed) machine OpenMP threads spin-waiting for each other made a
    run up to 20x slower in our measurements; parallelism goes to processes.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers)) if cores > 2 * workers else 1


def write_outputs(
    out: Path,
    *,
    report: bool = True,
    run_ids: list[str] | None = None,
    profile: str = "",
    log: Callable[[str], None] | None = None,
    extra_outputs: Callable[[Path], dict[str, str]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Summary CSV/JSON, figures and this benchmark's HTML page of one grid's records under ``out``.

    ``run_ids``: the grid (what one ``posenc compare`` ran), recorded as ``grid.json``
    first so that the page reads the same grid; None: the grid already named by
    ``grid.json`` (every record if there is none). The page (``out/report.html``) holds
    the benchmark's section alone; ``extra_outputs(out)`` (with ``report``) writes more
    from the same grid, e.g. the full report (:func:`posenc.report.benchmark_report`,
    which ``posenc compare`` passes). The whole set of files is written under the
    directory's lock, so concurrent invocations never interleave them.
    """
    store = ResultStore(out)
    with store.lock():
        if run_ids is not None:
            store.write_grid(list(run_ids), profile)
        records = store.records(run_ids=run_ids, warn=log)
        summary = summarize(records)
        files = {}
        atomic_write_text(out / "summary.json", to_json(summary))
        atomic_write_text(out / "summary.csv", summary_csv(summary))
        atomic_write_text(out / "runs.csv", to_csv(records))
        files["summary"] = str(out / "summary.json")
        files["csv"] = str(out / "summary.csv")
        files["runs_csv"] = str(out / "runs.csv")
        if report and records:
            save_all(records, out / "figures")
            files["figures"] = str(out / "figures")
            files["report"] = str(write_page(out, out / "report.html"))
            if extra_outputs is not None:
                files.update(extra_outputs(out))
    return summary, files


def write_run_info(out: Path, prof: Profile, outcome: GridOutcome, command: str) -> Path:
    """``out/run.json``: what this invocation ran and how long it took, end to end (the
    tables in the docs quote it; a resumed invocation says how many runs it resumed)."""
    info = {
        "profile": prof.name,
        "command": command,
        "benchmark": BENCHMARK_VERSION,
        "posenc": versions()["posenc"],
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": round(outcome.wall_seconds, 1),
        "runs_done": len(outcome.done),
        "runs_resumed": len(outcome.skipped),
        "runs_failed": len(outcome.failed),
        "cores": os.cpu_count(),
    }
    atomic_write_text(out / "run.json", json.dumps(info, indent=1))
    return out / "run.json"


def compare(
    profile: str | Profile = "quick",
    *,
    encodings: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    out: str | Path = "posenc-results",
    executor: str = "local",
    workers: int | None = None,
    threads: int | None = None,
    report: bool = True,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    extra_outputs: Callable[[Path], dict[str, str]] | None = None,
    retune: bool = False,
    command: str = "",
) -> CompareResult:
    """Run (or resume) a profile's grid into ``out``; write summaries, figures and the benchmark page
    (and ``extra_outputs``, see :func:`write_outputs`) from this invocation's own grid.

    With a learning-rate grid in the profile, each encoding's rate is chosen first
    (:mod:`posenc.bench.tuning`: shipped choices, else cached under ``out/tuning``, else
    tuned now; ``retune`` ignores the shipped ones).
    """
    start = time.perf_counter()
    prof = get_profile(profile) if isinstance(profile, str) else profile
    workers = prof.workers if workers is None else workers
    threads = default_threads(workers) if threads is None else threads
    grid = build_grid(prof, encodings=encodings, tasks=tasks, seeds=seeds, threads=threads)
    out = Path(out)
    store = ResultStore(out)
    runner = make_executor(executor, workers=min(workers, max(1, len(grid.specs))))
    store.check_writable()  # before any run: a directory that cannot take records fails now
    if grid.missing_encodings:
        log(f"not registered (skipped): {', '.join(grid.missing_encodings)}")
    specs = grid.specs
    tuned = None
    if prof.lr_grid:
        share = dict(prof.tune_share)
        choices, tuned = tuning.choose(
            specs, prof.lr_grid, tuning.tuning_store(out), runner, share=share, use_shipped=not retune,
            show_progress=show_progress, log=log,
        )  # fmt: skip
        specs = tuning.apply(specs, choices, prof.lr_grid, share)
    outcome = run_grid(specs, store, runner, show_progress=show_progress, log=log)
    if tuned is not None:
        outcome.failed[:0] = [(f"tuning {run}", error) for run, error in tuned.failed]
        outcome.wall_seconds += tuned.wall_seconds
    # This invocation's own grid, never another one's that shares ``out`` (docs/guarantees.md).
    run_ids = [spec.run_id for spec in specs]
    summary, files = write_outputs(
        out, report=report, run_ids=run_ids, profile=prof.name, log=log, extra_outputs=extra_outputs
    )
    outcome.wall_seconds = time.perf_counter() - start  # everything, figures and report included
    files["run"] = str(write_run_info(out, prof, outcome, command))
    finished = set(outcome.done) | set(outcome.skipped)
    missing = finished - {r["run_id"] for r in store.records(run_ids=run_ids, warn=log)}
    if missing:
        log(f"{len(missing)} run(s) of this grid have no valid record in {out} (removed by another "
            "process?); rerun the same command to redo them")  # fmt: skip
    return CompareResult(prof, out, outcome, summary, files, grid.missing_encodings, tuned)
