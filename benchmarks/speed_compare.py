"""Compare two speed-race records and flag ratios that got more than 10% worse.

Only ratios are compared (they cancel most of the machine's mood): per case, posenc's
time over the roofline / floor (lower is better), posenc's speedup over each peer
(higher is better), peak extra memory (lower is better) and training tokens/s relative
to x-transformers. A metric missing on either side is listed as "new" or "gone".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speed import POSENC_BIAS, POSENC_ROPE, ROOFLINE, rows  # benchmarks/, next to this file

from posenc.core.errors import PosencError
from posenc.records.files import read_record_file

THRESHOLD = 0.10
POSENC_CONTENDERS = {POSENC_ROPE, "posenc fused (tables given)", POSENC_BIAS, "posenc flex", "posenc"}


def metrics(record: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """``{name: (value, higher_is_better)}`` for every comparable ratio in ``record``."""
    out: dict[str, tuple[float, bool]] = {}
    for r in rows(record):
        if "skipped" in r:
            continue
        key = f"{r['section']} | {r['case']} | {r['contender']}"
        if r["contender"] in POSENC_CONTENDERS:
            for field in ("x_roofline", "x_floor"):
                if r.get(field) is not None:
                    out[f"{key} | {field}"] = (r[field], False)
        elif r["contender"] != ROOFLINE and r.get("posenc_speedup") is not None:
            out[f"{key} | posenc_speedup"] = (r["posenc_speedup"], True)
        if r.get("peak_extra_mb") and r["contender"] in POSENC_CONTENDERS:
            out[f"{key} | peak_extra_mb"] = (r["peak_extra_mb"], False)
    return out


def compare(old: dict[str, Any], new: dict[str, Any], *, threshold: float = THRESHOLD) -> dict[str, Any]:
    """Changes from ``old`` to ``new``; ``worse`` lists ratios more than ``threshold`` worse."""
    a, b = metrics(old), metrics(new)
    worse: list[dict[str, Any]] = []
    better: list[dict[str, Any]] = []
    same: list[dict[str, Any]] = []
    for key in sorted(a.keys() & b.keys()):
        (before, higher), (after, _) = a[key], b[key]
        if before <= 0:
            continue
        change = after / before - 1.0
        entry = {"metric": key, "old": before, "new": after, "change": change}
        bad = change < -threshold if higher else change > threshold
        good = change > threshold if higher else change < -threshold
        (worse if bad else better if good else same).append(entry)
    return {
        "old": old.get("path") or old.get("created"),
        "new": new.get("path") or new.get("created"),
        "threshold": threshold,
        "worse": worse,
        "better": better,
        "unchanged": len(same),
        "new_metrics": sorted(b.keys() - a.keys()),
        "gone_metrics": sorted(a.keys() - b.keys()),
    }


def load(path: str | Path) -> dict[str, Any]:
    record, problem = read_record_file(Path(path))  # bounded: a huge file is refused, not read
    if problem is not None:
        raise PosencError(f"{path}: {problem}")
    kind = record.get("kind") if isinstance(record, dict) else type(record).__name__
    if kind != "posenc-speed":
        raise PosencError(f"{path} is not a speed-race record (kind={kind!r})")
    record["path"] = str(path)
    return record


def previous_records(directory: str | Path, mode: str | None = None) -> list[Path]:
    """Records under ``directory`` (optionally of one mode), oldest first (names sort by time)."""
    pattern = f"speed-{mode}-*.json" if mode else "speed-*.json"
    return sorted(Path(directory).glob(pattern))


def compare_latest(directory: str | Path, mode: str | None = None, *, threshold: float = THRESHOLD):
    """Compare the two newest records of ``mode`` in ``directory``; None if fewer than two."""
    found = previous_records(directory, mode)
    if len(found) < 2:
        return None
    return compare(load(found[-2]), load(found[-1]), threshold=threshold)


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"compared {result['old']} -> {result['new']} (flag: >{result['threshold']:.0%} worse)"]
    for entry in result["worse"]:
        lines.append(
            f"WORSE  {entry['metric']}: {entry['old']:.3g} -> {entry['new']:.3g} ({entry['change']:+.0%})"
        )
    for entry in result["better"]:
        lines.append(
            f"better {entry['metric']}: {entry['old']:.3g} -> {entry['new']:.3g} ({entry['change']:+.0%})"
        )
    lines.append(
        f"{len(result['worse'])} worse, {len(result['better'])} better, {result['unchanged']} within threshold, "
        f"{len(result['new_metrics'])} new, {len(result['gone_metrics'])} gone"
    )
    return lines
