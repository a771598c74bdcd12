"""Rewrite docs/notes.md from the claims table (run after changing posenc.analysis.notes).

Usage: python scripts/update_notes_page.py [--check]

The page is ``posenc.analysis.notes.markdown()``: every claim of the notes posenc was built
from, its verdict, what holds (numbers recomputed by posenc.analysis.demonstrations) and
the command that shows it. With ``--check`` it only reports (exit 1) when the page is out
of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posenc.analysis.notes import markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "notes.md"


def main(argv: list[str]) -> int:
    new = markdown()
    old = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if "--check" in argv:
        if new != old:
            print("docs/notes.md is out of date; run python scripts/update_notes_page.py")
            return 1
        return 0
    if new != old:
        PAGE.write_text(new, encoding="utf-8")
        print("docs/notes.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
