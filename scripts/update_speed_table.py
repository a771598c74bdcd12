"""Rewrite the README's speed section from a ``posenc bench`` record.

Usage: python scripts/update_speed_table.py RECORD.json

Replaces everything between ``<!-- speed-table:start -->`` and ``<!-- speed-table:end -->``
with :func:`posenc.bench.speed.readme_markdown` of the record (the goals met or missed,
the command and the record's path), so the README shows a run of the code as shipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posenc.bench import speed, speed_compare

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docblocks import splice  # noqa: E402  (next to this script)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="a benchmarks/results/speed-*.json record of posenc bench")
    record_path = parser.parse_args(argv).record.resolve()
    record = speed_compare.load(record_path)
    shown = record_path.relative_to(ROOT) if record_path.is_relative_to(ROOT) else record_path
    text = README.read_text(encoding="utf-8")
    body = speed.readme_markdown(record, path=str(shown))
    README.write_text(splice(text, "speed-table", body, README), encoding="utf-8")
    print(f"README.md speed section updated from {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
