"""Rewrite the benchmark tables in README.md and docs/benchmark.md from a results directory.

Usage:
    python scripts/update_benchmark_tables.py --results DIR --block quick|standard|notes|paper-nope-cpu|paper-alibi-cpu|grid [--check]
    python scripts/update_benchmark_tables.py --block tuning [--check]

``DIR`` is what ``posenc compare --out DIR`` wrote (records, ``run.json``). The block
between ``<!-- compare-BLOCK:start -->`` and ``<!-- compare-BLOCK:end -->`` in each file
that has it is replaced by: the command and its measured wall time, the summary table
(mean [95% interval] per cell, n.c. where no seed converged), and, in docs/benchmark.md,
the claims table. ``--block tuning`` renders the learning-rate choices shipped with posenc
(``src/posenc/compare/tuned_lr.json``) with every candidate's held-out result. With
``--check`` nothing is written; exit 1 if a block differs.

The tables in the docs are therefore always a run of the code as shipped: regenerate
them (same command) whenever the benchmark changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc.compare import tuning
from posenc.records.spec import BENCHMARK_VERSION
from posenc.records.store import ResultStore
from posenc.results import claims, tables

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docblocks import markers, shown_command, splice  # noqa: E402  (next to this script)

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    ROOT / "README.md": False,
    ROOT / "docs" / "benchmark.md": True,
    ROOT / "docs" / "multiaxis.md": False,
}
# (path -> with the claims table)
#: Blocks written from a results directory: the profiles whose runs the docs show.
RUN_BLOCKS = ("quick", "standard", "notes", "paper-nope-cpu", "paper-alibi-cpu", "grid")


def render(results: Path, *, with_claims: bool) -> str:
    """The Markdown of one block from the records (and ``run.json``) under ``results``."""
    records = ResultStore(results).records()
    if not records:
        raise SystemExit(f"{results}: no records")
    info_path = results / "run.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    summary = tables.summarize(records)
    seeds = sorted({r["spec"]["seed"] for r in records})
    versions = records[0]["versions"]
    lines = [
        f"`{shown_command(info.get('command') or 'posenc compare --profile ' + info.get('profile', '?'))}`: "
        f"{len(records)} runs, seeds {', '.join(map(str, seeds))}; benchmark version {BENCHMARK_VERSION}; "
        f"{_wall(info)}; python {versions['python']}, torch {versions['torch']}.",
        "",
        tables.markdown_table(summary).rstrip("\n"),
        "",
        tables.caption(summary),
    ]
    reasons = tables.reasons_markdown(summary)
    if reasons:
        lines += [
            "",
            "Why a cell is n.c. or k/N (held-out result at the step cap, how the learning rate was chosen):",
        ]
        lines += ["", reasons.rstrip("\n")]
    if with_claims:
        rows = claims.claims(records)
        lines += ["", "| source | claim | paper | ours | verdict |", "|---|---|---|---|---|"]
        lines += [
            f"| {r['source']} | {r['claim']} | {r['paper']} | {r['ours']} | **{r['verdict']}** |"
            for r in rows
        ]
    return "\n".join(lines) + "\n"


def render_tuning() -> str:
    """The shipped learning-rate choices, one row per (task, encoding), every candidate shown."""
    table = tuning.shipped_table()
    lines = [
        f"Written by `{'`, `'.join(table.get('commands', []))}`; seed {tuning.TUNE_SEED} (no profile evaluates "
        "it). Candidate cells: held-out steps to converge (tasks, `n.c.`: not converged at the cap, then the "
        "final held-out exact match) or the lowest held-out loss (LM, nats/byte).",
        "",
        "| profiles | task | encoding | chosen lr | candidates |",
        "|---|---|---|---|---|",
    ]
    rows = sorted(table["entries"].values(), key=lambda e: (len(e["profiles"]) == 1, e["task"], e["label"]))
    for entry in rows:
        cells = []
        for c in entry["candidates"]:
            if c["metric"] == "valid_loss":
                cells.append(f"{c['lr']:g}: {c['best']:.3f}" + ("" if c["converged"] else " (n.c.)"))
            elif c["converged"]:
                cells.append(f"{c['lr']:g}: {c['steps_to_converge']} steps")
            else:
                cells.append(f"{c['lr']:g}: n.c. ({100 * c['final']:.0f}%)")
        lines.append(
            f"| {', '.join(entry['profiles'])} | {entry['task']} | {entry['label']} | {entry['lr']:g} | {'; '.join(cells)} |"
        )
    return "\n".join(lines) + "\n"


def _wall(info: dict) -> str:
    if "wall_seconds" not in info:
        return "wall time not recorded"
    resumed = f", {info['runs_resumed']} runs resumed" if info.get("runs_resumed") else ""
    return f"{info['wall_seconds']:.0f} s wall end to end on {info.get('cores', '?')} cores ({info.get('finished', '')}{resumed})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="a posenc compare --out directory (not for tuning)")
    parser.add_argument("--block", choices=(*RUN_BLOCKS, "tuning"), required=True)
    parser.add_argument("--check", action="store_true", help="only report (exit 1) when a block differs")
    args = parser.parse_args(argv)
    if args.block != "tuning" and args.results is None:
        parser.error(f"--results is required for the {', '.join(RUN_BLOCKS)} blocks")
    stale = 0
    for path, with_claims in FILES.items():
        text = path.read_text(encoding="utf-8")
        if markers(f"compare-{args.block}")[0] not in text:
            continue
        if args.block == "tuning":
            body = render_tuning()
        else:
            body = render(args.results, with_claims=with_claims)
        new = splice(text, f"compare-{args.block}", body, path)
        if new == text:
            continue
        if args.check:
            print(f"{path.name}: the {args.block} block differs from {args.results}")
            stale += 1
        else:
            path.write_text(new, encoding="utf-8")
            print(f"{path.name}: {args.block} block updated")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
