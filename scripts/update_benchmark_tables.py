"""Rewrite the benchmark tables in README.md and docs/benchmark.md from the records of a run.

Usage:
    python scripts/update_benchmark_tables.py --block quick|standard|notes|paper-nope-cpu|paper-alibi-cpu|grid [--check]
    python scripts/update_benchmark_tables.py --results DIR --block BLOCK --ship [--run-info FILE]
    python scripts/update_benchmark_tables.py --results DIR --block BLOCK [--check]
    python scripts/update_benchmark_tables.py --block tuning [--check]
    python scripts/update_benchmark_tables.py --block BLOCK --withdraw

The block between ``<!-- compare-BLOCK:start -->`` and ``<!-- compare-BLOCK:end -->`` in each
file that has it is replaced by: the command and its measured wall time, the summary table
(mean [95% interval] per cell, n.c. where no seed converged), and, in docs/benchmark.md,
the claims' verdicts counted by label and the claims table. BLOCK is the profile whose run
the table shows. Without ``--results`` the block is rendered from the records shipped with
the repository (``benchmarks/records/BLOCK/``: the records of the profile's grid, without
their weights, and the run's ``run.json``), so anyone can regenerate a published table.
``--results DIR`` is what ``posenc compare --out DIR`` wrote (records, ``run.json``);
with ``--ship`` the records of the block's grid are first copied from DIR into
``benchmarks/records/BLOCK/`` (DIR may hold other profiles' runs too; ``--run-info`` names
the block's own ``run.json`` when DIR's is another profile's), then the block is rendered
from them. ``--block tuning`` renders the learning-rate choices shipped with posenc
(``src/posenc/compare/tuned_lr.json``) with every candidate's held-out result. With
``--check`` nothing is written; exit 1 if a block differs. ``--withdraw`` replaces a block whose
records are not shipped (its run predates the benchmark as shipped) by a line saying so and how to
publish it, so that no table stands in the docs without the records behind it.

The tables in the docs are therefore always a run of the code as shipped: regenerate
them (same command) whenever the benchmark changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc.compare import tuning
from posenc.compare.profile import load_profile
from posenc.records.spec import BENCHMARK_HISTORY, BENCHMARK_VERSION
from posenc.records.store import ResultStore, record_version
from posenc.results import claims, primary_table, tables

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shipped_records  # noqa: E402  (next to this script)
from docblocks import markers, shown_command, splice  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    ROOT / "README.md": False,
    ROOT / "docs" / "benchmark.md": True,
    ROOT / "docs" / "multiaxis.md": False,
}
# (path -> with the claims table)
#: Blocks written from a results directory: the profiles whose runs the docs show.
RUN_BLOCKS = ("quick", "standard", "notes", "paper-nope-cpu", "paper-alibi-cpu", "grid", "copy-symbols")
#: Blocks whose profile is a file of this repository (a study the docs show), not a shipped profile.
PROFILE_FILES = {"copy-symbols": ROOT / "benchmarks" / "profiles" / "copy-symbols.toml"}
#: Blocks shown without a claims table (a study of one question, whose claims a profile's table judges).
NO_CLAIMS = frozenset({"copy-symbols"})


def claims_for(block: str, with_claims: bool) -> bool:
    """Whether ``block`` shows the claims table in a file that shows claims (``with_claims``)."""
    return with_claims and block not in NO_CLAIMS


def render(results: Path, *, with_claims: bool) -> str:
    """The Markdown of one block from the records (and ``run.json``) under ``results``."""
    records = ResultStore(results).records()
    if not records:
        raise SystemExit(f"{results}: no records")
    info_path = results / "run.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    return render_records(records, info, with_claims=with_claims)


def render_records(records: list[dict], info: dict, *, with_claims: bool, summary: dict | None = None) -> str:
    """The Markdown of one block from ``records`` and their run's ``run.json`` (``info``);
    ``summary``: ``tables.summarize(records)`` when already made (it takes a while)."""
    summary = tables.summarize(records, **tables.declared(info)) if summary is None else summary
    seeds = sorted({r["spec"]["seed"] for r in records})
    versions = records[0]["versions"]
    lines = [
        f"`{shown_command(info.get('command') or 'posenc compare --profile ' + info.get('profile', '?'))}`: "
        f"{len(records)} runs, seeds {', '.join(map(str, seeds))}; {version_text(records)}; "
        f"{_wall(info)}; python {versions['python']}, torch {versions['torch']}.",
        "",
        *([primary_table.markdown(summary["primary"]).rstrip("\n"), ""] if summary.get("primary") else []),
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
        lines += ["", f"{verdict_counts(rows)} {claims.caption(rows)}"]
        lines += ["", "| source | claim | paper | ours | verdict |", "|---|---|---|---|---|"]
        lines += [
            f"| {r['source']} | {r['claim']} | {r['paper']} | {r['ours']} | **{r['verdict']}** |"
            for r in rows
        ]
    return "\n".join(lines) + "\n"


def version_text(records: list[dict]) -> str:
    """``"benchmark version N"`` of the records; for an earlier version than this posenc runs, what
    it was and that it was not re-run (its table stays published as that version's results)."""
    version = record_version(records[0])
    if version == BENCHMARK_VERSION:
        return f"benchmark version {version}"
    return (
        f"benchmark version {version} ({BENCHMARK_HISTORY.get(version, 'unknown')}; published before version "
        f"{BENCHMARK_VERSION}, not re-run under it)"
    )


def verdict_counts(rows: list[dict]) -> str:
    """``"Verdicts of the N claims: agrees a, disagrees b, ..."``: every label that occurs, in
    :data:`posenc.results.claims.VERDICTS` order (agrees and disagrees always)."""
    found: dict[str, int] = {}
    for row in rows:
        found[row["verdict"]] = found.get(row["verdict"], 0) + 1
    labels = [v for v in claims.VERDICTS if v in found or v in (claims.AGREES, claims.DISAGREES)]
    labels += sorted(set(found) - set(labels))
    return f"Verdicts of the {len(rows)} claims: {', '.join(f'{v} {found.get(v, 0)}' for v in labels)}."


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


def withdrawn(block: str) -> str:
    """What a block says while no records of a run of the code as shipped stand behind it."""
    return (
        f"Not published for this version of the benchmark: the table shown here before came from a run\n"
        f"of an earlier version (other statistics), and its re-run has not been made yet. To make it:\n"
        f"`posenc compare --profile {block} --out DIR`, then\n"
        f"`python scripts/update_benchmark_tables.py --results DIR --block {block} --ship`.\n"
    )


def _wall(info: dict) -> str:
    if "wall_seconds" not in info:
        return "wall time not recorded"
    resumed = f", {info['runs_resumed']} runs resumed" if info.get("runs_resumed") else ""
    return f"{info['wall_seconds']:.0f} s wall end to end on {info.get('cores', '?')} cores ({info.get('finished', '')}{resumed})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results",
        type=Path,
        help="a posenc compare --out directory (default: the records shipped for the block)",
    )
    parser.add_argument("--block", choices=(*RUN_BLOCKS, "tuning"), required=True)
    parser.add_argument("--check", action="store_true", help="only report (exit 1) when a block differs")
    parser.add_argument(
        "--ship",
        action="store_true",
        help="copy the block's records from --results into benchmarks/records/BLOCK first (weights left out)",
    )
    parser.add_argument(
        "--run-info",
        type=Path,
        help="with --ship: the block's run.json, when the one in --results is another run's",
    )
    parser.add_argument(
        "--withdraw",
        action="store_true",
        help="replace the block by a line saying it awaits a run of the benchmark as shipped",
    )
    args = parser.parse_args(argv)
    if args.withdraw and (args.results or args.ship or args.check or args.block == "tuning"):
        parser.error("--withdraw takes --block only (a run block)")
    if args.block == "tuning" and (args.results or args.ship):
        parser.error("--block tuning renders the shipped learning rates: no --results, no --ship")
    if args.ship and (args.results is None or args.check):
        parser.error("--ship needs --results DIR (the run to ship) and writes: no --check")
    if args.run_info is not None and not args.ship:
        parser.error("--run-info goes with --ship")
    if args.ship:
        profile = load_profile(PROFILE_FILES[args.block]) if args.block in PROFILE_FILES else None
        folder = shipped_records.export(args.results, args.block, profile=profile, run_info=args.run_info)
        print(f"{shipped_records.shown(folder)}: the {args.block} block's records, from {args.results}")
    source = args.results if args.results is not None and not args.ship else None
    records: list[dict] | None = None
    summary: dict | None = None
    stale = 0
    for path, with_claims in FILES.items():
        text = path.read_text(encoding="utf-8")
        if markers(f"compare-{args.block}")[0] not in text:
            continue
        if args.block == "tuning":
            body = render_tuning()
        elif args.withdraw:
            body = withdrawn(args.block)
        elif source is not None:
            body = render(source, with_claims=claims_for(args.block, with_claims))
        else:
            if records is None:
                records, info = shipped_records.load(args.block)
                summary = tables.summarize(records, **tables.declared(info))
            body = render_records(
                records, info, with_claims=claims_for(args.block, with_claims), summary=summary
            )
        new = splice(text, f"compare-{args.block}", body, path)
        if new == text:
            continue
        if args.check:
            where = source or shipped_records.shown(shipped_records.block_dir(args.block))
            print(f"{path.name}: the {args.block} block differs from {where}")
            stale += 1
        else:
            path.write_text(new, encoding="utf-8")
            print(f"{path.name}: {args.block} block updated")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
