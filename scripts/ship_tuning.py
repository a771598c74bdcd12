"""Choose every learning rate of a profile and ship the choices with posenc.

Usage:
    python scripts/ship_tuning.py --profile quick [--out DIR] [--workers N] [--keep-shipped]

Runs the profile's learning-rate candidates (``posenc.compare.tuning``: each encoding x
task at every rate of ``Profile.lr_grid``, on the tuning seed, scored by held-out
in-distribution checks only; cached under ``DIR/tuning``, so it resumes), then writes
the choices into ``src/posenc/compare/tuned_lr.json`` next to the command that made them.
A setting another profile already ships (the same key) keeps that profile's choice, which
its published runs used, unless ``--replace-shared``.
``posenc compare`` uses a shipped choice when its key (the run's identity without the
learning rate, seed and evaluation) matches, so a change to a profile's training
settings makes the old choices unused until this script is run again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc.compare import tuning
from posenc.compare.executor import make_executor
from posenc.compare.grid import build_grid
from posenc.compare.profile import PROFILES, get_profile

TARGET = Path(__file__).resolve().parent.parent / "src" / "posenc" / "compare" / tuning.SHIPPED


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, choices=tuple(PROFILES))
    parser.add_argument("--out", type=Path, default=Path("posenc-tuning"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--replace-shared",
        action="store_true",
        help="also replace choices other profiles ship for the same setting (their tables then need re-running)",
    )
    parser.add_argument(
        "--keep-shipped",
        action="store_true",
        help="reuse the shipped choice of every setting that has one (a key is its setting's content, so "
        "an unchanged setting keeps its choice) and tune only the others",
    )
    args = parser.parse_args(argv)
    prof = get_profile(args.profile)
    if not prof.lr_grid:
        raise SystemExit(f"profile {prof.name} has no learning-rate grid")
    specs = build_grid(prof, seeds=prof.seeds[:1]).specs
    share = dict(prof.tune_share)
    choices, outcome = tuning.choose(
        specs, prof.lr_grid, tuning.tuning_store(args.out), make_executor("local", workers=args.workers),
        share=share, use_shipped=args.keep_shipped,
    )  # fmt: skip
    if outcome is not None and outcome.failed:
        raise SystemExit(f"{len(outcome.failed)} candidate(s) failed: {outcome.failed[:3]}")
    command = f"python scripts/ship_tuning.py --profile {prof.name}"
    new = tuning.table(specs, choices, command, share)
    old = json.loads(TARGET.read_text(encoding="utf-8")) if TARGET.exists() else {"entries": {}}
    entries = {}  # this profile's old choices go; an entry other profiles also use stays theirs
    for key, entry in old.get("entries", {}).items():
        others = [p for p in entry.get("profiles", []) if p != prof.name]
        if others:
            entries[key] = entry | {"profiles": others}
    for key, entry in new["entries"].items():
        kept = entries.get(key)
        if kept is None or args.replace_shared:
            shared = kept["profiles"] if kept else []
            entries[key] = entry | {"profiles": sorted({*shared, *entry["profiles"]})}
            continue
        # The same setting is shipped for another profile, whose published runs used that
        # choice: it stays (--replace-shared replaces it), this profile is added to it.
        kept["profiles"] = sorted({*kept["profiles"], prof.name})
        if kept["lr"] != entry["lr"]:
            print(
                f"note: {entry['task']} {entry['label']}: kept lr {kept['lr']:g} shipped for "
                f"{', '.join(p for p in kept['profiles'] if p != prof.name)} (tuned here: {entry['lr']:g})"
            )
    commands = sorted({*old.get("commands", []), command})
    TARGET.write_text(
        json.dumps({"commands": commands, "entries": dict(sorted(entries.items()))}, indent=1) + "\n",
        encoding="utf-8",
    )
    for entry in new["entries"].values():
        print(f"{entry['task']:15s} {entry['label']:20s} lr {entry['lr']:g}  ({entry['why']})")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
