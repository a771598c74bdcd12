"""Rewrite docs/notes.md from the claims table (run after changing posenc.analysis.notes).

Usage:
    python scripts/update_notes_page.py                  # measure from the shipped notes records, then the page
    python scripts/update_notes_page.py --results DIR    # measure the pending claims from DIR instead
    python scripts/update_notes_page.py --check          # exit 1 if the measurements or the page are out of date

The page is ``posenc.analysis.notes.markdown()``: every claim of the notes posenc was built
from, its verdict, what holds (numbers recomputed by posenc.analysis.demonstrations) and
the command that shows it. Claims about trained models are settled from the records of a
``posenc compare`` run (``--results DIR``, e.g. ``posenc compare --profile notes --out DIR``):
``posenc.results.claims.notes_measurements`` judges them with 95% intervals, and the verdicts
are written to ``src/posenc/analysis/notes_measured.json`` (shipped with posenc: ``posenc
notes``, the report and the tour read them) together with the command that made the run.
Without ``--results`` they are measured from the records of the notes profile's run shipped
in ``benchmarks/records/notes/`` (``scripts/update_benchmark_tables.py --block notes --ship``
puts them there), so the verdicts can be recomputed from a fresh clone; ``--check`` fails
when they differ from ``notes_measured.json``, or when no such records are shipped.
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
import shipped_records  # noqa: E402  (next to this script)
from docblocks import shown_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "notes.md"
MEASURED = ROOT / "src" / "posenc" / "analysis" / notes.MEASURED_FILE


#: The block (profile) whose shipped records settle the measured claims.
BLOCK = "notes"


def measurements(records: list[dict], info: dict) -> str:
    """The text of ``notes_measured.json`` from a run's records and its ``run.json`` (``info``)."""
    command = shown_command(info.get("command") or f"posenc compare --profile {info.get('profile', '?')}")
    measured = notes_measurements(records)
    data = {"command": command, "measurements": {k: list(v) for k, v in sorted(measured.items())}}
    return json.dumps(data, indent=1) + "\n"


def from_results(results: Path) -> tuple[list[dict], dict]:
    records = ResultStore(results).records()
    if not records:
        raise SystemExit(f"{results}: no records")
    info_path = results / "run.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    return records, info


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", type=Path, help="a posenc compare output directory (default: the shipped notes records)"
    )
    parser.add_argument("--check", action="store_true", help="only report whether the page is current")
    args = parser.parse_args(argv)
    stale = 0
    if args.results is not None:
        records, info = from_results(args.results)
    elif args.check or shipped_records.block_dir(BLOCK).exists():
        records, info = shipped_records.load(BLOCK)  # --check: none shipped is an error, naming the block
    else:
        records = None
        print(f"no records shipped in {shipped_records.shown(shipped_records.block_dir(BLOCK))}: "
              f"{MEASURED.name} kept as it is")  # fmt: skip
    if records is not None:
        text = measurements(records, info)
        old = MEASURED.read_text(encoding="utf-8") if MEASURED.exists() else ""
        if text != old and args.check:
            source = args.results or shipped_records.shown(shipped_records.block_dir(BLOCK))
            print(f"{MEASURED.name} differs from what the records in {source} give; "
                  "run python scripts/update_notes_page.py")  # fmt: skip
            stale += 1
        elif text != old:
            MEASURED.write_text(text, encoding="utf-8")
            count = len(json.loads(text)["measurements"])
            print(f"{shipped_records.shown(MEASURED)}: {count} measured claim(s) from {len(records)} records")
    new = notes.markdown()
    old = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if args.check:
        if new != old:
            print("docs/notes.md is out of date; run python scripts/update_notes_page.py")
            stale += 1
        return 1 if stale else 0
    if new != old:
        PAGE.write_text(new, encoding="utf-8")
        print("docs/notes.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
