"""Rewrite the README's encodings table from the registry (run after registering an encoding).

Usage: python scripts/update_readme_table.py [--check]

Replaces everything between ``<!-- encodings-table:start -->`` and
``<!-- encodings-table:end -->`` with ``posenc.registry.encodings_markdown()``.
With ``--check`` it only reports (exit 1) when the README is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posenc.registry import encodings_markdown

START, END = "<!-- encodings-table:start -->", "<!-- encodings-table:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def render(text: str) -> str:
    """``text`` with the block between the markers replaced by the current table."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{README}: expected one {START} followed by one {END}")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{encodings_markdown()}{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("README.md encodings table is out of date; run python scripts/update_readme_table.py")
            return 1
        return 0
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("README.md encodings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
