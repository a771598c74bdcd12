"""What ``posenc compare``'s records show: per-cell intervals, tables, figures, the papers' claims.

Reads records only (through :mod:`posenc.records`), so it works on any results directory and
runs no code from it, whoever wrote it (tables, figures and the report need no encoding's class;
loading a trained model imports what a record names only with ``trust_remote_code=True``); the
harness that writes them is :mod:`posenc.compare`. Pieces:

- :mod:`~posenc.results.stats`: per-cell means and 95% intervals (:func:`cells`: every cell of a
  results directory or of records, with seeds and convergence)
- :mod:`~posenc.results.claims`: the papers' and the notes' claims (data: ``claims.json``) judged
  with those intervals
- :mod:`~posenc.results.primary`: the profile's declared questions decided as one family (and
  :mod:`~posenc.results.primary_table`, their table), from :mod:`~posenc.results.paired`,
  :mod:`~posenc.results.design` and :mod:`~posenc.results.sequential`
- :mod:`~posenc.results.tables`: CSV/JSON summaries, the terminal and Markdown tables
- :mod:`~posenc.results.result_figures`: curves with bands
- :mod:`~posenc.results.report_section`: the HTML fragment for ``posenc report``, and its own page
- :mod:`~posenc.results.trained`: a finished run's trained model, its attention, the word-order probe

:func:`write_outputs` writes all of them for one grid (``posenc compare`` calls it when the
grid has run).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc.records.files import atomic_write_text
from posenc.records.store import ResultStore
from posenc.results import primary, trained
from posenc.results.report_section import write_page
from posenc.results.result_figures import save_all
from posenc.results.stats import Cell, cell, cells
from posenc.results.tables import render_table, render_tables, summarize, summary_csv, to_csv, to_json

__all__ = [
    "Cell",
    "cell",
    "cells",
    "decide_questions",
    "load_model",
    "render_table",
    "render_tables",
    "summarize",
    "to_json",
    "write_outputs",
]


def decide_questions(
    out: Path, run_ids: list[str], questions: dict[str, Any], sequential: dict[str, Any]
) -> dict[str, Any]:
    """The declared questions of the runs ``run_ids`` under ``out``, decided look by look as the plan
    ``sequential`` says (:func:`posenc.results.primary.block`): what ``posenc compare --until decided``
    reads after each look."""
    records = ResultStore(Path(out)).records(run_ids=run_ids, warn=lambda _: None)
    found = primary.block(records, questions, sequential)
    return found or {
        "mode": "sequential",
        "questions": [],
        "undecided": [],
        "all_decided": False,
        "looks_done": [],
    }


def load_model(record_path: str | os.PathLike, *, trust_remote_code: bool = False):
    """The trained model of a run, rebuilt from its record and the weights kept next to it
    (checksums verified), in eval mode: e.g. to draw its attention (see :mod:`posenc.results.trained`).

    The record is data: an encoding or task it names by import spec (``"package.module:Class"``)
    is imported only with ``trust_remote_code=True``; posenc's own, names registered in this
    process and installed entry points need no consent. The weights load as tensors only."""
    return trained.load_run(record_path, trust_remote_code=trust_remote_code)[0]


def write_outputs(
    out: Path,
    *,
    report: bool = True,
    run_ids: list[str] | None = None,
    profile: str = "",
    log: Callable[[str], None] | None = None,
    extra_outputs: Callable[[Path], dict[str, str]] | None = None,
    questions: dict[str, Any] | None = None,
    sequential: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Summary CSV/JSON, figures and this benchmark's HTML page of one grid's records under ``out``.

    ``run_ids``: the grid (what one ``posenc compare`` ran), recorded as ``grid.json``
    first so that the page reads the same grid; None: the grid already named by
    ``grid.json`` (every record if there is none). The page (``out/report.html``) holds
    the benchmark's section alone; ``extra_outputs(out)`` (with ``report``) writes more
    from the same grid, e.g. the full report (:func:`posenc.report.benchmark_report`,
    which ``posenc compare`` passes). The whole set of files is written under the
    directory's lock, so concurrent invocations never interleave them. ``questions``: the
    profile's declared questions, decided in ``summary.json``'s ``primary`` (and with
    ``sequential``, the plan of a ``--until decided`` run, look by look: :mod:`posenc.results.primary`).
    """
    out = Path(out)
    store = ResultStore(out)
    with store.lock():
        if run_ids is not None:
            store.write_grid(list(run_ids), profile)
        records = store.records(run_ids=run_ids, warn=log)
        summary = summarize(records, questions, sequential)
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
