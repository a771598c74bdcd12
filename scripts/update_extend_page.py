"""Write the measured part of docs/extend.md from a ``posenc extend`` results directory.

    python scripts/update_extend_page.py --results DIR     # DIR: the --out of a run of `posenc extend`

Replaces what is between the page's ``extend-results`` markers with the run's table, caption and
provenance, and copies its figures to docs/extend/. The reading of the numbers next to the
papers stays hand-written below the markers.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extend.md"
START, END = "<!-- extend-results:start -->", "<!-- extend-results:end -->"
FIGURES = ("perplexity", "loss_by_position", "passkey")


def section(results: Path) -> str:
    from posenc.extend.summary import caption, markdown

    summary = json.loads((results / "summary.json").read_text())
    run = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    model = summary["model"]
    provenance = (
        f"Measured by `posenc extend` ({summary.get('protocol', 'smollm2')} protocol as shipped): {model['label']}; "
        f"text {model['text']['source']} ({model['text']['documents']} document(s), token sha256 "
        f"{model['text']['sha256'][:12]})."
    )
    lines = [
        START,
        provenance
        if not run
        else f"Measured by `{run.get('command') or 'posenc extend'}` ({run.get('protocol', 'smollm2')} protocol as "
        f"shipped) on {run.get('device', 'cpu')}, {run.get('finished', '')}: {model['label']}; text "
        f"{model['text']['source']} ({model['text']['documents']} document(s), token sha256 "
        f"{model['text']['sha256'][:12]}); {run.get('tflop', '?')} TFLOP, {run.get('cells_done', '?')} cells run and "
        f"{run.get('cells_resumed', '?')} resumed; wall-clock {run.get('wall_seconds', '?')} s with "
        f"{run.get('workers', '?')} workers x {run.get('threads', '?')} thread(s) on a machine shared with other work "
        "(not a timing result).",
        "",
        markdown(summary).rstrip(),
        "",
        caption(summary),
        "",
    ]
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
    args = parser.parse_args()
    text = PAGE.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    PAGE.write_text(head + section(args.results) + tail)
    print(f"wrote {PAGE.relative_to(ROOT)} from {args.results}")


if __name__ == "__main__":
    main()
