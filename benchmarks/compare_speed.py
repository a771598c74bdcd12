"""Compare two speed records and flag any ratio more than 10% worse (exit status 1).

Usage:
    python benchmarks/compare_speed.py                   # two newest quick records in results/
    python benchmarks/compare_speed.py --mode full
    python benchmarks/compare_speed.py OLD.json NEW.json [--threshold 0.1] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import speed_compare  # benchmarks/, next to this file

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("records", nargs="*", help="OLD.json NEW.json (default: two newest in --dir)")
    parser.add_argument("--dir", default=str(RESULTS))
    parser.add_argument("--mode", default="quick")
    parser.add_argument("--threshold", type=float, default=speed_compare.THRESHOLD)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args()
    if len(args.records) == 2:
        old, new = (speed_compare.load(p) for p in args.records)
        result = speed_compare.compare(old, new, threshold=args.threshold)
    elif not args.records:
        result = speed_compare.compare_latest(args.dir, args.mode, threshold=args.threshold)
        if result is None:
            print(f"fewer than two {args.mode} records in {args.dir}; nothing to compare")
            return 0
    else:
        parser.error("give two record files, or none")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(speed_compare.summary_lines(result)))
    return 1 if result["worse"] else 0


if __name__ == "__main__":
    sys.exit(main())
