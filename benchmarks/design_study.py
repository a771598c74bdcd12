"""The design study behind quick's design: how many seeds each primary question needs under
independent or paired seeds, binary or continuous outcomes, fixed or sequential stopping, at the
correction applied to the declared family; and what quick can detect in 10 minutes.

    python benchmarks/design_study.py > study.md

reads the records shipped for quick and standard (benchmarks/records/, through posenc.results) and
the runs of benchmarks/design_runs.py (benchmarks/results/design-study-runs.json.gz: quick's copy
and passkey grid at more seeds, common random numbers and the answer log-likelihood on), and prints
the tables of docs/benchmark.md (section "Design study"). Every number comes from those records and from
posenc.results.design / posenc.results.sequential (power of the paired t test by the noncentral t,
of Welch's test and of the exact or sequential tests by Monte Carlo with fixed generators), so a
rerun prints the same tables.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.compare.profile import PROFILES
from posenc.results import design, stats
from posenc.results import sequential as sq
from posenc.results.lengths import in_range

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "design-study-runs.json.gz"
REFERENCE = "rope"
OTHERS = ("alibi", "nope", "t5", "sinusoidal")
#: The family quick would declare: each encoding against RoPE on copy past the training length and on
#: the LM (two outcomes x four encodings), Holm over the eight.
FAMILY = 2 * len(OTHERS)
ALPHA = design.family_level(FAMILY)
#: quick's budget: 10 minutes end to end on 2 cores, less set-up (50 s measured: 520 s with it, 470 s
#: inside posenc compare) and posenc compare's own time beside the runs (figures, reports).
BUDGET_S, SETUP_S, CORES = 600.0, 50.0, 2
#: The looks of quick's plan (its [sequential] looks): one source for the study and the profile.
PLAN_LOOKS = PROFILES["quick"].sequential.looks
#: The LM's fixed step count studied (quick's plateau rule stops it at 600-1000).
LM_STEPS = 1000
COLUMNS = {
    "copy": ("tok_1.25x", "pre_1.25x", "em_1.25x", "ll_1.25x", "tok_1.5x", "ll_1.5x"),
    "passkey": ("em_1.5x", "tok_2x", "ll_2x"),
    "lm": ("bpb_train", "bpb_2x", "ratio_2x", "ratio_4x"),
}
#: The questions the goal is stated for (copy's answer-token accuracy at 1.25x, the LM's bits per byte at
#: L_train), with the scale and unit they are printed in: the goal is a third of today's corrected detectable.
HEADLINE = {
    ("copy", "tok_1.25x"): (100, "points"),
    ("copy", "ll_1.25x"): (1, "nats/token"),
    ("lm", "bpb_train"): (1, "bits/byte"),
}
Records = Sequence[dict[str, Any]]


def loglik_units(record: dict[str, Any], column: str) -> np.ndarray | None:
    """Per-example answer log-likelihood (nats per answer token) of a ``ll_<bucket>`` column."""
    ev = record["result"]["eval"].get("default")
    per = (ev or {}).get("per_example", {})
    if "answer_logprob" not in per:
        return None
    bucket = column.partition("_")[2]
    lo, hi = next((lo, hi) for name, lo, hi in stats.RANGES if name == bucket)
    picked = in_range(ev, record["spec"], lo, hi) or []
    if not picked:
        return None
    return np.concatenate([np.asarray(per["answer_logprob"][i], dtype=float) for i in picked])


def seed_means(records: Records, label: str, task: str, column: str) -> dict[int, float]:
    """``{seed: mean over its units}`` of one cell's converged runs."""
    out = {}
    for record in records:
        valid = stats.converged(record) or record.get(
            "fixed_steps"
        )  # a fixed-step run is complete at its end
        if record["label"] != label or record["spec"]["task"] != task or not valid:
            continue
        if column.startswith("ll_"):
            got = loglik_units(record, column)
        else:
            raw = stats.units(record, "default", column)
            got = None if raw is None else stats.as_units(raw)
        if got is not None:
            out[int(record["spec"]["seed"])] = float(np.mean(got))
    return out


def load_runs(path: Path = RUNS) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return list(json.load(f)["runs"])


