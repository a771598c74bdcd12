"""Write the measured part of docs/extend.md from a ``posenc extend`` results directory.

    python scripts/update_extend_page.py --results DIR [--idle]   # DIR: the --out of a run of `posenc extend`

Replaces what is between the page's ``extend-results`` markers with the run's provenance, table,
caption and figures (copied to docs/extend/). ``--idle``: the run had the machine to itself, so
its wall-clock is stated as the default's time on that machine (without it, the wall-clock is
said to be no timing result). The reading of the numbers next to the papers stays hand-written
below the markers and cites the table, not numbers of its own.
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
START, END = "<!-- extend-results:start -->", "<!-- extend-results:end -->"
FIGURES = ("perplexity", "loss_by_position", "passkey")


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
    return (
        f"Measured by `{shown_command(run.get('command') or 'posenc extend')}` ({protocol} protocol) on {run.get('device', 'cpu')}, "
        f"{run.get('finished', '')}: {what}; {run.get('tflop', '?')} TFLOP, {cells}; {timing}"
        f"estimated before the run: {_minutes(run.get('estimated_seconds'))}."
    )


def section(results: Path, idle: bool = False) -> str:
    from posenc.extend.summary import caption, markdown

    summary = json.loads((results / "summary.json").read_text())
    run = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    lines = [START, provenance(summary, run, idle), "", markdown(summary).rstrip(), "", caption(summary), ""]
    figures = ROOT / "docs" / "extend"
    figures.mkdir(exist_ok=True)
    for name in FIGURES:
        source = results / "figures" / f"{name}.png"
        if source.exists():
            shutil.copyfile(source, figures / f"{name}.png")
            lines.append(f"![{name.replace('_', ' ')}](extend/{name}.png)")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", required=True, type=Path, help="the --out directory of a posenc extend run"
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="the run had the machine to itself: state its wall-clock as a time",
    )
    args = parser.parse_args()
    text = PAGE.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    PAGE.write_text(head + section(args.results, args.idle) + tail)
    print(f"wrote {PAGE.relative_to(ROOT)} from {args.results}")


if __name__ == "__main__":
    main()
