"""Rewrite the README's speed section from a ``posenc bench`` record.

Usage: python scripts/update_speed_table.py RECORD.json

Replaces everything between ``<!-- speed-table:start -->`` and ``<!-- speed-table:end -->``
with :func:`posenc.bench.speed.readme_markdown` of the record (the goals met or missed,
the command and the record's path), so the README shows a run of the code as shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posenc.bench import speed, speed_compare

START, END = "<!-- speed-table:start -->", "<!-- speed-table:end -->"
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    record_path = Path(argv[0]).resolve()
    record = speed_compare.load(record_path)
    shown = record_path.relative_to(ROOT) if record_path.is_relative_to(ROOT) else record_path
    text = README.read_text(encoding="utf-8")
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{README}: expected one {START} followed by one {END}")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    README.write_text(
        f"{head}{START}\n{speed.readme_markdown(record, path=str(shown))}{END}{tail}", encoding="utf-8"
    )
    print(f"README.md speed section updated from {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
