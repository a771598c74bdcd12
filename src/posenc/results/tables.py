"""Summaries of result records: cells with intervals, CSV/JSON files, the terminal table.

Buckets (relative to the longest training n of the run, ``n_train``):

| bucket | evaluation lengths |
|---|---|
| ``in`` (in-distribution) | n <= n_train |
| ``2x`` | n_train < n <= 2 n_train |
| ``4x`` | 2 n_train < n <= 4 n_train |

Every cell is a mean over the label's converged seeds with a 95% interval
(:mod:`posenc.results.stats`, which says how it is computed). A label whose runs did
not converge in-distribution shows ``n.c.`` (not converged) instead of numbers, and
``k/N`` when only k of its N seeds converged. For the language model, ``ratio 2x`` /
``ratio 4x`` are perplexity(L_valid) / perplexity(L_train) at L_valid = 2 and 4 L_train
(the protocol each record names: non-overlapping windows as in the ALiBi paper, or
sliding windows); below 1 means longer windows help.
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

from posenc.results import stats
from posenc.results.stats import BUCKETS, METHOD

NOT_CONVERGED = "n.c."


def _num(x: Any) -> float:
    """Stored floats may be "inf"/"nan" strings (JSON has no such numbers)."""
    if x is None:
        return math.nan
    return float(x)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def bucket_values(lengths: list[int], values: list[float], n_train: int) -> dict[str, float]:
    """Mean of ``values`` over the lengths of each bucket (equal sample counts per length)."""
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
    """One flat row per (record, evaluation variant): what the CSV holds (every seed)."""
    rows = []
    for rec in records:
        spec, result = rec["spec"], rec["result"]
        train = result["train"]
        for variant, ev in result["eval"].items():
            row: dict[str, Any] = {
                "label": stats.run_label(rec, variant),
                "encoding": spec["encoding"],
                "task": spec["task"],
                "seed": spec["seed"],
                "lr": spec["train"]["lr"],
                "converged": bool(train["converged"]),
                "steps_to_converge": train["steps_to_converge"],
                "steps": train["steps"],
                "step_cap": spec["train"]["steps"],
                "finetune_steps": (ev.get("method") or {}).get("finetune", {}).get("steps", 0),
                "steps_per_second": _num(result["timing"]["steps_per_second"]),
                "train_wall_seconds": _num(result["timing"]["train_wall_seconds"]),
                "final_train_loss": _num(train["final_loss"]),
                "run_id": rec["run_id"],
            }
            if spec["task"] == "lm":
                l_train = spec["train"]["max_len"]
                lengths = ev["lengths"]
                row["protocol"] = ev.get("protocol", "nonoverlapping")
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
    """``{"tasks", "method", "rows": {label: {"encoding", "TASK:COLUMN": cell dict, ...}}}``.

    A cell dict is :meth:`posenc.results.stats.Cell.to_dict` (mean, low, high, n, runs,
    units, converged). Per task the row also has ``steps_per_second``, ``steps_to_converge``
    (mean over converged runs), ``seeds`` (runs) and ``converged`` (converged runs).
    """
    per_run: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in run_rows(records):
        per_run[(row["label"], row["task"])].append(row)
    table: dict[str, dict[str, Any]] = {}
    for (label, task), rows in per_run.items():
        entry = table.setdefault(label, {"encoding": rows[0]["encoding"]})
        for column in stats.columns(task):
            entry[f"{task}:{column}"] = stats.cell(records, label=label, task=task, column=column).to_dict()
        entry[f"{task}:steps_per_second"] = _mean([r["steps_per_second"] for r in rows])
        done = [r for r in rows if r["converged"]]
        entry[f"{task}:steps_to_converge"] = _mean([float(r["steps_to_converge"]) for r in done])
        entry[f"{task}:seeds"] = len(rows)
        entry[f"{task}:converged"] = len(done)
        entry[f"{task}:lr"] = sorted({r["lr"] for r in rows})
    tasks = sorted({task for _, task in per_run}, key=lambda t: (t == "lm", t))
    order = sorted(table, key=lambda name: (name.count("["), name))
    not_converged = sorted(
        f"{r['label']} / {r['spec']['task']} / seed {r['spec']['seed']}"
        for r in records
        if not stats.converged(r)
    )
    return {
        "tasks": tasks,
        "method": METHOD,
        "not_converged": not_converged,
        "rows": {name: table[name] for name in order},
    }


def _fmt(value: float, percent: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{100 * value:.0f}%" if percent else f"{value:.2f}"


def _speed(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


def format_cell(c: dict[str, Any] | None, percent: bool, sep: str = " ") -> str:
    """``"72% [65, 80]"`` / ``"1.04 [1.01, 1.08]"`` (``sep`` between mean and interval);
    ``n.c.`` when no seed converged; a ``k/N`` suffix when only k of N seeds did."""
    if not c or not c.get("runs"):
        return "-"
    if not c["n"]:
        return NOT_CONVERGED
    mean, low, high = (_num(c[k]) for k in ("mean", "low", "high"))
    comma = "," if sep == "\n" else ", "
    if percent:
        text = f"{100 * mean:.0f}%{sep}[{100 * low:.0f}{comma}{100 * high:.0f}]"
    else:
        text = f"{_fmt(mean, False)}{sep}[{_fmt(low, False)}{comma}{_fmt(high, False)}]"
    if c["n"] < c["runs"]:
        text += f" {c['n']}/{c['runs']}"
    return text


def table_columns(summary: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(header, summary key, is-percent) for the tables."""
    cols = []
    for task in summary["tasks"]:
        if task == "lm":
            cols += [("LM bpb@L", "lm:bpb_train", False), ("LM ppl 2x", "lm:ratio_2x", False)]
            cols += [("LM ppl 4x", "lm:ratio_4x", False)]
        else:
            cols += [(f"{task} {b}", f"{task}:em_{b}", True) for b, _, _ in BUCKETS]
    return cols


