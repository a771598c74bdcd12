"""Rewrite docs/notes.md from the claims table (run after changing posenc.analysis.notes).

Usage:
    python scripts/update_notes_page.py                  # the page, with the shipped measurements
    python scripts/update_notes_page.py --results DIR    # measure the pending claims from DIR first
    python scripts/update_notes_page.py --check          # exit 1 if the page is out of date

The page is ``posenc.analysis.notes.markdown()``: every claim of the notes posenc was built
from, its verdict, what holds (numbers recomputed by posenc.analysis.demonstrations) and
the command that shows it. Claims about trained models are settled from the records of a
``posenc compare`` run (``--results DIR``, e.g. ``posenc compare --profile notes --out DIR``):
``posenc.results.claims.notes_measurements`` judges them with 95% intervals, and the verdicts
are written to ``src/posenc/analysis/notes_measured.json`` (shipped with posenc: ``posenc
notes``, the report and the tour read them) together with the command that made the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc.analysis import notes
from posenc.records.store import ResultStore
from posenc.results.claims import notes_measurements

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docblocks import shown_command  # noqa: E402  (next to this script)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "notes.md"
MEASURED = ROOT / "src" / "posenc" / "analysis" / notes.MEASURED_FILE


def measure(results: Path) -> None:
    records = ResultStore(results).records()
    if not records:
        raise SystemExit(f"{results}: no records")
    info_path = results / "run.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    command = shown_command(info.get("command") or f"posenc compare --profile {info.get('profile', '?')}")
    measured = notes_measurements(records)
    data = {"command": command, "measurements": {k: list(v) for k, v in sorted(measured.items())}}
    MEASURED.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{MEASURED.relative_to(ROOT)}: {len(measured)} measured claim(s) from {len(records)} records")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="a posenc compare output directory")
    parser.add_argument("--check", action="store_true", help="only report whether the page is current")
    args = parser.parse_args(argv)
    if args.results is not None and not args.check:
        measure(args.results)
    new = notes.markdown()
    old = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if args.check:
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
