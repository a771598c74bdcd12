"""What a benchmark record gives a cell of the tables: its columns, the length buckets a task's
columns read, the table label of each evaluation of a run, and the per-unit values of one run
(one value per evaluation example for a task; per test file for the LM). The statistics over
seeds are :mod:`posenc.results.stats`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# the shared vocabulary of columns, re-exported for the modules that read cells
from posenc.records.columns import BUCKETS, LM_COLUMNS, TASK_COLUMNS, bounded, columns  # noqa: F401
from posenc.results.lengths import in_range as lengths_in_range

#: Every length past the training one up to 4x (what rankings of "unseen lengths" use).
UNSEEN = ("out", 1.0, 4.0)
#: Every length past the training one up to 2x (the NoPE paper's test set: L < n <= 2L).
UP_TO_2X = ("to2x", 1.0, 2.0)
#: What a task column may read: the buckets and the two wider ranges.
RANGES = (*BUCKETS, UNSEEN, UP_TO_2X)


#: Appended to the label of a scaling evaluated outside its regime (PI or YaRN without the
#: fine-tune their papers do): a cell of its own, never averaged with the fine-tuned ones.
NOT_FINETUNED = "no fine-tune"


def run_label(record: dict[str, Any], variant: str) -> str:
    """The table label of one evaluation of a run: ``rope``, ``rope[dynamic:4]``, or
    ``rope[linear:4, no fine-tune]`` for a scaling evaluated outside its regime."""
    if variant == "default":
        return record["label"]
    method = record["result"]["eval"][variant].get("method") or {}
    return (
        f"{record['label']}[{variant}, {NOT_FINETUNED}]"
        if method.get("outside_regime")
        else f"{record['label']}[{variant}]"
    )


def converged(record: dict[str, Any]) -> bool:
    return bool(record["result"]["train"].get("converged", False))


def number(x: Any) -> float:
    return math.nan if x is None else float(x)


def _bucket_lengths(ev: dict[str, Any], spec: dict[str, Any], bucket: str) -> list[int]:
    lo, hi = next((lo, hi) for name, lo, hi in RANGES if name == bucket)
    return lengths_in_range(ev, spec, lo, hi) or []


def units(record: dict[str, Any], variant: str, column: str) -> Any:
    """The per-unit values of one run for ``column``: a 1-D array, or for ratios a pair of
    arrays (loss at m L per block, loss at L per block); None when the run has no such cell."""
    ev = record["result"]["eval"].get(variant)
    if ev is None:
        return None
    spec = record["spec"]
    if spec["task"] == "lm":
        return _lm_units(ev, spec, column)
    metric, _, bucket = column.partition("_")
    if metric not in ("em", "pre", "tok") or bucket not in {b for b, _, _ in RANGES}:
        return None
    picked = _bucket_lengths(ev, spec, bucket)
    if not picked:
        return None
    per = ev["per_example"]
    if metric == "pre":  # free-running correct prefix, as a share of the answer
        if "free_prefix" not in per:  # a record without free-running decoding
            return None
        prefix = np.concatenate([np.asarray(per["free_prefix"][i], dtype=float) for i in picked])
        return prefix / np.concatenate([np.asarray(per["answer_tokens"][i], dtype=float) for i in picked])
    key = {"em": "free_exact_match" if "free_exact_match" in per else "exact_match", "tok": "answer_accuracy"}
    rows = per.get(key[metric])
    if rows is None:  # a record written before answer-token accuracy was kept
        return None
    return np.concatenate([np.asarray(rows[i], dtype=float) for i in picked])


def by_file(values: Any, files: int) -> np.ndarray:
    """Per-file means of values laid out file by file (``files`` equal runs of windows along the
    last axis): the LM's unit. Windows of one file move together (one file's style, vocabulary and
    topic), so treating them as independent units would understate the spread over files."""
    values = np.asarray(values, dtype=float)
    return values.reshape(*values.shape[:-1], files, values.shape[-1] // files).mean(-1)


def _lm_units(ev: dict[str, Any], spec: dict[str, Any], column: str) -> Any:
    lengths, l_train = ev["lengths"], spec["train"]["max_len"]
    windows = [np.asarray([number(v) for v in row], dtype=float) for row in ev["window_nats"]]
    if l_train not in lengths:
        return None
    files = len(ev.get("files") or ())
    if files and all(len(w) % files == 0 for w in windows):
        windows = [by_file(w, files) for w in windows]  # scored file by file: the file is the unit
    base = windows[lengths.index(l_train)]
    if column == "bpb_train":
        return base / math.log(2)
    kind, _, times = column.partition("_")
    if kind not in ("bpb", "ratio") or not times.endswith("x") or int(times[:-1]) * l_train not in lengths:
        return None
    longer = windows[lengths.index(int(times[:-1]) * l_train)]
    if kind == "bpb":
        return longer / math.log(2)
    multiple = int(times[:-1])
    if not files and ev.get("protocol", "nonoverlapping") == "nonoverlapping":
        # older records (one stretch of validation text): m windows at L per window at mL
        base = base[: len(longer) * multiple].reshape(len(longer), multiple).mean(1)
    return longer, base


def labels_and_tasks(records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every (label, task) the records hold, scalings included."""
    out: dict[tuple[str, str], None] = {}
    for record in records:
        for variant in record["result"]["eval"]:
            out[(run_label(record, variant), record["spec"]["task"])] = None
    return list(out)
