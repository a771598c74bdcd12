"""Summaries of result records: cells with intervals, CSV/JSON files, the terminal table.

Buckets, in the trained sequence length in tokens (``T``: the longest row a training example
gives the model, ``[BOS] x [SEP] y``; an evaluation length's ``t`` likewise,
:mod:`posenc.results.lengths`; they do not overlap):

| bucket | evaluation lengths |
|---|---|
| ``in`` (in-distribution) | t <= T |
| ``1.25x`` | T < t <= 1.25 T |
| ``1.5x`` | 1.25 T < t <= 1.5 T |
| ``2x`` | 1.5 T < t <= 2 T |
| ``4x`` | 2 T < t <= 4 T |

Tasks report exact match (``em_*``: the answer and its EOS all right, decoded greedily), the
free-running correct prefix (``pre_*``: the share of the answer the model's own greedy output
gets right before its first error: how far it copies) and teacher-forced answer-token accuracy
(``tok_*``: the share of the answer's tokens predicted right with the gold answer so far fed in,
EOS left out) per bucket. Every cell is a mean over the label's converged seeds with a 95% interval
(:mod:`posenc.results.stats`, which says how it is computed). A label whose runs did not
converge in-distribution shows ``n.c.`` (not converged) instead of numbers, and ``k/N``
when only k of its N seeds converged; the summary says why (:func:`not_converged_reasons`:
the held-out result at the step cap and how the learning rate was chosen). For the
language model, ``ratio 2x`` / ``ratio 4x`` are perplexity(L_valid) / perplexity(L_train)
at L_valid = 2 and 4 L_train (the protocol each record names: non-overlapping windows as in
the ALiBi paper, or sliding windows); below 1 means longer windows help.

Tests and power (exploratory; a profile's declared questions: :mod:`posenc.results.primary`): per
column, the pairs of rows a seed-level test tells apart corrected over every pair of every column
(Welch t over seeds, paired for one model evaluated several ways; Benjamini-Hochberg), the smallest
difference it detects with 80% power and how many seeds per encoding a 10-point (LM: 0.05) difference
needs (:func:`posenc.results.stats.table_separation`). The tables show the in-distribution exact
match, the LM columns and every bucket column with a significant pair; the others are named under
the table and kept in ``summary.csv``.
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

from posenc.records.benchmark_scalings import FAILED_KEY
from posenc.results import primary, stats
from posenc.results.lengths import ratios as length_ratios
from posenc.results.primary import declared  # noqa: F401  (summarize's arguments from a run.json)
from posenc.results.stats import BUCKETS, METHOD

NOT_CONVERGED = "n.c."
FAILED = "failed"  # a scaled evaluation that raised (the run's other evaluations are kept)


def _num(x: Any) -> float:
    """Stored floats may be "inf"/"nan" strings (JSON has no such numbers)."""
    if x is None:
        return math.nan
    return float(x)


def _mean(xs: list[float]) -> float:
    return sum(kept) / len(kept) if (kept := [x for x in xs if not math.isnan(x)]) else math.nan


def bucket_values(ratios: list[float] | None, values: list[float]) -> dict[str, float]:
    """Mean of ``values`` over the lengths of each bucket (equal sample counts per length);
    ``ratios``: each length's tokens over the trained ones (:func:`posenc.results.lengths.ratios`;
    None: unknown, no bucket has a value)."""
    out = {}
    for name, lo, hi in BUCKETS:
        picked = [_num(v) for r, v in zip(ratios or [], values) if lo < r <= hi]
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
                ratios = length_ratios(ev, spec)
                nothing = [math.nan] * len(ev["lengths"])
                buckets = bucket_values(ratios, ev.get("free_exact_match") or ev["exact_match"])
                prefix = bucket_values(ratios, ev.get("free_prefix_share") or nothing)
                tok = bucket_values(ratios, ev.get("answer_accuracy") or nothing)
                row.update({f"em_{k}": v for k, v in buckets.items()})
                row.update({f"pre_{k}": v for k, v in prefix.items()})
                row.update({f"tok_{k}": v for k, v in tok.items()})
            rows.append(row)
    return rows


def summarize(
    records: list[dict[str, Any]],
    questions: dict[str, Any] | None = None,
    sequential: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"tasks", "method", "rows": {label: {"encoding", "TASK:COLUMN": cell dict, ...}}}``.

    A cell dict is :meth:`posenc.results.stats.Cell.to_dict` (mean, low, high, n, runs,
    units, converged). Per task the row also has ``steps_per_second``, ``steps_to_converge``
    (mean over converged runs), ``seeds`` (runs) and ``converged`` (converged runs).
    With the profile's declared ``questions`` and a ``--until decided`` run's plan (``sequential``),
    also ``primary`` and ``sequential``: :func:`posenc.results.primary.summary_part`.
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
    failures = failed_evaluations(records)
    for (label, task), failure in failures.items():
        entry = table.setdefault(label, {"encoding": failure["encoding"]})
        for column in stats.columns(task):
            empty = stats.Cell(math.nan, math.nan, math.nan, 0, 0, 0).to_dict()  # no seed evaluated
            entry.setdefault(f"{task}:{column}", empty)["failed"] = failure["seeds"]
    failed = {f"{label} / {task}": failure["why"] for (label, task), failure in failures.items()}
    tasks = sorted({task for _, task in [*per_run, *failures]}, key=lambda t: (t == "lm", t))
    order = sorted(table, key=lambda name: (name.count("["), name))
    not_converged = sorted(
        f"{r['label']} / {r['spec']['task']} / seed {r['spec']['seed']}"
        for r in records
        if not stats.converged(r)
    )
    separated = stats.table_separation(
        records, [(task, column) for task in tasks for column in stats.columns(task)]
    )
    power = {f"{task}:{column}": sep.to_dict() for (task, column), sep in separated.items()}
    return {
        **primary.summary_part(records, questions, sequential),
        "tasks": tasks,
        "method": METHOD,
        "test": stats.TEST,
        "correction": stats.CORRECTION,
        "not_converged": not_converged,
        "reasons": not_converged_reasons(records) | failed,
        **({"failed_evaluations": failed} if failed else {}),
        "lm_data": lm_data(records),
        "columns": power,
        "rows": {name: table[name] for name in order},
    }


def lm_data(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the LM runs were scored on, one entry per distinct setting: ``split``, ``files``
    (how many), ``bytes_per_file`` and ``scored_bytes`` (records before test splits: the
    validation text, no files)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for record in records:
        if record["spec"]["task"] != "lm":
            continue
        ev = record["result"]["eval"]["default"]
        files = ev.get("files")
        entry = {
            "split": ev.get("split", "validation"),
            "files": len(files) if files else None,
            "bytes_per_file": ev.get("file_span"),
            "scored_bytes": ev.get("scored_bytes"),
        }
        seen.setdefault(tuple(entry.values()), entry)
    return list(seen.values())


def _lm_scored(summary: dict[str, Any]) -> str:
    """``" on the test split (20 files x 1536 bytes)"`` for the caption ('' when no LM ran)."""
    entries = summary.get("lm_data", [])
    if not entries:
        return ""
    parts = [
        f"{e['files']} files x {e['bytes_per_file']} bytes"
        if e["files"]
        else f"the first {e['scored_bytes']} bytes of the validation text"
        for e in entries
    ]
    where = "the test split" if all(e["files"] for e in entries) else "text"
    return f" on {where} ({'; '.join(parts)})"


def not_converged_reasons(records: list[dict[str, Any]]) -> dict[str, str]:
    """Why each ``label / task`` with a seed that did not converge shows ``n.c.`` or ``k/N``: the
    rule it missed, the held-out result of each such seed at the step cap, and how its learning
    rate was chosen (the grid and every candidate's held-out result are in the record)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[(record["label"], record["spec"]["task"])].append(record)
    out = {}
    for (label, task), runs in sorted(groups.items()):
        missed = sorted((r for r in runs if not stats.converged(r)), key=lambda r: r["spec"]["seed"])
        if not missed:
            continue
        train = missed[0]["spec"]["train"]
        if task == "lm":
            rule = f"its held-out loss still fell by {train['plateau']:.0%} or more"
            at_cap = ", ".join(f"seed {r['spec']['seed']}: {_last_check(r):.3f} nats/byte" for r in missed)
        else:
            rule = f"held-out exact match stayed below {train['converge_at']:.0%}"
            at_cap = ", ".join(
                f"seed {r['spec']['seed']}: {_below(_last_check(r), train['converge_at'])}" for r in missed
            )
        lrs = sorted({r["spec"]["train"]["lr"] for r in missed})
        source = missed[0]["spec"].get("lr_source") or "the profile's"
        out[f"{label} / {task}"] = (
            f"{len(missed)} of {len(runs)} seeds: {rule} at the step cap of {train['steps']} ({at_cap}); "
            f"learning rate {', '.join(f'{lr:g}' for lr in lrs)}: {source}"
        )
    return out


def failed_evaluations(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The scaled evaluations that failed (a scaling whose evaluation raised: the run kept its other
    evaluations, :data:`posenc.records.benchmark_scalings.FAILED_KEY`), by ``(label, task)``:
    ``{"seeds": how many, "encoding", "why"}`` (why said as the table's notes say it)."""
    found: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    runs: dict[tuple[str, str], int] = defaultdict(int)
    encoding: dict[tuple[str, str], str] = {}
    for record in records:
        failed = record["result"].get(FAILED_KEY, {})
        for variant in record["spec"].get("scalings", ()):
            key = (f"{record['label']}[{variant}]", record["spec"]["task"])
            runs[key] += 1
            if variant in failed:
                found[key].append((record["spec"]["seed"], failed[variant]))
                encoding[key] = record["spec"]["encoding"]
    out = {}
    for key, failures in sorted(found.items()):
        seeds = ", ".join(str(seed) for seed, _ in sorted(failures))
        why = "; ".join(sorted({reason for _, reason in failures}))
        out[key] = {
            "seeds": len(failures),
            "encoding": encoding[key],
            "why": f"evaluation failed in {len(failures)} of {runs[key]} seeds (seed {seeds}), the run's other "
            f"evaluations kept: {why}",
        }
    return out


def _below(value: float, threshold: float) -> str:
    """``value`` as a percentage that does not read as reaching ``threshold`` (98.9% of a 99% rule
    is "98.9%", not "99%")."""
    shown = f"{value:.0%}"
    if math.isnan(value) or value >= threshold or round(value * 100) < round(threshold * 100):
        return shown
    return f"{math.floor(value * 1000) / 10:.1f}%"


def _last_check(record: dict[str, Any]) -> float:
    checks = record["result"]["train"].get("checks") or {}
    # the held-out metric (valid_exact_match, valid_loss), not the training loss logged beside it
    values = next((v for k, v in checks.items() if k.startswith("valid_")), None)
    return _num(values[-1]) if values else math.nan


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
    ``n.c.`` when no seed converged; a ``k/N`` suffix when only k of N seeds did; ``failed`` when
    the evaluation failed in every seed (a scaling that raised), a ``(k failed)`` suffix when in k."""
    failed = (c or {}).get("failed")
    if failed:
        return (
            FAILED
            if not c or not c.get("runs")
            else format_cell({**c, "failed": 0}, percent, sep) + f" ({failed} failed)"
        )
    if not c or not c.get("runs"):
        return "-"
    if not c["n"]:
        return NOT_CONVERGED
    mean, low, high = (_num(c[k]) for k in ("mean", "low", "high"))
    comma = "," if sep == "\n" else ", "
    if math.isnan(low):  # one converged seed: no interval
        text = f"{100 * mean:.0f}%" if percent else _fmt(mean, False)
        return text + f"{sep}[one seed] {c['n']}/{c['runs']}"
    if percent:
        digits = 1 if round(100 * high) == round(100 * low) else 0  # never "0% [0, 0]": 0.2% [0.1, 0.4]
        text = f"{100 * mean:.{digits}f}%{sep}[{100 * low:.{digits}f}{comma}{100 * high:.{digits}f}]"
    else:
        text = f"{_fmt(mean, False)}{sep}[{_fmt(low, False)}{comma}{_fmt(high, False)}]"
    if c["n"] < c["runs"]:
        text += f" {c['n']}/{c['runs']}"
    return text


#: (header suffix, column prefix) of the task columns: exact match, free-running correct prefix,
#: teacher-forced answer-token accuracy.
METRICS = (("", "em"), (" prefix", "pre"), (" tf-tok", "tok"))


#: The headers of the LM's columns.
LM_HEADERS = {"bpb_train": "LM bpb@L", "bpb_2x": "LM bpb 2x", "bpb_4x": "LM bpb 4x", "ratio_2x": "LM ppl 2x",
              "ratio_4x": "LM ppl 4x"}  # fmt: skip


def column_header(task: str, column: str) -> str:
    """The header a table gives ``task``'s ``column``: ``copy in``, ``copy prefix 1.5x``, ``copy tf-tok
    2x``, ``LM bpb@L``."""
    if task == "lm":
        return LM_HEADERS[column]
    metric, _, bucket = column.partition("_")
    suffix = next(suffix for suffix, name in METRICS if name == metric)
    return f"{task}{suffix} {bucket}"


def _all_columns(summary: dict[str, Any]) -> list[tuple[str, str, bool]]:
    cols = []
    for task in summary["tasks"]:
        if task == "lm":
            cols += [(column_header(task, c), f"lm:{c}", False) for c in LM_HEADERS]
            continue
        cols.append((f"{task} in", f"{task}:em_in", True))
        for _, metric in METRICS:
            cols += [
                (column_header(task, f"{metric}_{b}"), f"{task}:{metric}_{b}", True)
                for b, _, _ in BUCKETS
                if b != "in"
            ]
    return cols


def _always_shown(key: str) -> bool:
    return key.startswith("lm:") or key.endswith(":em_in")


def _shown(summary: dict[str, Any], key: str) -> bool:
    """In-distribution and LM columns always; a bucket column unless no row has data for it (no
    evaluation length falls in it) or it had a testable pair and no significant one."""
    if _always_shown(key):
        return True
    cells = [entry[key] for entry in summary["rows"].values() if key in entry]
    if not any(c.get("runs") for c in cells):
        return False
    power = summary.get("columns", {}).get(key)
    return power is None or power["pairs"] == 0 or power["significant"] > 0


def table_columns(summary: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(header, summary key, is-percent) for the tables: the in-distribution exact match, the LM
    columns, and the bucket columns (exact match, free-running prefix, teacher-forced answer-token
    accuracy) with at least one significant pair (:func:`dropped_columns` names the others)."""
    return [col for col in _all_columns(summary) if _shown(summary, col[1])]


def dropped_columns(summary: dict[str, Any]) -> list[str]:
    """Headers of the bucket columns with data left out of the tables: a testable pair, and no
    significant one."""
    power = summary.get("columns", {})
    return [
        header
        for header, key, _ in _all_columns(summary)
        if not _shown(summary, key) and power.get(key, {}).get("pairs", 0) > 0
    ]


#: The rows under a table: what each column can tell apart (:func:`power_cells`).
POWER_ROWS = ("significant", "detectable", "seeds for 10 pts")


def power_cells(summary: dict[str, Any], cols: list[tuple[str, str, bool]]) -> list[list[str]]:
    """Per column, three rows: ``"k/N"`` pairs of rows a test tells apart (after the column's
    correction); the difference it detects with 80% power at its seeds (percentage points for
    rates, the column's unit for the LM; ``-``: no spread to judge by); and how many seeds per
    encoding the target difference needs (10 points; LM 0.05)."""
    power = summary.get("columns", {})
    rows: list[list[str]] = [[], [], []]
    for _, key, pct in cols:
        p = power.get(key)
        if p is None:
            for row in rows:
                row.append("-")
            continue
        rows[0].append(f"{p['significant']}/{p['pairs']}")
        d = _num(p["detectable"])
        rows[1].append("-" if math.isnan(d) else (f"{100 * d:.0f} pts" if pct else f"{d:.2f}"))
        need = p.get("seeds_for_target")
        rows[2].append("-" if need is None or math.isnan(_num(p["seed_sd"])) else str(need))
    return rows


def speed_key(summary: dict[str, Any]) -> str:
    return next((f"{t}:steps_per_second" for t in summary["tasks"] if t != "lm"), "lm:steps_per_second")


def caption(summary: dict[str, Any], *, per_task: bool = False) -> str:
    """What the table's cells mean; ``per_task``: for :func:`render_tables` (a table per task,
    steps/s of that task)."""
    speed = "steps/s of that table's task" if per_task else "steps/s of the first task"
    seeds = sorted({p["seeds"] for p in summary.get("columns", {}).values() if p.get("seeds")})
    text = (
        "tasks: per length bucket in the trained sequence length in tokens (in = at most the longest training "
        "row, BOS x SEP y; 1.25x, 1.5x, 2x, 4x = rows of (1, 1.25], (1.25, 1.5], (1.5, 2], (2, 4] times its tokens), "
        "exact match (greedy decoding), prefix (free-running: the share of the answer the model's own greedy "
        "output gets right before its first error) and tf-tok (teacher-forced answer-token accuracy: each answer "
        "token predicted with the gold answer before it fed in, EOS left out); "
        f"LM{_lm_scored(summary)}: bits/byte at L_train, 2x and 4x L_train, and the perplexity ratio to L_train at 2x / 4x (units: the test files). "
        "Cells: mean [95% interval], "
        f"{summary.get('method', METHOD)}. {NOT_CONVERGED} = not converged in-distribution (a failure in the "
        "rankings of papers that train for fixed steps, left out of other claims); k/N = only k of N seeds "
        f"converged; [one seed]: no interval. {speed}. "
        f"significant: pairs of rows that differ at 5% by a {summary.get('test', stats.TEST)}, "
        f"{summary.get('correction', stats.CORRECTION)}; one model evaluated several ways (rope, "
        "rope[dynamic:4], ...) is one encoding against the others and is compared within itself. "
        "detectable: the difference such a test detects with 80% power at 5% at these seeds (before the "
        "table's correction, from the column's seed spread); seeds for 10 pts: seeds per encoding that a 10-point difference (LM columns: 0.05) needs."
    )
    few = [n for n in seeds if stats.min_permutation_p(n, n) > stats.ALPHA]
    if few:
        text += (
            f" With {few[0]} seeds per encoding an exact permutation test cannot reach 5% "
            f"(smallest p {stats.min_permutation_p(few[0], few[0]):.2f}): significance rests on the t test's "
            "normal spread of seeds; 4 seeds (p 0.03) are the fewest a distribution-free test can use."
        )
    dropped = dropped_columns(summary)
    if dropped:
        text += f" Columns with no significant pair, left out: {', '.join(dropped)}."
    if any(isinstance(c, dict) and c.get("failed") for e in summary["rows"].values() for c in e.values()):
        text += (
            f" {FAILED} = the scaling's evaluation raised (the run kept its other evaluations); (k failed) = in k "
            "seeds; why: under the table."
        )
    return text


def reasons_markdown(summary: dict[str, Any]) -> str:
    """Why each n.c. / k/N / failed cell is one, as Markdown bullets ('' when every run converged
    and every evaluation ran)."""
    reasons = summary.get("reasons", {})
    return "".join(f"- `{key}`: {text}\n" for key, text in reasons.items())


def render_table(
    summary: dict[str, Any],
    *,
    title: str = "posenc compare",
    task: str | None = None,
    caption_text: bool = True,
):
    """A rich Table: encodings x (exact match, free-running prefix and teacher-forced answer-token
    accuracy per bucket, LM perplexity ratios), mean [interval]; ``task``: that task's columns only."""
    table = Table(title=title, caption=caption(summary) if caption_text else None)
    table.add_column("encoding", no_wrap=True)
    cols = [c for c in table_columns(summary) if task is None or c[1].rsplit(":", 1)[0] == task]
    for header, _, _ in cols:  # a task's own table: its name is in the title, not every header
        shown = header if task is None or task == "lm" else header.removeprefix(f"{task} ")
        table.add_column(shown, justify="right", no_wrap=True)
    speed = speed_key(summary) if task is None else f"{task}:steps_per_second"
    table.add_column("steps/s", justify="right")
    for label, entry in summary["rows"].items():
        if task is not None and not any(key in entry for _, key, _ in cols):
            continue  # a row without runs of this task (an LM-only scaling on a task's table)
        cells = [format_cell(entry.get(key), pct, sep="\n") for _, key, pct in cols]
        table.add_row(escape(label), *cells, _speed(entry.get(speed, math.nan)))
    table.add_section()
    for name, row in zip(POWER_ROWS, power_cells(summary, cols)):
        table.add_row(name, *row, "")
    return table


def render_tables(summary: dict[str, Any], *, title: str = "posenc compare") -> list[Any]:
    """One rich Table per task, so each fits a terminal; print ``caption(summary, per_task=True)``
    under them."""
    return [
        render_table(summary, title=f"{title}: {task}", task=task, caption_text=False)
        for task in summary["tasks"]
    ]


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
    for name, row in zip(POWER_ROWS, power_cells(summary, cols)):
        lines.append(f"| *{name}* | " + " | ".join(row) + " | |")
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
                    | ({"failed": c["failed"]} if c.get("failed") else {})  # seeds whose evaluation failed
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
        if isinstance(x, (dict, list)):
            return {k: clean(v) for k, v in x.items()} if isinstance(x, dict) else [clean(v) for v in x]
        return x

    return json.dumps(clean(summary), indent=2, allow_nan=False)
