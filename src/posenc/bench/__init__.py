"""The train-short / test-long benchmark (``posenc compare``); protocol and results in docs/benchmark.md.

Pieces, each usable alone:

- :mod:`~posenc.bench.profiles`: budget tiers and the grid of :class:`~posenc.bench.spec.RunSpec`
- :mod:`~posenc.bench.trainer`: ``execute(spec) -> payload`` (train, then evaluate every length)
- :mod:`~posenc.bench.executor`: the seam that runs a grid (``LocalExecutor``; Ray later)
- :mod:`~posenc.bench.store`: atomic, checksummed JSON records; resume and redo
- :mod:`~posenc.bench.runner`: skip finished work, execute the rest, write each record at once
- :mod:`~posenc.bench.tables`: buckets, CSV/JSON summaries, the terminal table
- :mod:`~posenc.bench.report_section`: the HTML fragment for ``posenc report``

:func:`compare` ties them together; the CLI is a thin wrapper around it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.bench.executor import LocalExecutor, make_executor
from posenc.bench.profiles import PROFILES, Profile, build_grid, get_profile
from posenc.bench.report_section import write_page
from posenc.bench.runner import GridOutcome, run_grid
from posenc.bench.spec import EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.bench.store import ResultStore, atomic_write_text
from posenc.bench.tables import render_table, summarize, to_csv, to_json
from posenc.viz.extrapolation import save_all

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
    "build_grid",
    "compare",
    "get_profile",
]


@dataclass
class CompareResult:
    profile: Profile
    out: Path
    outcome: GridOutcome
    summary: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    missing_encodings: list[str] = field(default_factory=list)

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


def default_threads(workers: int) -> int:
    """Torch threads per worker: 1 unless there are spare cores beyond the workers.

    The model is tiny: a second intra-op thread gains little, and on a shared
    (oversubscribed) machine OpenMP threads spin-waiting for each other made a
    run up to 20x slower in our measurements; parallelism goes to processes.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers)) if cores > 2 * workers else 1


def write_outputs(out: Path, *, report: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Summary CSV/JSON, figures and this benchmark's HTML page from every valid record under ``out``.

    The page (``out/report.html``) holds the benchmark's section alone; the full report
    with every benchmarked encoding's section is :func:`posenc.report.benchmark_report`
    (``posenc compare`` writes both).
    """
    records = ResultStore(out).records()
    summary = summarize(records)
    files = {}
    atomic_write_text(out / "summary.json", to_json(summary))
    atomic_write_text(out / "summary.csv", to_csv(records))
    files["summary"] = str(out / "summary.json")
    files["csv"] = str(out / "summary.csv")
    if report and records:
        save_all(records, out / "figures")
        files["figures"] = str(out / "figures")
        files["report"] = str(write_page(out, out / "report.html"))
    return summary, files


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
) -> CompareResult:
    """Run (or resume) a profile's grid into ``out``; write summaries, figures and the benchmark page."""
    prof = get_profile(profile) if isinstance(profile, str) else profile
    workers = prof.workers if workers is None else workers
    threads = default_threads(workers) if threads is None else threads
    grid = build_grid(prof, encodings=encodings, tasks=tasks, seeds=seeds, threads=threads)
    out = Path(out)
    store = ResultStore(out)
    store.write_grid([spec.run_id for spec in grid.specs], prof.name)  # what summaries and reports show
    if grid.missing_encodings:
        log(f"not registered (skipped): {', '.join(grid.missing_encodings)}")
    outcome = run_grid(
        grid.specs, store, make_executor(executor, workers=min(workers, max(1, len(grid.specs)))),
        show_progress=show_progress, log=log,
    )  # fmt: skip
    summary, files = write_outputs(out, report=report)
    return CompareResult(prof, out, outcome, summary, files, grid.missing_encodings)
