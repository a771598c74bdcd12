"""The columns of the benchmark's tables, the vocabulary both halves share: what a cell of a task row
or an LM row is (:mod:`posenc.results.record_units` reads each from a record) and what a profile's
declared questions may name (:mod:`posenc.records.questions`)."""

from __future__ import annotations

#: Length buckets relative to the trained sequence length in tokens (posenc.results.lengths): (name,
#: lo, hi] x the longest training row. They do not overlap, so a row shows where an encoding falls
#: off (a bucket with no evaluation length has no cell).
BUCKETS = (("in", 0.0, 1.0), ("1.25x", 1.0, 1.25), ("1.5x", 1.25, 1.5), ("2x", 1.5, 2.0), ("4x", 2.0, 4.0))
TASK_COLUMNS = tuple(f"{m}_{b}" for m in ("em", "pre", "tok") for b, _, _ in BUCKETS)
LM_COLUMNS = ("bpb_train", "bpb_2x", "bpb_4x", "ratio_2x", "ratio_4x")


def columns(task: str) -> tuple[str, ...]:
    """The columns of ``task``'s rows: :data:`LM_COLUMNS` for the LM, :data:`TASK_COLUMNS` for a task."""
    return LM_COLUMNS if task == "lm" else TASK_COLUMNS


def bounded(column: str) -> bool:
    """True for a rate column (values in [0, 1]: exact match, token accuracy, free-running scores):
    its interval is on the logit scale and never zero-width at 0% / 100%."""
    return not (column in LM_COLUMNS or column.startswith(("bpb", "ratio")))
