"""Run posenc.hf's checks on every verified family and write the table of docs/hf-support.md.

    .venv/bin/python scripts/hf_support.py            # this environment's transformers
    .venv/bin/python scripts/hf_support.py --render   # only re-render from the recorded runs

Each run records docs/hf-support/transformers-VERSION.json (every family x check: passed,
max error, detail; torch and python versions; wall time); the page's tables are rendered from
every recorded run, so one column per transformers release that was checked.
``scripts/test_upstream.sh VERSION`` runs this in an environment with that release.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "hf-support"
PAGE = ROOT / "docs" / "hf-support.md"
START, END = "<!-- hf-support:start -->", "<!-- hf-support:end -->"


def run() -> Path:
    import torch
    import transformers

    from posenc.hf.families import FAMILIES
    from posenc.hf.parity import CHECKS, check_family

    rows = {}
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in FAMILIES:
            tic = time.perf_counter()
            results = check_family(model_type)
            rows[model_type] = [r.to_dict() for r in results]
            marks = " ".join(
                f"{r.check}={'ok' if r.passed else 'n/a' if not r.applicable else 'FAIL'}" for r in results
            )
            print(f"{model_type:14s} {time.perf_counter() - tic:5.1f}s {marks}", flush=True)
    record = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.perf_counter() - started, 1),
        "checks": list(CHECKS),
        "families": rows,
    }
    RUNS.mkdir(parents=True, exist_ok=True)
    path = RUNS / f"transformers-{transformers.__version__}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _mark(result: dict | None) -> str:
    if result is None:
        return "."
    if result["passed"]:
        return "+"
    return "-" if not result.get("applicable", True) else "x"


def _version_key(record: dict) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in record["transformers"].split("."))


def render() -> str:
    from posenc.hf.families import FAMILIES

    records = sorted((json.loads(p.read_text()) for p in RUNS.glob("transformers-*.json")), key=_version_key)
    if not records:
        raise SystemExit("no recorded runs in docs/hf-support/; run scripts/hf_support.py first")
    lines = [
        "Checks per family and transformers release (each cell: the five checks, "
        "`logits generate left_padding remove compile`, passed `+`, failed `x`, not applicable `-` "
        "(transformers' own model fails it too, or the family needs a newer release), not run `.`):",
        "",
        "| family | model_type | tables | layout | "
        + " | ".join(f"transformers {r['transformers']}" for r in records)
        + " |",
        "|---|---|---|---|" + "---|" * len(records),
    ]
    for model_type, family in FAMILIES.items():
        cells = []
        for record in records:
            results = {r["check"]: r for r in record["families"].get(model_type, [])}
            cells.append("".join(_mark(results.get(c)) for c in record["checks"]))
        layout = family.layout + (f" ({family.layout_from}: interleaved)" if family.layout_from else "")
        lines.append(
            f"| {family.label} | `{model_type}` | {family.tables} | {layout} | " + " | ".join(cells) + " |"
        )
    lines += ["", "Runs:", ""]
    for record in records:
        failed = [
            f"{family} {r['check']} ({'not applicable: ' if not r.get('applicable', True) else ''}"
            f"{r['detail'] or r['error']})"
            for family, results in record["families"].items()
            for r in results
            if not r["passed"]
        ]
        errors = [
            r["error"]
            for results in record["families"].values()
            for r in results
            if r["check"] == "logits" and r["error"] is not None
        ]
        lines.append(
            f"- transformers {record['transformers']}, torch {record['torch']}, python {record['python']}, "
            f"{record['date']}, {record['seconds']} s: {sum(len(v) for v in record['families'].values()) - len(failed)} "
            f"of {sum(len(v) for v in record['families'].values())} checks passed; largest logit difference "
            f"{max(errors):.1e}" + (f"; not passed: {'; '.join(failed)}" if failed else "")
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--render", action="store_true", help="only re-render the page from the recorded runs"
    )
    args = parser.parse_args()
    if not args.render:
        print(f"recorded {run().relative_to(ROOT)}")
    page = PAGE.read_text()
    if START not in page or END not in page:
        raise SystemExit(f"{PAGE} has no {START} ... {END} block")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    PAGE.write_text(f"{head}{START}\n{render()}\n{END}{tail}")
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
