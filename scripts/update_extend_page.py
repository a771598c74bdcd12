"""Write the measured parts of docs/extend.md from ``posenc extend`` results directories.

    python scripts/update_extend_page.py --results DIR [--idle] [--block NAME]   # write, and ship
    python scripts/update_extend_page.py --block NAME [--check]                  # from what is shipped

Replaces what is between the page's ``extend-NAME`` markers (NAME ``results``: the default's run,
``thorough``: the thorough protocol's, ``more``: every scaling SmolLM2 takes on Python's
documentation, the first releases' run) with the run's provenance, tables, caption, what its
records decide (each claim naming its test) and figures (copied to docs/extend/,
``docs/extend/NAME/`` for blocks other than ``results``), and ships what the block is made from,
the run's ``summary.json`` and ``run.json`` (every number the tables show, per document and per
prompt), to ``benchmarks/records/extend/NAME/``. Without ``--results`` the block is rendered from
the shipped files; a block of :data:`PUBLISH` with none shipped yet says so and names the command
that publishes it. ``--check`` only compares (exit 1 when the page differs), as the test suite
does. ``--idle``: the run had the machine to itself, so its wall-clock is stated as a time on that
machine (without it, the wall-clock is said to be no timing result).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docblocks import shown_command  # noqa: E402  (next to this script)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extend.md"
SHIPPED = ROOT / "benchmarks" / "records" / "extend"


def markers(block: str) -> tuple[str, str]:
    return f"<!-- extend-{block}:start -->", f"<!-- extend-{block}:end -->"


FIGURES = ("perplexity", "loss_by_position", "passkey")
#: The blocks a published run fills, and the command that runs it (on two idle cores; its --out under
#: benchmarks/records/extend/runs/, which git ignores: the block ships its summary.json and run.json)
PUBLISH = {
    "results": "posenc extend -o benchmarks/records/extend/runs/smollm2",
    "thorough": "posenc extend --protocol thorough -o benchmarks/records/extend/runs/thorough",
}


def pending(block: str) -> str:
    """What a block of :data:`PUBLISH` says before its run is shipped."""
    out = PUBLISH[block].rsplit(" ", 1)[-1]
    return (
        f"Not published yet: `{PUBLISH[block]}` on two otherwise idle cores, then "
        f"`python scripts/update_extend_page.py --results {out} --block {block} --idle`."
    )


def _minutes(seconds: object) -> str:
    return f"{float(seconds) / 60:.1f} min" if isinstance(seconds, (int, float)) else "?"


def provenance(summary: dict, run: dict, idle: bool) -> str:
    """Who measured what, where, and how long it took (and what the estimate said)."""
    model = summary["model"]
    text = model["text"]
    what = (
        f"{model['label']}; text {text['source']} ({text['documents']} document(s), token sha256 "
        f"{text['sha256'][:12]})"
    )
    protocol = run.get("protocol") or summary.get("protocol") or "smollm2"
    if not run:
        return f"Measured by `posenc extend` ({protocol} protocol): {what}."
    cells = f"{run.get('cells_done', '?')} cells run and {run.get('cells_resumed', '?')} resumed"
    setup = f"{run.get('workers', '?')} worker(s) x {run.get('threads', '?')} thread(s) of {run.get('cores', '?')} cores"
    timing = (
        f"wall-clock {_minutes(run.get('wall_seconds'))} on an otherwise idle machine ({setup}); "
        if idle
        else f"wall-clock {_minutes(run.get('wall_seconds'))} ({setup}) on a machine shared with other work: "
        "not a timing result; "
    )
    memory = (
        f"; peak GPU memory of a cell {run['peak_memory_gib']:g} GiB, measured"
        if run.get("peak_memory_gib")
        else ""
    )
    return (
        f"Measured by `{shown_command(run.get('command') or 'posenc extend')}` ({protocol} protocol) on {run.get('device', 'cpu')}, "
        f"{run.get('finished', '')}: {what}; {run.get('tflop', '?')} TFLOP, {cells}; {timing}"
        f"estimated before the run: {_minutes(run.get('estimated_seconds'))}{memory}."
    )


def section(shipped: Path, block: str) -> str:
    """The block's text from its shipped files (``summary.json``, ``run.json``, ``page.json``)."""
    from posenc.extend.summary_text import caption, markdown, verdicts

    start, end = markers(block)
    if block in PUBLISH and not (shipped / "summary.json").exists():
        return "\n".join([start, pending(block), end])
    summary = json.loads((shipped / "summary.json").read_text())
    run = json.loads((shipped / "run.json").read_text()) if (shipped / "run.json").exists() else {}
    idle = json.loads((shipped / "page.json").read_text())["idle"]
    lines = [start, provenance(summary, run, idle), "", markdown(summary).rstrip(), "", caption(summary), ""]
    said = verdicts(summary)
    if said:
        lines += [*said, ""]
    where = "extend" if block == "results" else f"extend/{block}"
    for name in FIGURES:
        if (PAGE.parent / where / f"{name}.png").exists():
            lines.append(f"![{name.replace('_', ' ')}]({where}/{name}.png)")
    lines.append(end)
    return "\n".join(lines)


