"""Rewrite the README's speed section from speed-race records (``python benchmarks/run_speed.py``).

Usage: python benchmarks/update_speed_table.py RECORD.json [MORE.json ...]

Replaces everything between ``<!-- speed-table:start -->`` and ``<!-- speed-table:end -->``
with :func:`speed.readme_markdown` of the record (the goals met or missed,
the command and the record's path), so the README shows a run of the code as shipped.
With several records (runs of the same mode on the same machine) each goal is judged on
the median over them and the table shows the range: ratios on a shared 2-core machine
move more between runs than within one. Records of different vector code (``run_speed.py --isa
avx2`` next to the machine's own) get one table each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import speed  # benchmarks/, next to this file
import speed_compare

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from docblocks import splice  # noqa: E402  (the repository's scripts/)

README = ROOT / "README.md"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "records",
        type=Path,
        nargs="+",
        help="benchmarks/results/speed-*.json records of benchmarks/run_speed.py, newest first",
    )
    paths = [p.resolve() for p in parser.parse_args(argv).records]
    shown = [str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in paths]
    record, *rest = (speed_compare.load(p) for p in paths)
    if any(r["mode"] != record["mode"] for r in rest):
        raise SystemExit(f"records of different modes: {', '.join(r['mode'] for r in (record, *rest))}")
    text = README.read_text(encoding="utf-8")
    body = speed.readme_markdown(record, path=shown[0], others=list(zip(shown[1:], rest)))
    README.write_text(splice(text, "speed-table", body, README), encoding="utf-8")
    print(f"README.md speed section updated from {', '.join(shown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
