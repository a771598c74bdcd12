"""``posenc bench``: race posenc's fast paths against peer libraries, in one process.

Three sections (contenders in :mod:`posenc.bench.speed_cases`):

- ``rope``: rotate q and k ``(b, h, n, d)``, forward and forward+backward, float32 and
  bfloat16. Reported: median time, GB/s (bytes a rotation must move: read q, k and write
  them once; forward+backward twice that), ratio to the roofline (a ``clone`` of the same
  tensors, i.e. the same bytes copied), and how many times faster posenc is than each peer.
- ``bias``: causal attention forward with each bias encoding: median time, ratio to
  unbiased SDPA (the floor), and the peak extra memory of one call.
- ``train``: one AdamW step of the tiny decoder LM per encoding, tokens/s, posenc vs
  x-transformers at the same config.

Peak memory: ``tracemalloc`` does not see torch's allocations, so each (case, contender)
runs once in a fresh subprocess (``python -m posenc.bench.speed --memory SPEC``) that
reads the resident set before the call, resets the kernel's high-water mark
(``/proc/self/clear_refs``) and reads ``VmHWM`` after it: the peak resident memory the
call added, including every temporary (falls back to ``ru_maxrss`` where that file is
missing, which can only under-report).

Every run writes a JSON record (machine, versions, shapes, medians, ratios) under
``benchmarks/results/``; :mod:`posenc.bench.speed_compare` diffs two records. Timings
are medians over repeats after a warm-up call; they are only comparable on a quiet
machine (other processes on the cores inflate everything, the copy roofline included).
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from rich.table import Table

from posenc.base import check_int
from posenc.bench import speed_cases as cases_mod
from posenc.bench.executor import max_threads
from posenc.errors import PosencError
from posenc.registry import ENCODINGS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
POSENC_ROPE = "posenc rotate"
POSENC_BIAS = "posenc chunked"
ROOFLINE = "roofline (copy)"
FLOOR = "sdpa unbiased (floor)"

# Shapes: (b, h, n, d) for rope; (b, h, n, d) for bias; (b, n) for train.
PLANS: dict[str, dict[str, Any]] = {
    "quick": {
        "rope": [(1, 32, 2048, 128)],
        "bias": [(1, 8, 4096, 64)],  # the length the targets are set at
        "bias_encodings": ["alibi", "t5"],
        "train": [(8, 256)],
        "train_encodings": ["rope", "alibi"],
        "repeats": 5,
        "flex": True,
        "flex_encodings": ["alibi"],  # one FlexAttention compile (~40 s) keeps --quick in minutes
    },
    "full": {
        "rope": [(1, 32, 2048, 128), (4, 8, 4096, 64), (2, 16, 1024, 64), (1, 32, 8192, 128)],
        "bias": [(1, 8, 1024, 64), (1, 8, 4096, 64), (1, 8, 8192, 64)],
        "bias_encodings": [name for name, cls in ENCODINGS.items() if cls.kind == "bias"],  # every one
        "train": [(8, 512)],
        "train_encodings": ["rope", "xpos", "alibi", "t5"],
        "repeats": 7,
        "flex": True,
        "flex_lengths": [4096],  # each (encoding, length) compiles once, ~30-45 s
    },
    "smoke": {  # tiny shapes for the test suite: checks the plumbing, not the speed
        "rope": [(1, 2, 64, 16)],
        "bias": [(1, 2, 64, 16)],
        "bias_encodings": ["alibi"],
        "train": [(2, 16)],
        "train_encodings": ["rope"],
        "repeats": 2,
        "flex": False,
    },
}
SECTIONS = ("rope", "bias", "train")


# ---------------------------------------------------------------------------
# Measuring.
# ---------------------------------------------------------------------------


def timings(fn: Callable[[], object], *, repeats: int, budget: float = 20.0) -> list[float]:
    """Wall times (s) of ``repeats`` calls of ``fn()`` after one warm-up call.

    Stops early (at least 2 timed calls) once ``budget`` seconds are spent.
    """
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (len(times) < 2 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_time(fn: Callable[[], object], *, repeats: int, budget: float = 20.0) -> float:
    """Median of :func:`timings` (s)."""
    return statistics.median(timings(fn, repeats=repeats, budget=budget))


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _peak_extra_mb(fn: Callable[[], object]) -> tuple[float, str]:
    """Peak resident memory ``fn()`` adds, in MiB, and the method used."""
    gc.collect()
    base = _status_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM (the peak RSS) to the current RSS
        fn()
        peak = _status_kb("VmHWM")
        if peak is None or base is None:
            raise OSError("no VmRSS/VmHWM in /proc/self/status")
        return max(0.0, (peak - base) / 1024), "VmHWM"
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        fn()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return max(0.0, (after - max(before, base or 0)) / 1024), "ru_maxrss"


def _memory_child(spec: dict[str, Any]) -> None:
    """Subprocess entry: build one bias case, print ``{"mb": ..., "method": ...}``."""
    torch.set_num_threads(spec["threads"])
    b, h, n, d = spec["shape"]
    cases = cases_mod.bias_cases(spec["encoding"], b, h, n, d, DTYPES[spec["dtype"]], flex=spec["flex"])
    fn = cases[spec["contender"]]
    assert callable(fn), fn  # the parent only asks for contenders that ran
    if spec["contender"] == "posenc flex":
        fn()  # compile outside the measured call
    with torch.no_grad():
        mb, method = _peak_extra_mb(fn)
    print(json.dumps({"mb": mb, "method": method}))


def peak_memory(encoding: str, shape, dtype: str, contender: str, *, flex: bool) -> dict[str, Any]:
    """Run :func:`_memory_child` in a fresh interpreter (torch allocations are invisible to tracemalloc)."""
    spec = dict(encoding=encoding, shape=list(shape), dtype=dtype, contender=contender, flex=flex,
                threads=torch.get_num_threads())  # fmt: skip
    cmd = [sys.executable, "-m", "posenc.bench.speed", "--memory", json.dumps(spec)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return json.loads(result.stdout.strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - report, never crash the race
        return {"mb": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


# ---------------------------------------------------------------------------
# Sections.
# ---------------------------------------------------------------------------


def _race(cases: dict[str, Any], repeats: int, progress: Callable[[str], None], label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, case in cases.items():
        progress(f"{label}: {name}")
        if isinstance(case, str):
            out[name] = {"skipped": case}
            continue
        try:
            times = timings(case, repeats=repeats)
            # min_ms: the least-disturbed call, a useful second opinion on a shared machine
            out[name] = {"ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times)}
        except Exception as exc:  # noqa: BLE001 - a peer that breaks is reported, not fatal
            out[name] = {"skipped": f"failed: {type(exc).__name__}: {str(exc)[:160]}"}
    return out


def run_rope(plan: dict[str, Any], progress) -> list[dict[str, Any]]:
    groups = []
    for b, h, n, d in plan["rope"]:
        for dtype_name, dtype in DTYPES.items():
            for mode in ("fwd", "fwd+bwd"):
                label = f"rope {b}x{h}x{n}x{d} {dtype_name} {mode}"
                cases = cases_mod.rope_cases(b, h, n, d, dtype, backward=mode == "fwd+bwd")
                results = _race(cases, plan["repeats"], progress, label)
                moved = 2 * 2 * b * h * n * d * dtype.itemsize * (2 if mode == "fwd+bwd" else 1)
                roof = results[ROOFLINE].get("ms")
                base = results.get(POSENC_ROPE, {}).get("ms")
                for r in results.values():
                    if "ms" in r:
                        r["gb_per_s"] = moved / (r["ms"] * 1e-3) / 1e9
                        r["x_roofline"] = r["ms"] / roof if roof else None
                        r["posenc_speedup"] = r["ms"] / base if base else None
                groups.append({"shape": [b, h, n, d], "dtype": dtype_name, "mode": mode, "results": results})
                del cases
                gc.collect()
    return groups


def run_bias(plan: dict[str, Any], progress, *, memory: bool) -> list[dict[str, Any]]:
    groups = []
    for shape in plan["bias"]:
        for name in plan["bias_encodings"]:
            label = f"bias {name} {'x'.join(map(str, shape))}"
            flex = (
                plan["flex"]
                and shape[2] in plan.get("flex_lengths", [shape[2]])
                and name in plan.get("flex_encodings", [name])
            )
            b, h, n, d = shape
            cases = cases_mod.bias_cases(name, b, h, n, d, torch.float32, flex=flex)
            skip_dense = (
                shape[2] > 4096
            )  # the dense and x-transformers paths need h*n*n*4 bytes, several times
            if skip_dense:
                for key in ("sdpa + dense bias", "x-transformers"):
                    if not isinstance(cases.get(key), str):
                        cases[key] = "skipped: O(n^2) memory at this length (several GiB)"
            with torch.no_grad():
                results = _race(cases, max(2, plan["repeats"] // 2), progress, label)
            floor, base = results[FLOOR].get("ms"), results.get(POSENC_BIAS, {}).get("ms")
            for contender, r in results.items():
                if "ms" not in r:
                    continue
                r["x_floor"] = r["ms"] / floor if floor else None
                r["posenc_speedup"] = r["ms"] / base if base else None
                if memory:
                    progress(f"{label}: {contender} (memory)")
                    mem = peak_memory(name, shape, "float32", contender, flex=flex)
                    r["peak_extra_mb"] = mem.get("mb")
                    if mem.get("error"):
                        r["memory_error"] = mem["error"]
            groups.append(
                {
                    "encoding": name,
                    "shape": list(shape),
                    "dtype": "float32",
                    "mode": "fwd",
                    "results": results,
                }
            )
            del cases
            gc.collect()
    return groups


def run_train(plan: dict[str, Any], progress) -> list[dict[str, Any]]:
    groups = []
    for b, n in plan["train"]:
        for name in plan["train_encodings"]:
            label = f"train {name} {b}x{n}"
            results = _race(cases_mod.train_cases(name, b, n), max(3, plan["repeats"] // 2), progress, label)
            base = results.get("posenc", {}).get("ms")
            for r in results.values():
                if "ms" in r:
                    r["tokens_per_s"] = b * n / (r["ms"] * 1e-3)
                    r["posenc_speedup"] = r["ms"] / base if base else None
            groups.append({"encoding": name, "shape": [b, n], "mode": "train step", "results": results})
    return groups


# ---------------------------------------------------------------------------
# Records.
# ---------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for package in (
        "posenc",
        "torch",
        "numpy",
        "transformers",
        "x-transformers",
        "rotary-embedding-torch",
        "torchtune",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    try:  # the checkout the package runs from, when it is one (read-only git call)
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "git_commit": commit,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def run(
    mode: str = "quick",
    *,
    sections: tuple[str, ...] = SECTIONS,
    memory: bool = True,
    out_dir: str | Path | None = "benchmarks/results",
    progress: Callable[[str], None] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run the plan ``mode`` ("quick", "full" or "smoke"); write and return the JSON record.

    ``threads`` sets ``torch.set_num_threads`` for the run (and the memory subprocesses);
    default: leave torch's setting.
    """
    if threads is not None:
        torch.set_num_threads(check_int("threads", threads, minimum=1, maximum=max_threads()))
    if mode not in PLANS:
        raise PosencError(f"mode must be one of {list(PLANS)}, got {mode!r}")
    for section in sections:
        if section not in SECTIONS:
            raise PosencError(f"sections must be among {list(SECTIONS)}, got {section!r}")
    plan = PLANS[mode]
    progress = progress or (lambda message: None)
    started = time.time()
    record: dict[str, Any] = {
        "kind": "posenc-speed",
        "schema": 1,
        "mode": mode,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "plan": {key: value for key, value in plan.items()},
        "notes": {
            "roofline": "clone() of q and k: the bytes a rotation must read and write once",
            "memory": "peak RSS added by one call, fresh subprocess, /proc/self/clear_refs + VmHWM",
            "posenc_speedup": "contender time / posenc time (> 1: posenc is faster)",
        },
    }
    if "rope" in sections:
        record["rope"] = run_rope(plan, progress)
    if "bias" in sections:
        record["bias"] = run_bias(plan, progress, memory=memory)
    if "train" in sections:
        record["train"] = run_train(plan, progress)
    record["seconds"] = time.time() - started
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = out / f"speed-{mode}-{stamp}.json"
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        record["path"] = str(path)
    return record


def rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten a record to one row per (section, case, contender) for tables."""
    out = []
    for section in SECTIONS:
        for group in record.get(section, []):
            case = " ".join(
                str(part) for part in (group.get("encoding", ""), "x".join(map(str, group["shape"])),
                                       group.get("dtype", ""), group["mode"]) if part
            )  # fmt: skip
            for contender, r in group["results"].items():
                out.append({"section": section, "case": case, "contender": contender, **r})
    return out


def render(record: dict[str, Any]):
    """A rich Table per section."""

    columns = {
        "rope": [("ms", "ms", "{:.2f}"), ("gb_per_s", "GB/s", "{:.1f}"), ("x_roofline", "x copy", "{:.2f}"),
                 ("posenc_speedup", "posenc faster by", "{:.2f}x")],
        "bias": [("ms", "ms", "{:.1f}"), ("x_floor", "x SDPA", "{:.2f}"), ("peak_extra_mb", "peak extra MiB", "{:.0f}"),
                 ("posenc_speedup", "posenc faster by", "{:.2f}x")],
        "train": [("ms", "ms/step", "{:.1f}"), ("tokens_per_s", "tokens/s", "{:.0f}"),
                  ("posenc_speedup", "posenc faster by", "{:.2f}x")],
    }  # fmt: skip
    tables = []
    for section in SECTIONS:
        section_rows = [r for r in rows(record) if r["section"] == section]
        if not section_rows:
            continue
        table = Table(title=f"posenc bench ({record['mode']}): {section}")
        table.add_column("case")
        table.add_column("contender")
        for _, title, _ in columns[section]:
            table.add_column(title, justify="right")
        previous = None
        for r in section_rows:
            cells = [r["case"] if r["case"] != previous else "", r["contender"]]
            previous = r["case"]
            if "skipped" in r:
                cells += [r["skipped"]] + [""] * (len(columns[section]) - 1)
            else:
                cells += [
                    "-" if r.get(key) is None else fmt.format(r[key]) for key, _, fmt in columns[section]
                ]
            table.add_row(*cells)
        tables.append(table)
    return tables


if __name__ == "__main__":  # the memory subprocess
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        _memory_child(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m posenc.bench.speed --memory SPEC_JSON (internal)")