def speed_key(summary: dict[str, Any]) -> str:
    return next((f"{t}:steps_per_second" for t in summary["tasks"] if t != "lm"), "lm:steps_per_second")


def caption(summary: dict[str, Any]) -> str:
    return (
        "tasks: exact match per length bucket (in = n <= n_train, 2x, 4x); LM: bits/byte at L_train, "
        "perplexity ratio to L_train at 2x / 4x. Cells: mean [95% interval], "
        f"{summary.get('method', METHOD)}. {NOT_CONVERGED} = not converged in-distribution (left out of "
        "rankings and claims); k/N = only k of N seeds converged. steps/s of the first task."
    )


def render_table(summary: dict[str, Any], *, title: str = "posenc compare"):
    """A rich Table: encodings x (exact match per bucket, LM perplexity ratios), mean [interval]."""
    table = Table(title=title, caption=caption(summary))
    table.add_column("encoding", no_wrap=True)
    cols = table_columns(summary)
    for header, _, _ in cols:
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("steps/s", justify="right")
    for label, entry in summary["rows"].items():
        cells = [format_cell(entry.get(key), pct, sep="\n") for _, key, pct in cols]
        table.add_row(escape(label), *cells, _speed(entry.get(speed_key(summary), math.nan)))
    return table


def markdown_table(summary: dict[str, Any]) -> str:
    """The same table as Markdown (README and docs are regenerated from it)."""
    cols = table_columns(summary)
    head = ["encoding", *(c[0] for c in cols), "steps/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, entry in summary["rows"].items():
        cells = [format_cell(entry.get(key), pct) for _, key, pct in cols]
        lines.append(
            "| " + " | ".join([label, *cells, _speed(entry.get(speed_key(summary), math.nan))]) + " |"
        )
    return "\n".join(lines) + "\n"


def summary_csv(summary: dict[str, Any]) -> str:
    """``summary.csv``: one row per cell (label x task x column) with its mean, 95% interval
    (``low``, ``high``), converged seeds ``n`` of ``seeds``, ``converged`` (all of them),
    evaluation units per seed, the learning rate(s) and the mean steps to converge."""
    rows = []
    for label, entry in summary["rows"].items():
        for task in summary["tasks"]:
            for column in stats.columns(task):
                c = entry.get(f"{task}:{column}")
                if not c:
                    continue
                rows.append(
                    {
                        "label": label,
                        "encoding": entry["encoding"],
                        "task": task,
                        "column": column,
                        "mean": _num(c["mean"]),
                        "low": _num(c["low"]),
                        "high": _num(c["high"]),
                        "n": c["n"],
                        "seeds": c["runs"],
                        "converged": c["converged"],
                        "units": c["units"],
                        "lr": " ".join(f"{lr:g}" for lr in entry.get(f"{task}:lr", [])),
                        "steps_to_converge": entry.get(f"{task}:steps_to_converge", math.nan),
                    }
                )
    return _csv(rows)


def to_csv(records: list[dict[str, Any]]) -> str:
    """``runs.csv``: one row per run and evaluation variant (every seed, no statistics)."""
    return _csv(run_rows(records))


def _csv(rows: list[dict[str, Any]]) -> str:
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
