"""Rewrite the README's encodings table from the registry (run after registering an encoding).

Usage: python scripts/update_readme_table.py [--check]

Replaces everything between ``<!-- encodings-table:start -->`` and
``<!-- encodings-table:end -->`` with ``posenc.registry.encodings_markdown()``.
With ``--check`` it only reports (exit 1) when the README is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posenc.registry import encodings_markdown

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docblocks import splice  # noqa: E402  (next to this script)

README = Path(__file__).resolve().parent.parent / "README.md"


def render(text: str) -> str:
    """``text`` with the block between the markers replaced by the current table."""
    return splice(text, "encodings-table", encodings_markdown(), README)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only report (exit 1) when the table is out of date"
    )
    check = parser.parse_args(argv).check
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if check:
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