#: The protocol whose run each block of :data:`PUBLISH` shows
PROTOCOLS = {"results": "smollm2", "thorough": "thorough"}


def publishable(results: Path, block: str) -> None:
    """A block of :data:`PUBLISH` shows one whole run of its protocol: a run.json that ran every cell
    itself (none resumed from an earlier run, none failed), so its wall-clock is the protocol's."""
    if block not in PUBLISH:
        return
    if not (results / "summary.json").exists() or not (results / "run.json").exists():
        raise SystemExit(
            f"{results}: no summary.json and run.json (the --out of a finished posenc extend run)"
        )
    run = json.loads((results / "run.json").read_text())
    if run.get("protocol") != PROTOCOLS[block]:
        raise SystemExit(
            f"the {block} block shows the {PROTOCOLS[block]} protocol's run; {results} ran {run.get('protocol')!r}"
        )
    for key in ("cells_resumed", "cells_failed"):
        if run.get(key):
            raise SystemExit(
                f"{results}: {run[key]} {key.split('_')[1]} cell(s); the {block} block shows a run that ran "
                f"every cell itself: `{PUBLISH[block]}` into an empty directory"
            )


def ship(results: Path, block: str, idle: bool) -> Path:
    """Copy what the block is made from, and its figures, out of a results directory."""
    publishable(results, block)
    shipped = SHIPPED / block
    shipped.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "run.json"):
        if (results / name).exists():
            shutil.copyfile(results / name, shipped / name)
    (shipped / "page.json").write_text(json.dumps({"idle": idle}) + "\n")
    figures = PAGE.parent / ("extend" if block == "results" else f"extend/{block}")
    figures.mkdir(parents=True, exist_ok=True)
    for name in FIGURES:
        source = results / "figures" / f"{name}.png"
        if source.exists():
            shutil.copyfile(source, figures / f"{name}.png")
    return shipped


def render(text: str, block: str) -> str:
    """``text`` (the page) with the block rendered from its shipped files."""
    start, end = markers(block)
    head, found, rest = text.partition(start)
    if not found:
        raise SystemExit(f"docs/extend.md has no {start} marker")
    _, _, tail = rest.partition(end)
    return head + section(SHIPPED / block, block) + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="the --out directory of a posenc extend run (ships it)")
    parser.add_argument("--block", default="results", help="which block of the page (default: results)")
    parser.add_argument(
        "--idle",
        action="store_true",
        help="the run had the machine to itself: state its wall-clock as a time",
    )
    parser.add_argument("--check", action="store_true", help="only compare the page with the shipped files")
    args = parser.parse_args()
    if args.results and args.check:
        parser.error("--check compares with what is shipped: no --results")
    if args.results:
        ship(args.results, args.block, args.idle)
    text = PAGE.read_text()
    new = render(text, args.block)
    if args.check:
        if new != text:
            print(
                f"docs/extend.md: the {args.block} block differs from benchmarks/records/extend/{args.block}"
            )
            raise SystemExit(1)
        print(f"docs/extend.md: the {args.block} block is what its shipped files give")
        return
    PAGE.write_text(new)
    print(f"wrote {PAGE.relative_to(ROOT)} ({args.block} block) from benchmarks/records/extend/{args.block}")


if __name__ == "__main__":
    main()