def _md(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(x: float, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "never"
    return f"{x:.{digits}f}"


# ---------------------------------------------------------------------------
# What a seed costs and what 10 minutes buy.
# ---------------------------------------------------------------------------


def cost_table(quick: Records) -> tuple[str, float, float]:
    """Core-seconds per seed of quick's grid by task, and the seeds 10 minutes buy."""
    by_task: dict[str, list[float]] = {}
    for record in quick:
        by_task.setdefault(record["spec"]["task"], []).append(
            float(record["result"]["timing"]["wall_seconds"])
        )
    seeds = len({int(r["spec"]["seed"]) for r in quick})
    run = json.loads((ROOT / "benchmarks" / "records" / "quick" / "run.json").read_text())
    inside, summed = float(run["wall_seconds"]), sum(sum(v) for v in by_task.values())
    overhead = inside - summed / CORES  # posenc compare's time beside its runs (both cores busy)
    per_seed = summed / seeds
    budget = (BUDGET_S - SETUP_S - overhead) * CORES
    rows = [[task, f"{sum(v) / seeds:.0f}", len(v) // seeds] for task, v in sorted(by_task.items())]
    rows.append(["all", f"{per_seed:.0f}", len(quick) // seeds])
    fixed = (
        sum(  # the LM trained a fixed LM_STEPS steps: its training time scaled to them
            float(r["result"]["timing"]["train_wall_seconds"]) * LM_STEPS / int(r["result"]["train"]["steps"])
            + float(r["result"]["timing"]["wall_seconds"])
            - float(r["result"]["timing"]["train_wall_seconds"])
            for r in quick
            if r["spec"]["task"] == "lm"
        )
        / seeds
    )
    lm_now = sum(by_task["lm"]) / seeds
    rows.append([f"lm at {LM_STEPS} steps", f"{fixed:.0f}", len(by_task["lm"]) // seeds])
    rows.append([f"all, lm at {LM_STEPS} steps", f"{per_seed - lm_now + fixed:.0f}", len(quick) // seeds])
    text = _md(["task", "core-seconds per seed", "runs per seed"], rows)
    text += (
        f"\n\nquick's run: {summed:.0f} core-seconds in {inside:.0f} s inside posenc compare on {CORES} cores "
        f"(beside the runs: {overhead:.0f} s). Ten minutes end to end leave {budget:.0f} core-seconds for runs "
        f"after {SETUP_S:.0f} s of set-up: {budget / per_seed:.1f} seeds of this grid, "
        f"{budget / (per_seed - lm_now + fixed):.1f} with the LM at {LM_STEPS} steps."
    )
    return text, per_seed - lm_now + fixed, overhead


# ---------------------------------------------------------------------------
# Seed spread, pairing, and the seeds each question needs.
# ---------------------------------------------------------------------------


def column_data(records: Records, task: str, column: str) -> dict[str, dict[int, float]]:
    labels = (REFERENCE, *OTHERS)
    return {label: seed_means(records, label, task, column) for label in labels}


def paired_differences(data: dict[str, dict[int, float]], other: str) -> np.ndarray:
    shared = sorted(set(data[other]) & set(data[REFERENCE]))
    return np.array([data[other][s] - data[REFERENCE][s] for s in shared])


def spread_row(source: str, task: str, column: str, data: dict[str, dict[int, float]]) -> list[Any] | None:
    """Seed SDs as the table printed them and as pooled; what pairing leaves of them."""
    rows = [np.array(list(v.values())) for v in data.values() if len(v) >= 2]
    if not rows:
        return None
    sds = [float(np.std(r, ddof=1)) for r in rows]
    median = float(np.median([s for s in sds if s > 0])) if any(s > 0 for s in sds) else math.nan
    pooled = design.pooled_spread(rows)
    diffs = [paired_differences(data, o) for o in OTHERS if len(data[o]) >= 2]
    paired = design.pooled_spread(diffs)
    ss_d = sum(float(((d - d.mean()) ** 2).sum()) for d in diffs)
    ss_ab = 0.0
    for other in OTHERS:
        shared = sorted(set(data[other]) & set(data[REFERENCE]))
        for label in (other, REFERENCE):
            v = np.array([data[label][s] for s in shared])
            ss_ab += float(((v - v.mean()) ** 2).sum()) if len(v) >= 2 else 0.0
    left = ss_d / ss_ab if ss_ab > 0 else math.nan
    seeds = int(np.median([len(v) for v in data.values()]))
    return [source, f"{task} {column}", seeds, _num(median, 3), _num(pooled.sd, 3), _num(paired.sd, 3),
            _num(left), _num(1 - left)]  # fmt: skip


def needed(diff: float, sd: float, *, paired: bool, exact: bool = False) -> str:
    got = design.seeds_needed(diff, sd, alpha=ALPHA, paired=paired, exact=exact, most=60)
    return ">60" if got is None else str(got)


def sequential_needed(shift: float, *, paired: bool, exact: bool = False) -> str:
    """Mean seeds and power of quick's sequential plan (:data:`PLAN_LOOKS`) for a difference of ``shift``
    SDs (of the per-seed differences, paired; of one encoding's seed outcomes, Welch; ``exact``: never
    below the exact test's p-value, as copy's questions are tested): O'Brien-Fleming's spending / Pocock's."""
    out = []
    for spending in sq.SPENDING:
        plan = sq.SequentialPlan(PLAN_LOOKS, spending=spending, exact=exact, paired=paired)
        power, seeds = sq.sequential_power(shift, plan, alpha=ALPHA, draws=8000)
        out.append(f"{seeds:.1f} ({100 * power:.0f}%)")
    return " / ".join(out)


def question_rows(source: str, task: str, column: str, data: dict[str, dict[int, float]]) -> list[list[Any]]:
    """Per question (each encoding against RoPE): the difference and the seeds it needs by design."""
    rows_sd = design.pooled_spread([np.array(list(v.values())) for v in data.values() if len(v) >= 2])
    out = []
    for other in OTHERS:
        d = paired_differences(data, other)
        if len(d) < 2:
            continue
        diff, sd_d = float(d.mean()), float(np.std(d, ddof=1))
        out.append([
            source, f"{task} {column}", f"{other} - rope", _num(diff, 3), _num(sd_d, 3), _num(abs(diff) / sd_d if sd_d else math.inf, 1),
            needed(diff, rows_sd.sd, paired=False), needed(diff, rows_sd.sd, paired=False, exact=True),
            needed(diff, sd_d, paired=True), needed(diff, sd_d, paired=True, exact=True),
            sequential_needed(abs(diff) / rows_sd.sd, paired=False, exact=True) if rows_sd.sd > 0 else "-",
            sequential_needed(abs(diff) / sd_d, paired=True) if sd_d > 0 else "3 (100%) / 3 (100%)",
        ])  # fmt: skip
    return out


# ---------------------------------------------------------------------------
# What quick prints: the detectable difference of a primary question by design.
# ---------------------------------------------------------------------------


def today_cutoff(quick: Records) -> float:
    """The largest raw p-value Benjamini-Hochberg called significant in quick's published table."""
    keys = [(t, c) for t in ("copy", "passkey", "lm") for c in stats.columns(t)]
    raw = [p for key in keys for p in stats.column_tests(quick, *key)[0]]
    adjusted = stats.adjust(raw)
    found = [p for p, q in zip(raw, adjusted) if not math.isnan(q) and q < stats.ALPHA]
    return max(found) if found else math.nan


def detectable_rows(
    name: str, data: dict[str, dict[int, float]], scale: float, unit: str, goal: float, today: float
) -> list[list[Any]]:
    """Detectable difference at 3-12 seeds per design, from this data's spread (pooled, upper bound)."""
    rows_sd = design.pooled_spread([np.array(list(v.values())) for v in data.values() if len(v) >= 2])
    paired = design.pooled_spread([paired_differences(data, o) for o in OTHERS])
    out = []
    for seeds in (3, 4, 5, 6, 8, 10, 12):
        cells: list[str] = []
        for sd, is_paired, exact in (
            (rows_sd.upper, False, False),
            (rows_sd.upper, False, True),
            (paired.upper, True, False),
            (paired.upper, True, True),
        ):
            got = design.detectable(sd, seeds, alpha=ALPHA, paired=is_paired, exact=exact)
            cells.append(_num(scale * got, 2 if scale == 1 else 0))
        out.append(
            [
                name,
                seeds,
                *cells,
                f"{_num(scale * goal, 2 if scale == 1 else 0)} (today {_num(scale * today, 2 if scale == 1 else 0)})",
            ]
        )
    return out


def today_detectable(data: dict[str, dict[int, float]], cutoff: float) -> float:
    """What today's table's test detects after its correction: Welch at the BH cutoff, median row SD."""
    sds = [float(np.std(list(v.values()), ddof=1)) for v in data.values() if len(v) >= 2]
    return stats.detectable(float(np.median([s for s in sds if s > 0])), 3, alpha=cutoff)


def stopping_table(records: Records, column: str = "bpb_train") -> str:
    """How much of the LM's seed spread its stopping step explains: per encoding the seeds' steps and
    values, and the pooled within-encoding regression of the value on the steps."""
    rows, xs, ys = [], [], []
    for label in (REFERENCE, *OTHERS):
        got = sorted(
            (
                int(r["result"]["train"]["steps"]),
                float(np.mean(stats.as_units(stats.units(r, "default", column)))),
            )
            for r in records
            if r["label"] == label
            and r["spec"]["task"] == "lm"
            and stats.converged(r)
            and not r.get("fixed_steps")
        )
        if len(got) < 2:
            continue
        steps, values = (np.array(v, dtype=float) for v in zip(*got))
        xs.append(steps - steps.mean())
        ys.append(values - values.mean())
        rows.append([label, ", ".join(f"{int(a)}" for a in steps), ", ".join(f"{b:.2f}" for b in values)])
    x, y = np.concatenate(xs), np.concatenate(ys)
    slope = float((x * y).sum() / (x * x).sum()) if (x * x).sum() > 0 else 0.0
    df = len(y) - len(xs)
    raw, left = math.sqrt(float((y**2).sum()) / df), math.sqrt(float(((y - slope * x) ** 2).sum()) / (df - 1))
    text = _md(["encoding", "steps (plateau rule)", f"LM {column}"], rows)
    return text + (
        f"\n\nWithin an encoding, {1000 * slope:+.2f} per 1000 steps: the pooled seed SD {raw:.3f} falls to {left:.3f} "
        "once the stopping step is accounted for."
    )


def _sections(quick: Records, standard: Records, runs: Records, emit: Callable[[str], None]) -> None:
    emit("## What a seed costs\n")
    text, per_seed, overhead = cost_table(quick)
    emit(text + "\n")
    sources = [("quick", quick), ("standard", standard), ("paired runs", runs)]
    emit("## Seed spread, and what pairing by seed leaves of it\n")
    spread = []
    for source, records in sources:
        for task, columns in COLUMNS.items():
            for column in columns:
                data = column_data(records, task, column)
                row = spread_row(source, task, column, data) if any(data.values()) else None
                if row:
                    spread.append(row)
    emit(_md(["records", "column", "seeds", "median row SD (printed)", "pooled row SD", "pooled SD of differences to rope",
              "variance left after pairing", "correlation of seed effects"], spread) + "\n")  # fmt: skip
    emit(
        f"## Seeds each question needs (80% power at {ALPHA:.5f}: Holm's first step over {FAMILY} questions)\n"
    )
    rows = []
    for source, records in sources:
        for task, columns in COLUMNS.items():
            for column in columns:
                data = column_data(records, task, column)
                if any(data.values()):
                    rows += question_rows(source, task, column, data)
    emit(_md(["records", "column", "question", "difference", "SD of differences", "difference / SD", "Welch",
              "Welch, exact", "paired t", "paired, exact", "sequential Welch, exact", "sequential paired"], rows) + "\n")  # fmt: skip
    emit("## The LM's seed spread is its stopping step\n")
    emit(stopping_table(quick) + "\n")
    cutoff = today_cutoff(quick)
    emit(
        f"## Detectable difference of a primary question (today's table: Welch at its BH cutoff p = {cutoff:.4f})\n"
    )
    rows = []
    for (task, column), (scale, unit) in HEADLINE.items():
        for source, records in (("quick", quick), ("paired runs", runs)):
            data = column_data(records, task, column)
            if sum(len(v) >= 2 for v in data.values()) < 2:
                continue
            today_data = column_data(quick, task, column)
            today = today_detectable(today_data, cutoff) if any(today_data.values()) else math.nan
            rows += detectable_rows(
                f"{task} {column} ({unit}; {source})", data, scale, unit, today / 3, today
            )
    emit(
        _md(["question", "seeds", "Welch", "Welch, exact", "paired t", "paired, exact", "goal (today)"], rows)
        + "\n"
    )
    for seeds in (3, 4, 5, 6, 8, 10):
        minutes = (seeds * per_seed / CORES + overhead + SETUP_S) / 60
        emit(
            f"- {seeds} seeds (LM at {LM_STEPS} steps): about {minutes:.1f} min end to end on {CORES} idle cores"
        )
    emit("")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=RUNS)
    args = parser.parse_args()
    # the shipped records, read as the docs' tables read them (an earlier benchmark version included)
    sys.path.insert(0, str(ROOT / "scripts"))
    import shipped_records

    quick, _ = shipped_records.load("quick")
    standard, _ = shipped_records.load("standard")
    _sections(quick, standard, load_runs(args.runs), print)


if __name__ == "__main__":
    main()
