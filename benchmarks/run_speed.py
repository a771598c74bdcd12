"""Run the speed race and write a JSON record to benchmarks/results/ (same as ``posenc bench``).

Usage:
    python benchmarks/run_speed.py [quick|full] [--section rope|bias|train ...] [--no-memory]

Then ``python benchmarks/compare_speed.py`` diffs the two newest records of a mode.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from posenc.bench import speed, speed_compare

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="quick", choices=sorted(speed.PLANS))
    parser.add_argument("--section", action="append", choices=speed.SECTIONS, dest="sections")
    parser.add_argument("--no-memory", action="store_true", help="skip peak-memory subprocesses")
    parser.add_argument("--out", default=str(RESULTS), help=f"results directory (default {RESULTS})")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 150)
    with console.status("posenc bench") as status:
        record = speed.run(
            args.mode,
            sections=tuple(args.sections or speed.SECTIONS),
            memory=not args.no_memory,
            out_dir=args.out,
            progress=lambda message: status.update(message),
        )
    for table in speed.render(record):
        console.print(table)
    console.print(f"record: {record['path']}")
    result = speed_compare.compare_latest(args.out, args.mode)
    if result is not None:
        for line in speed_compare.summary_lines(result):
            console.print(line, markup=False)


if __name__ == "__main__":
    main()
