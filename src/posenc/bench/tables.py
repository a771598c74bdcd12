"""Summaries of result records: length buckets, LM ratios, CSV/JSON files, the terminal table.

Buckets (relative to the longest training n of the run, ``n_train``):

| bucket | evaluation lengths |
|---|---|
| ``in`` (in-distribution) | n <= n_train |
| ``2x`` | n_train < n <= 2 n_train |
| ``4x`` | 2 n_train < n <= 4 n_train |

A bucket's value is the mean exact match over its lengths (equal sample counts).
For the language model, ``ratio 2x`` / ``ratio 4x`` are perplexity(L_valid) /
perplexity(L_train) at L_valid = 2 and 4 L_train (non-overlapping windows, the ALiBi
paper's protocol; below 1 means longer windows help). Several seeds are averaged
(and counted in ``seeds``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from typing import Any

from rich.markup import escape
from rich.table import Table

BUCKETS = (("in", 0.0, 1.0), ("2x", 1.0, 2.0), ("4x", 2.0, 4.0))


def _num(x: Any) -> float:
    """Stored floats may be "inf"/"nan" strings (JSON has no such numbers)."""
    if x is None:
        return math.nan
    return float(x)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def bucket_values(lengths: list[int], values: list[float], n_train: int) -> dict[str, float]:
    out = {}
    for name, lo, hi in BUCKETS:
        picked = [_num(v) for n, v in zip(lengths, values) if lo * n_train < n <= hi * n_train]
        out[name] = _mean(picked)
    return out


def lm_ratio(ev: dict[str, Any], l_train: int, multiple: int) -> float:
    lengths = ev["lengths"]
    ratio = ev.get("ratio_to_train")
    if ratio is None or multiple * l_train not in lengths:
        return math.nan
    return _num(ratio[lengths.index(multiple * l_train)])


def run_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per (record, evaluation variant): what the CSV holds."""
    rows = []
    for rec in records:
        spec, result = rec["spec"], rec["result"]
        for variant, ev in result["eval"].items():
            label = rec["label"] if variant == "default" else f"{rec['label']}[{variant}]"
            row: dict[str, Any] = {
                "label": label,
                "encoding": spec["encoding"],
                "task": spec["task"],
                "seed": spec["seed"],
                "steps": spec["train"]["steps"],
                "steps_per_second": _num(result["timing"]["steps_per_second"]),
                "train_wall_seconds": _num(result["timing"]["train_wall_seconds"]),
                "final_train_loss": _num(result["train"]["final_loss"]),
                "run_id": rec["run_id"],
            }
            if spec["task"] == "lm":
                l_train = spec["train"]["max_len"]
                lengths = ev["lengths"]
                row["bpb_train"] = (
                    _num(ev["bits_per_byte"][lengths.index(l_train)]) if l_train in lengths else math.nan
                )
                row["ratio_2x"] = lm_ratio(ev, l_train, 2)
                row["ratio_4x"] = lm_ratio(ev, l_train, 4)
            else:
                buckets = bucket_values(ev["lengths"], ev["exact_match"], spec["train"]["max_len"])
                tok = bucket_values(ev["lengths"], ev["token_accuracy"], spec["train"]["max_len"])
                row.update({f"em_{k}": v for k, v in buckets.items()})
                row.update({f"tok_{k}": v for k, v in tok.items()})
            rows.append(row)
    return rows


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Seed-averaged summary: ``{"tasks": [...], "rows": {label: {column: value}}}``."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in run_rows(records):
        grouped[(row["label"], row["task"])].append(row)
    tasks = sorted({task for _, task in grouped}, key=lambda t: (t == "lm", t))
    table: dict[str, dict[str, Any]] = {}
    for (label, task), rows in grouped.items():
        entry = table.setdefault(label, {"encoding": rows[0]["encoding"]})
        keys = [k for k in rows[0] if k.startswith(("em_", "tok_", "ratio_", "bpb_"))]
        for key in keys:
            entry[f"{task}:{key}"] = _mean([r[key] for r in rows])
        entry[f"{task}:steps_per_second"] = _mean([r["steps_per_second"] for r in rows])
        entry[f"{task}:seeds"] = len(rows)
    order = sorted(table, key=lambda name: (name.count("["), name))
    return {"tasks": tasks, "rows": {name: table[name] for name in order}}


def _fmt(value: float, percent: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{100 * value:.0f}%" if percent else f"{value:.2f}"


def table_columns(summary: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(header, summary key, is-percent) for the terminal table."""
    cols = []
    for task in summary["tasks"]:
        if task == "lm":
            cols += [("LM bpb@L", "lm:bpb_train", False), ("LM ppl 2x", "lm:ratio_2x", False)]
            cols += [("LM ppl 4x", "lm:ratio_4x", False)]
        else:
            cols += [(f"{task} {b}", f"{task}:em_{b}", True) for b, _, _ in BUCKETS]
    return cols


def _cell(entry: dict[str, Any], key: str, percent: bool) -> str:
    """Exact-match cells also show answer-token accuracy: ``"0% (12%)"``."""
    text = _fmt(entry.get(key, math.nan), percent)
    if ":em_" in key:
        tok = _fmt(entry.get(key.replace(":em_", ":tok_"), math.nan), True)
        text = f"{text} ({tok})"
    return text


def render_table(summary: dict[str, Any], *, title: str = "posenc compare"):
    """A rich Table: encodings x (exact match per bucket, LM perplexity ratios)."""
    table = Table(
        title=title,
        caption="tasks: exact match (answer-token accuracy) per length bucket; "
        "LM: bits/byte at L_train, perplexity ratio to L_train at 2x / 4x; steps/s of the first task",
    )
    table.add_column("encoding")
    cols = table_columns(summary)
    for header, _, _ in cols:
        table.add_column(header, justify="right")
    speed_key = next((f"{t}:steps_per_second" for t in summary["tasks"] if t != "lm"), "lm:steps_per_second")
    table.add_column("steps/s", justify="right")
    for label, entry in summary["rows"].items():
        cells = [_cell(entry, key, pct) for _, key, pct in cols]
        table.add_row(escape(label), *cells, _fmt(entry.get(speed_key, math.nan), False))
    return table


def to_csv(records: list[dict[str, Any]]) -> str:
    rows = run_rows(records)
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    return buffer.getvalue()


def to_json(summary: dict[str, Any]) -> str:
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(summary), indent=2, allow_nan=False)
