"""The speed races: posenc's fast paths against peer libraries, in one process.

Run with ``python benchmarks/run_speed.py`` (a developer tool: the peers are test extras).

Four sections (contenders in :mod:`speed_cases`):

- ``rope``: rotate q and k ``(b, h, n, d)``: forward, forward+backward, and compiled
  (``torch.compile`` with the C kernel as a custom op vs the traced plain path). Reported:
  median time, GB/s (bytes a rotation must move: read q, k and write them once;
  forward+backward twice that), ratio to the roofline (a ``clone`` of the same tensors, or
  ``x * 1`` through autograd for forward+backward), and how many times faster posenc is
  than each peer.
- ``decode``: one token: through the rotary hook (vs Hugging Face's per-step cos/sin +
  rotation), through :class:`~posenc.nn.attention.MultiHeadAttention` with a KV cache, and
  with length-dependent RoPE scalings (dynamic NTK, LongRoPE) whose keys are cached
  unrotated, at 4096 cached tokens, against static RoPE. Times in microseconds.
- ``bias``: causal attention with each bias encoding, forward or forward+backward: median
  time, ratio to unbiased SDPA (the floor), to ALiBi's time at the same shape, and (forward,
  longest length) the peak extra memory of one call.
- ``train``: one AdamW step of the benchmark's model (``posenc compare``'s: 3 layers,
  d_model 64, 4 heads), eager and compiled, tokens/s, vs x-transformers at the same config.

Every record also gets a ``targets`` list: each ratio the speed goals are set on, next to
its goal, met or missed (:data:`TARGETS`); the CLI prints it and :func:`targets_markdown`
renders it for the README.

Peak memory: ``tracemalloc`` does not see torch's allocations, so each (case, contender)
runs once in a fresh subprocess (``python benchmarks/speed.py --memory SPEC``) that
reads the resident set before the call, resets the kernel's high-water mark
(``/proc/self/clear_refs``) and reads ``VmHWM`` after it: the peak resident memory the
call added, including every temporary (falls back to ``ru_maxrss`` where that file is
missing, which can only under-report).

Every run writes a JSON record (machine, the vector code timed (:func:`vector_isa`), versions,
shapes, medians, ratios) under ``benchmarks/results/``; :mod:`speed_compare` diffs two records. Timings
are medians over repeats after a warm-up call; they are only comparable on a quiet
machine (other processes on the cores inflate everything, the copy roofline included).
"""

from __future__ import annotations

import ctypes
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import speed_cases as cases_mod  # benchmarks/, next to this file
import torch
from rich.table import Table

from posenc.compare.device import resolve_device
from posenc.compare.executor import max_threads
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.registry import ENCODINGS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
POSENC_ROPE = "posenc rotate"
POSENC_BIAS = "posenc chunked"
ROOFLINE = "roofline (copy)"
FLOOR = "sdpa unbiased (floor)"
DECODE_CHECKED = "posenc rotate (checked positions)"
SECTIONS = ("rope", "decode", "bias", "train")
GPU_SECTIONS = ("rope", "bias")  # the sections whose contenders follow --device

BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]
#: The attention decode contenders: label -> posenc.build_for_model arguments (None: no encoding).
DECODE_ENCODINGS: dict[str, dict | None] = {"no encoding": None, "rope": {"name": "rope"}}


def scaling_encodings(head_dim: int, context: int) -> dict[str, dict | None]:
    """Static RoPE and the two length-dependent scalings, trained context ``context``."""
    half = head_dim // 2
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * half,
                "long_factor": [1.0 + i / half for i in range(half)],
                "original_max_position_embeddings": context}  # fmt: skip
    return {
        "rope (static)": {"name": "rope"},
        "dynamic ntk (frequencies change every step)": {
            "name": "rope", "max_position_embeddings": context, "scaling": {"rope_type": "dynamic", "factor": 2.0}
        },
        "longrope (past the switch: frequencies fixed)": {
            "name": "rope", "max_position_embeddings": context, "scaling": longrope
        },
    }  # fmt: skip


# Shapes: rope (shape, dtype, mode); decode (h, d) / (d_model, heads, cached); bias (name, L, mode)
# at (1, 8, L, 64); train (name, (b, n)).
PLANS: dict[str, dict[str, Any]] = {
    "quick": {
        "rope": [
            ((1, 32, 2048, 128), "float32", "fwd"),
            ((4, 32, 512, 128), "float32", "fwd"),
            ((1, 32, 2048, 128), "bfloat16", "fwd"),
            ((1, 8, 1024, 64), "float32", "fwd"),
            ((1, 32, 2048, 128), "float32", "fwd+bwd"),
            ((1, 32, 2048, 128), "float32", "compiled"),
        ],
        "decode_rope": [(32, 128)],
        "decode_attention": [(512, 8, 1024)],
        "decode_scaling": [(512, 8, 4096)],
        "bias": [
            ("alibi", 1024, "fwd"),
            ("t5", 1024, "fwd"),
            ("alibi", 4096, "fwd"),
            ("t5", 4096, "fwd"),
            ("alibi", 2048, "fwd"),
            ("fire", 2048, "fwd"),
            ("alibi", 1024, "fwd+bwd"),
            ("t5", 1024, "fwd+bwd"),
            ("alibi", 2048, "fwd+bwd"),
            ("t5", 2048, "fwd+bwd"),
            ("kerple_log", 2048, "fwd+bwd"),
            ("fire", 2048, "fwd+bwd"),
        ],  # fmt: skip
        "memory_lengths": [4096],  # peak memory of the forward calls at these lengths
        "flex": [("alibi", 4096)],  # one FlexAttention compile (~40 s) keeps --quick in minutes
        "train": [("rope", (32, 18)), ("rope", (16, 64)), ("alibi", (16, 64))],
        "repeats": 5,
    },
    "full": {
        "rope": [
            (shape, dtype, mode)
            for shape in (
                (1, 32, 2048, 128),
                (4, 32, 512, 128),
                (4, 8, 4096, 64),
                (1, 8, 1024, 64),
                (2, 16, 1024, 64),
                (1, 32, 8192, 128),
            )
            for dtype in DTYPES
            for mode in ("fwd", "fwd+bwd")
        ]
        + [((1, 32, 2048, 128), "float32", "compiled"), ((1, 8, 1024, 64), "float32", "compiled")],
        "decode_rope": [(32, 128), (8, 64)],
        "decode_attention": [(512, 8, 1024), (2048, 16, 4096)],
        "decode_scaling": [(512, 8, 4096)],
        "bias": [(name, n, "fwd") for n in (1024, 2048, 4096, 8192) for name in BIAS_NAMES]
        + [(name, n, "fwd+bwd") for n in (1024, 2048) for name in BIAS_NAMES],
        "memory_lengths": [4096, 8192],
        "flex": [(name, 4096) for name in BIAS_NAMES],  # each compiles once, ~30-45 s
        "train": [
            (name, shape)
            for name in ("rope", "xpos", "alibi", "t5", "fire")
            for shape in ((32, 18), (16, 64))
        ],
        "repeats": 7,
    },  # fmt: skip
    "smoke": {  # tiny shapes for the test suite: checks the plumbing, not the speed
        "rope": [((1, 2, 64, 16), dtype, mode) for dtype in DTYPES for mode in ("fwd", "fwd+bwd")],
        "decode_rope": [(2, 16)],
        "decode_attention": [(32, 2, 16)],
        "decode_scaling": [(32, 2, 48)],
        "bias": [("alibi", 64, "fwd"), ("fire", 64, "fwd"), ("alibi", 64, "fwd+bwd")],
        "memory_lengths": [],
        "flex": [],
        "train": [("rope", (2, 16))],
        "repeats": 2,
        "inner": 0.05,  # fewer calls per round
        "compile": False,  # no torch.compile in the smoke plan (seconds per compile)
    },
}


# ---------------------------------------------------------------------------
# Targets: the ratios the speed goals are set on.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One speed goal: ``metric`` of ``contender`` in the group ``case`` of ``section``."""

    label: str
    section: str
    case: str  # as :func:`rows` labels it
    contender: str
    metric: str  # a field of the contender's result ("x_roofline", "us", ...)
    limit: float
    at_most: bool = True  # the goal is ``value <= limit`` (else ``>=``)
    peer: str | None = None  # a contender whose same metric is shown alongside
    unit: str = "x"


TARGETS: tuple[Target, ...] = (
    Target("RoPE forward (1,32,2048,128) fp32, x copy", "rope", "1x32x2048x128 float32 fwd", POSENC_ROPE,
           "x_roofline", 1.05, peer="hf transformers"),
    Target("RoPE forward (4,32,512,128) fp32, x copy", "rope", "4x32x512x128 float32 fwd", POSENC_ROPE,
           "x_roofline", 1.05, peer="hf transformers"),
    Target("RoPE forward bf16 (1,32,2048,128), x copy", "rope", "1x32x2048x128 bfloat16 fwd", POSENC_ROPE,
           "x_roofline", 1.2, peer="hf transformers"),
    Target("RoPE forward (1,8,1024,64), cache-resident, x copy", "rope", "1x8x1024x64 float32 fwd",
           POSENC_ROPE, "x_roofline", 1.3, peer="hf transformers"),
    Target("RoPE decode, one token (1,32,1,128), us per call", "decode", "rope 1x32x1x128 one token",
           DECODE_CHECKED, "us", 10.0, peer="hf transformers", unit="us"),
    Target("RoPE decode, one token: times faster than HF", "decode", "rope 1x32x1x128 one token",
           "hf transformers", "posenc_speedup", 10.0, at_most=False),
    Target("RoPE forward+backward, x (x*1 fwd+bwd)", "rope", "1x32x2048x128 float32 fwd+bwd", POSENC_ROPE,
           "x_roofline", 1.0, peer="hf transformers"),
    Target("ALiBi attention forward, causal, L 1024, x SDPA", "bias", "alibi 1x8x1024x64 float32 fwd", POSENC_BIAS,
           "x_floor", 1.1, peer="x-transformers"),
    Target("T5 attention forward, causal, L 1024, x SDPA", "bias", "t5 1x8x1024x64 float32 fwd", POSENC_BIAS,
           "x_floor", 1.1, peer="x-transformers"),
    Target("ALiBi attention forward, causal, L 4096, x SDPA", "bias", "alibi 1x8x4096x64 float32 fwd", POSENC_BIAS,
           "x_floor", 1.1, peer="x-transformers"),
    Target("T5 attention forward, causal, L 4096, x SDPA", "bias", "t5 1x8x4096x64 float32 fwd", POSENC_BIAS,
           "x_floor", 1.1, peer="x-transformers"),
    Target("ALiBi attention fwd+bwd, L 1024, x SDPA fwd+bwd", "bias", "alibi 1x8x1024x64 float32 fwd+bwd",
           POSENC_BIAS, "x_floor", 1.15, peer="sdpa + dense bias"),
    Target("ALiBi attention fwd+bwd, L 2048, x SDPA fwd+bwd", "bias", "alibi 1x8x2048x64 float32 fwd+bwd",
           POSENC_BIAS, "x_floor", 1.15, peer="sdpa + dense bias"),
    Target("T5 attention fwd+bwd, L 1024, x SDPA fwd+bwd", "bias", "t5 1x8x1024x64 float32 fwd+bwd", POSENC_BIAS,
           "x_floor", 1.3, peer="sdpa + dense bias"),
    Target("T5 attention fwd+bwd, L 2048, x SDPA fwd+bwd", "bias", "t5 1x8x2048x64 float32 fwd+bwd", POSENC_BIAS,
           "x_floor", 1.3, peer="sdpa + dense bias"),
    Target("FIRE attention forward, L 2048, x ALiBi's time", "bias", "fire 1x8x2048x64 float32 fwd", POSENC_BIAS,
           "x_alibi", 2.0),
)  # fmt: skip


def _met(value: float, limit: float, at_most: bool) -> bool:
    return value <= limit if at_most else value >= limit


def targets(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every :data:`TARGETS` entry the record has data for: value, peer value, goal, met."""
    found = {(r["section"], r["case"], r["contender"]): r for r in rows(record)}
    out = []
    for t in TARGETS:
        r = found.get((t.section, t.case, t.contender))
        if r is None or r.get(t.metric) is None:
            continue
        value = r[t.metric]
        peer = found.get((t.section, t.case, t.peer)) if t.peer else None
        out.append({
            "label": t.label, "value": value, "unit": t.unit, "limit": t.limit,
            "goal": f"{'<=' if t.at_most else '>='} {t.limit:g}{' us' if t.unit == 'us' else 'x'}",
            "at_most": t.at_most, "met": _met(value, t.limit, t.at_most),
            "peer": t.peer, "peer_value": None if peer is None else peer.get(t.metric),
        })  # fmt: skip
    return out


def targets_over(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets of several records of the same machine: each value (and peer value) the
    median over the records that measured it, with its ``low``/``high`` over them and
    ``runs`` (how many); met or missed by the median. Ratios on a shared machine move far
    more between runs than within one, so a goal is judged on the median of runs."""
    per_run = [{t["label"]: t for t in targets(r)} for r in records]  # judged on today's goals
    out = []
    for label in dict.fromkeys(label for run in per_run for label in run):
        found = [run[label] for run in per_run if label in run]
        values = [t["value"] for t in found]
        peers = [t["peer_value"] for t in found if t["peer_value"] is not None]
        first = found[0]
        value = statistics.median(values)
        out.append(first | {
            "value": value, "low": min(values), "high": max(values), "runs": len(values),
            "peer_value": statistics.median(peers) if peers else None,
            "met": _met(value, first["limit"], first["at_most"]),
        })  # fmt: skip
    return out


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} us" if unit == "us" else f"{value:.2f}x"


def targets_markdown(record: dict[str, Any], rows_: list[dict[str, Any]] | None = None) -> str:
    """The targets as a Markdown table (the README's speed table); ``rows_`` from
    :func:`targets_over` adds the range over the runs."""
    found = rows_ if rows_ is not None else (record.get("targets") or targets(record))
    spread = any(t.get("runs", 1) > 1 for t in found)
    lines = (
        ["| case | posenc (median) | range over runs | peer | goal | |", "|---|---|---|---|---|---|"]
        if spread
        else ["| case | posenc | peer | goal | |", "|---|---|---|---|---|"]
    )
    for t in found:
        peer = "" if t["peer"] is None else f"{t['peer']} {_fmt(t['peer_value'], t['unit'])}"
        cells = [t["label"], _fmt(t["value"], t["unit"])]
        if spread:
            cells.append(f"{_fmt(t['low'], t['unit'])} - {_fmt(t['high'], t['unit'])} ({t['runs']})")
        cells += [peer, t["goal"], "met" if t["met"] else "**missed**"]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def _find(record: dict[str, Any], section: str, prefix: str) -> dict[str, Any] | None:
    """The results of the first group of ``section`` whose case starts with ``prefix``."""
    for r in rows(record):
        if r["section"] == section and r["case"].startswith(prefix):
            return {
                x["contender"]: x for x in rows(record) if x["section"] == section and x["case"] == r["case"]
            }
    return None


def _load(record: dict[str, Any]) -> str:
    machine = record.get("machine", {})
    before, after = machine.get("load_average"), machine.get("load_average_after")
    return "" if not before else f"1-min load {before[0]:.2f} before, {after[0]:.2f} after" if after else ""


def isa_label(record: dict[str, Any]) -> str:
    """Which vector code a record timed: posenc's kernel build and torch's own CPU code (older
    records did not say)."""
    isa = record.get("machine", {}).get("vector_isa")
    if not isa:
        return "vector code not recorded"
    forced = " (forced)" if isa.get("forced") else ""
    steady = ", malloc steady" if steady_record(record) else ""
    return (
        f"posenc kernel {isa.get('kernel')}{forced}, torch {isa.get('torch')}, CPU {isa.get('cpu')}{steady}"
    )


def steady_record(record: dict[str, Any]) -> bool:
    """Whether a record's race ran with :func:`steady_allocator` (older records did not say: no)."""
    plan = record.get("plan")
    allocator = plan.get("allocator") if isinstance(plan, dict) else None
    return isinstance(allocator, dict) and allocator.get("mode") == "steady"


def _where(record: dict[str, Any], path: str, others: Sequence[tuple[str, dict[str, Any]]]) -> str:
    machine = record.get("machine", {})
    load = _load(record)
    if not others:
        return (
            f"From `python benchmarks/run_speed.py --{record['mode']}` (record `{path}`, "
            f"{record.get('created', '?')[:10]}, {machine.get('cpu', '?')}, {machine.get('torch_threads', '?')} "
            f"threads{'; ' + load if load else ''})"
        )
    runs = "; ".join(f"`{p}` ({_load(r) or 'load not recorded'})" for p, r in others)
    return (
        f"From {len(others) + 1} runs of `python benchmarks/run_speed.py --{record['mode']}` on {machine.get('cpu', '?')}, "
        f"{machine.get('torch_threads', '?')} threads: `{path}` "
        f"({load or 'load not recorded'}); {runs}. Goals are judged on the median over the runs; "
        "the notes below the table are from the first"
    )


def readme_markdown(
    record: dict[str, Any], *, path: str | None = None, others: Sequence[tuple[str, dict[str, Any]]] = ()
) -> str:
    """The README's speed section from one record (or, with ``others``, the goals judged on
    the median over all of them): where it came from, the targets, then the decode,
    scaling, compile and training numbers (of ``record``) that have no goal of their own.

    Records of different vector code (:func:`isa_label`: an AVX2 build timed next to the
    machine's AVX-512 one) get one table each, judged on their own runs."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for p, r in [(path or record.get("path", "?"), record), *others]:
        groups.setdefault(isa_label(r), []).append((p, r))
    lines: list[str] = []
    for label, runs in groups.items():
        (first_path, first), rest = runs[0], runs[1:]
        if len(groups) > 1 or label != "vector code not recorded":
            lines += [f"**{label}**", ""]
        rows_ = targets_over([first, *(r for _, r in rest)]) if rest else None
        lines += [
            f"{_where(first, first_path, rest)}; ratios interleave the contenders in rounds and take medians"
            + (
                " (glibc's malloc told to keep freed memory, `--allocator steady`: every contender's "
                "outputs reuse touched pages)"
                if steady_record(first)
                else ""
            )
            + ":",
            "",
            targets_markdown(first, rows_),
            "",
        ]
    lines.pop()
    extra = []
    attention = _find(record, "decode", "attention")
    if attention:
        cells = ", ".join(f"{name} {r['us']:.0f} us" for name, r in attention.items() if "us" in r)
        case = next(
            r["case"] for r in rows(record) if r["section"] == "decode" and r["case"].startswith("attention")
        )
        extra.append(
            f"- Decode through `MultiHeadAttention` with a KV cache ({case.removeprefix('attention ')}): {cells}."
        )
    scalings = _find(record, "decode", "rope scalings")
    if scalings:
        cells = ", ".join(
            f"{name} {r['us']:.0f} us ({r['x_static']:.2f}x)" for name, r in scalings.items() if "us" in r
        )
        extra.append(f"- Decode per token with keys cached unrotated, 4096 cached: {cells}.")
    compiled = _find(record, "rope", "1x32x2048x128 float32 compiled")
    if compiled:
        cells = ", ".join(f"{name} {r['x_roofline']:.2f}x copy" for name, r in compiled.items()
                          if "ms" in r and name != ROOFLINE)  # fmt: skip
        extra.append(f"- RoPE under `torch.compile` (1,32,2048,128) fp32 forward: {cells}.")
    for group in record.get("train", []):
        res = group["results"]
        cells = ", ".join(f"{name} {r['ms']:.1f} ms" + (f" (first call {r['warmup_s']:.0f} s)" if name == cases_mod.POSENC_COMPILED else "")
                          for name, r in res.items() if "ms" in r)  # fmt: skip
        extra.append(
            f"- Training step, {group['encoding']} batch {group['shape'][0]} x {group['shape'][1]} tokens: {cells}."
        )
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Measuring.
# ---------------------------------------------------------------------------


def timings(fn: Callable[[], object], *, repeats: int, budget: float = 20.0, inner: int = 1) -> list[float]:
    """Wall times (s) per call of ``repeats`` rounds of ``inner`` calls of ``fn()``, after one
    warm-up call. Stops early (at least 2 rounds) once ``budget`` seconds are spent."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (len(times) < 2 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
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
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory", json.dumps(spec)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return json.loads(result.stdout.strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - report, never crash the race
        return {"mb": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


# ---------------------------------------------------------------------------
# Sections.
# ---------------------------------------------------------------------------


def _inner(plan: dict[str, Any], calls: int) -> int:
    """Calls per timed round: ``calls`` scaled by the plan's ``inner`` factor, at least one."""
    return max(1, int(calls * plan.get("inner", 1.0)))


#: Each timed call of a round follows one untimed call of the same contender (see :func:`_race`).
PRIME = True
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters (glibc's malloc.h)


def steady_allocator() -> dict[str, Any]:
    """Tell glibc's malloc to keep what the race frees: no chunk of its own mapping (``M_MMAP_MAX``
    0) and no trimming of the heap (``M_TRIM_THRESHOLD`` 2 GiB), so every contender's outputs reuse
    pages the process already touched, as a model's steady state does (and as jemalloc or tcmalloc
    keep them). Returns what was done, for the record.

    Without it, whether a call's fresh output of a few MiB is a reused chunk or new pages (a
    first-touch fault per 4 KiB page, zeroed by the kernel: 5-6 GB/s on a virtual machine) depends
    on what was freed before and how glibc's thresholds have moved: the same copy took 0.06 ms or
    1.5 ms in otherwise equal runs, and ratios of equal kernels moved by 1.5x. The allocation is
    the same for every contender (each returns tensors of the same size), so keeping it steady
    times the contenders, not the allocator. Peak memory is measured in fresh processes, untouched.
    """
    if not sys.platform.startswith("linux"):
        return {"mode": "as-is", "why": f"not glibc ({sys.platform})"}
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return {"mode": "as-is", "why": "no mallopt in the C library"}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) != 1:
        return {"mode": "as-is", "why": "mallopt refused (not glibc's malloc)"}
    return {"mode": "steady", "mallopt": {"M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": 2**31 - 1}}


def interleaved_times(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each contender over ``rounds``, for a script that races callables in one
    process (``kernel_isa.py``, ``bias_spans.py``): the contenders interleaved in rounds, each timed
    call after one untimed call of it, the garbage collector off while timing (as :func:`_race`)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            call()
            collecting = gc.isenabled()
            gc.disable()
            try:
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
            finally:
                if collecting:
                    gc.enable()
    return times


def _race(
    cases: dict[str, Any], repeats: int, progress: Callable[[str], None], label: str, *, inner: int = 1
) -> dict[str, Any]:
    """Time every contender; rounds interleave the contenders (round r runs each once) so a
    load change on a shared machine hits all of them alike. With :data:`PRIME`, each timed call
    follows one untimed call of the same contender, so it meets the memory allocator as that
    contender's own repeated calls leave it (what a model calling it layer after layer sees), not
    as the contender before it in the round left it: outputs of tens of MiB are fresh pages
    (first-touch faults, zeroed by the kernel) or reused ones depending on what was freed just
    before, which moved single ratios by 1.5x between otherwise equal runs. The garbage collector
    is off while calls are timed (as :mod:`timeit` has it): in the rope section of a quick race the
    collector ran 870 young, 81 middle (up to 2 ms) and about 4 full collections (up to 0.26 s) on its
    own, the peers' garbage setting them off in anyone's call, and one middle collection is three
    rounds' worth of calls of the cache-resident case."""
    out: dict[str, Any] = {}
    live: dict[str, Callable[[], object]] = {}
    sync = _synchronizer()
    for name, case in cases.items():
        if isinstance(case, str):
            out[name] = {"skipped": case}
            continue
        progress(f"{label}: {name} (warm-up)")
        try:
            tic = time.perf_counter()
            case()  # warm-up: builds tables, compiles
            sync()
            out[name] = {"warmup_s": time.perf_counter() - tic}
            live[name] = case
        except Exception as exc:  # noqa: BLE001 - a peer that breaks is reported, not fatal
            out[name] = {"skipped": f"failed: {type(exc).__name__}: {str(exc)[:160]}"}
    times: dict[str, list[float]] = {name: [] for name in live}
    for round_ in range(repeats):
        progress(f"{label}: round {round_ + 1}/{repeats}")
        for name, case in live.items():
            try:
                if PRIME:
                    case()
                sync()
                collecting = gc.isenabled()
                gc.disable()  # as timeit does: a collection of the whole heap is nobody's call
                try:
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        case()
                    sync()  # a GPU's calls return before their work is done
                    elapsed = time.perf_counter() - t0
                finally:
                    if collecting:
                        gc.enable()
                times[name].append(elapsed / inner)
            except Exception as exc:  # noqa: BLE001
                out[name] = {"skipped": f"failed: {type(exc).__name__}: {str(exc)[:160]}"}
    for name, ts in times.items():
        if ts and "skipped" not in out[name]:
            # min_ms: the least-disturbed round, a useful second opinion on a shared machine
            out[name].update({"ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts)})
    return out


def _synchronizer() -> Callable[[], None]:
    """Waits for the device's queued work (a no-op on the CPU, whose calls return when done)."""
    if cases_mod.DEVICE.type == "cuda":
        return torch.cuda.synchronize
    if cases_mod.DEVICE.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def run_rope(plan: dict[str, Any], progress) -> list[dict[str, Any]]:
    groups = []
    for (b, h, n, d), dtype_name, mode in plan["rope"]:
        if mode == "compiled" and not plan.get("compile", True):
            continue
        dtype = DTYPES[dtype_name]
        label = f"rope {b}x{h}x{n}x{d} {dtype_name} {mode}"
        if mode == "compiled":
            cases = cases_mod.compiled_rope_cases(b, h, n, d, dtype)
        else:
            cases = cases_mod.rope_cases(b, h, n, d, dtype, backward=mode == "fwd+bwd")
        inner = _inner(plan, (1 << 22) // (b * h * n * d))  # ~4 M elements per round: small cases repeat
        results = _race(cases, plan["repeats"], progress, label, inner=inner)
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


def _decode_group(case: str, shape: list[int], results: dict[str, Any], base: str | None) -> dict[str, Any]:
    base_us = 1e3 * results[base]["ms"] if base and "ms" in results.get(base, {}) else None
    for r in results.values():
        if "ms" in r:
            r["us"] = 1e3 * r["ms"]
            r["posenc_speedup"] = r["us"] / base_us if base_us else None
    return {"case": case, "shape": shape, "mode": "decode", "results": results}


def run_decode(plan: dict[str, Any], progress) -> list[dict[str, Any]]:
    groups = []
    for h, d in plan["decode_rope"]:
        label = f"rope 1x{h}x1x{d} one token"
        results = _race(
            cases_mod.rope_decode_cases(h, d), plan["repeats"], progress, label, inner=_inner(plan, 2000)
        )
        groups.append(_decode_group(label, [1, h, 1, d], results, DECODE_CHECKED))
    for d_model, heads, cached in plan["decode_attention"]:
        label = f"attention d{d_model} h{heads} one token, {cached} cached"
        cases = cases_mod.attention_decode_cases(d_model, heads, cached, DECODE_ENCODINGS)
        results = _race(cases, plan["repeats"], progress, label, inner=_inner(plan, 200))
        groups.append(_decode_group(label, [d_model, heads, cached], results, "rope"))
    for d_model, heads, cached in plan["decode_scaling"]:
        label = f"rope scalings d{d_model} h{heads} one token, {cached} cached"
        encodings = scaling_encodings(d_model // heads, cached // 2)
        cases = cases_mod.attention_decode_cases(d_model, heads, cached, encodings, alternate=True)
        results = _race(cases, plan["repeats"], progress, label, inner=_inner(plan, 20))
        group = _decode_group(label, [d_model, heads, cached], results, "rope (static)")
        for r in group["results"].values():
            if "us" in r:
                r["x_static"] = r["posenc_speedup"]
        groups.append(group)
    return groups


def run_bias(plan: dict[str, Any], progress, *, memory: bool) -> list[dict[str, Any]]:
    groups = []
    flex_cases = {tuple(x) for x in plan["flex"]}
    for name, n, mode in plan["bias"]:
        b, h, d = 1, 8, 64
        shape = (b, h, n, d)
        label = f"bias {name} {'x'.join(map(str, shape))} {mode}"
        backward = mode == "fwd+bwd"
        flex = (
            (name, n) in flex_cases
            and (not backward or cases_mod.DEVICE.type == "cuda")
            and plan.get("compile", True)
        )
        cases = cases_mod.bias_cases(name, b, h, n, d, torch.float32, flex=flex, backward=backward)
        if n > 4096 or (
            backward and n > 2048
        ):  # the dense and x-transformers paths need h*n*n*4 bytes, often
            for key in ("sdpa + dense bias", "x-transformers"):
                if not isinstance(cases.get(key), str):
                    cases[key] = "skipped: O(n^2) memory at this length (several GiB)"
        with torch.set_grad_enabled(backward):
            results = _race(cases, max(3, plan["repeats"] - 2), progress, label)
        floor, base = results[FLOOR].get("ms"), results.get(POSENC_BIAS, {}).get("ms")
        for contender, r in results.items():
            if "ms" not in r:
                continue
            r["x_floor"] = r["ms"] / floor if floor else None
            r["posenc_speedup"] = r["ms"] / base if base else None
            if memory and not backward and n in plan["memory_lengths"]:
                progress(f"{label}: {contender} (memory)")
                mem = peak_memory(name, shape, "float32", contender, flex=flex)
                r["peak_extra_mb"] = mem.get("mb")
                if mem.get("error"):
                    r["memory_error"] = mem["error"]
        groups.append(
            {"encoding": name, "shape": list(shape), "dtype": "float32", "mode": mode, "results": results}
        )
        del cases
        gc.collect()
    alibi = {(g["shape"][2], g["mode"]): g["results"].get(POSENC_BIAS, {}).get("ms") for g in groups
             if g["encoding"] == "alibi"}  # fmt: skip
    for g in groups:
        reference = alibi.get((g["shape"][2], g["mode"]))
        for r in g["results"].values():
            if "ms" in r and reference:
                r["x_alibi"] = r["ms"] / reference
    return groups


def run_train(plan: dict[str, Any], progress) -> list[dict[str, Any]]:
    groups = []
    for name, (b, n) in plan["train"]:
        label = f"train {name} {b}x{n}"
        cases = cases_mod.train_cases(name, b, n, compiled=plan.get("compile", True))
        results = _race(cases, max(3, plan["repeats"]), progress, label, inner=_inner(plan, 5))
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


def vector_isa() -> dict[str, Any]:
    """The vector code a run times: posenc's rotary kernel build (``posenc.kernels.fused_rope.isa``),
    torch's own CPU code (its copies, SDPA, the peers), the best the CPU has, and the build
    ``POSENC_KERNEL_ISA`` forced (None: native)."""
    from posenc.kernels import fused_rope
    from posenc.kernels._build import ISA_ENV, cpu_features

    flags = cpu_features()
    cpu = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return {"kernel": fused_rope.isa(), "torch": torch.backends.cpu.get_cpu_capability(), "cpu": cpu,
            "forced": os.environ.get(ISA_ENV) or None}  # fmt: skip


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
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "vector_isa": vector_isa(),
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
    device: str = "cpu",
    allocator: str = "as-is",
) -> dict[str, Any]:
    """Run the plan ``mode`` ("quick", "full" or "smoke"); write and return the JSON record.

    ``allocator``: "steady" (:func:`steady_allocator`, for this process from here on, once the
    arguments are checked) or "as-is" (the C library's own policy); the record says which ran.

    ``threads`` sets ``torch.set_num_threads`` for the run (and the memory subprocesses);
    default: leave torch's setting. ``device`` other than the CPU (a CUDA device) races the
    ``rope`` and ``bias`` sections there, with no peak-memory subprocesses and no goals (the
    goals are set for the CPU's C kernels).
    """
    if threads is not None:
        torch.set_num_threads(check_int("threads", threads, minimum=1, maximum=max_threads()))
    if mode not in PLANS:
        raise PosencError(f"mode must be one of {list(PLANS)}, got {mode!r}")
    for section in sections:
        if section not in SECTIONS:
            raise PosencError(f"sections must be among {list(SECTIONS)}, got {section!r}")
    plan = PLANS[mode]
    target = torch.device(resolve_device(device))
    if target.type != "cpu":
        off = [section for section in sections if section not in GPU_SECTIONS]
        if off:
            raise PosencError(f"--device {device} races only {list(GPU_SECTIONS)}, not {off}")
        memory = False
    if allocator not in ("steady", "as-is"):
        raise PosencError(f"allocator must be 'steady' or 'as-is', got {allocator!r}")
    cases_mod.DEVICE = target
    progress = progress or (lambda message: None)
    how = steady_allocator() if allocator == "steady" else {"mode": "as-is", "why": "as asked"}
    started = time.time()
    record: dict[str, Any] = {
        "kind": "posenc-speed",
        "schema": 2,
        "mode": mode,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "plan": {**plan, "prime": PRIME, "allocator": how},
        "device": str(cases_mod.DEVICE),
        # the records a new one is compared with: the same mode on the same kind of device
        "series": mode if cases_mod.DEVICE.type == "cpu" else f"{cases_mod.DEVICE.type}-{mode}",
        "notes": {
            "roofline": "clone() of q and k (forward) or q*1, k*1 through autograd (forward+backward): "
            "the bytes a rotation must read and write",
            "memory": "peak RSS added by one call, fresh subprocess, /proc/self/clear_refs + VmHWM",
            "posenc_speedup": "contender time / posenc time (> 1: posenc is faster)",
            "rounds": "contenders interleaved: each round times every contender once"
            + (", after one untimed call of it" if PRIME else "")
            + "; medians over rounds",
            "allocator": "glibc malloc keeps what is freed (no mmap'd chunks, no trimming): outputs reuse "
            "touched pages"
            if how["mode"] == "steady"
            else f"the C library's own ({how['why']})",
        },
    }
    runners = {"rope": run_rope, "decode": run_decode, "train": run_train}
    for section in SECTIONS:
        if section not in sections:
            continue
        if section == "bias":
            record["bias"] = run_bias(plan, progress, memory=memory)
        else:
            record[section] = runners[section](plan, progress)
    record["targets"] = targets(record) if cases_mod.DEVICE.type == "cpu" else []
    record["machine"]["load_average_after"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    record["seconds"] = time.time() - started
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = out / f"speed-{record['series']}-{stamp}.json"
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        record["path"] = str(path)
    return record


def rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten a record to one row per (section, case, contender) for tables."""
    out = []
    for section in SECTIONS:
        for group in record.get(section, []):
            case = group.get("case") or " ".join(
                str(part) for part in (group.get("encoding", ""), "x".join(map(str, group["shape"])),
                                       group.get("dtype", ""), group["mode"]) if part
            )  # fmt: skip
            for contender, r in group["results"].items():
                out.append({"section": section, "case": case, "contender": contender, **r})
    return out


COLUMNS = {
    "rope": [("ms", "ms", "{:.3f}"), ("gb_per_s", "GB/s", "{:.1f}"), ("x_roofline", "x copy", "{:.2f}"),
             ("posenc_speedup", "posenc faster by", "{:.2f}x")],
    "decode": [("us", "us/call", "{:.1f}"), ("posenc_speedup", "x posenc", "{:.2f}")],
    "bias": [("ms", "ms", "{:.1f}"), ("x_floor", "x SDPA", "{:.2f}"), ("x_alibi", "x ALiBi", "{:.2f}"),
             ("peak_extra_mb", "peak extra MiB", "{:.0f}"), ("posenc_speedup", "posenc faster by", "{:.2f}x")],
    "train": [("ms", "ms/step", "{:.2f}"), ("tokens_per_s", "tokens/s", "{:.0f}"),
              ("posenc_speedup", "x posenc eager", "{:.2f}"), ("warmup_s", "first call s", "{:.1f}")],
}  # fmt: skip


def render(record: dict[str, Any]):
    """A rich Table per section, then the targets."""
    tables = []
    for section in SECTIONS:
        section_rows = [r for r in rows(record) if r["section"] == section]
        if not section_rows:
            continue
        table = Table(title=f"speed race ({record['mode']}): {section}")
        table.add_column("case")
        table.add_column("contender")
        for _, title, _ in COLUMNS[section]:
            table.add_column(title, justify="right")
        previous = None
        for r in section_rows:
            cells = [r["case"] if r["case"] != previous else "", r["contender"]]
            previous = r["case"]
            if "skipped" in r:
                cells += [r["skipped"]] + [""] * (len(COLUMNS[section]) - 1)
            else:
                cells += [
                    "-" if r.get(key) is None else fmt.format(r[key]) for key, _, fmt in COLUMNS[section]
                ]
            table.add_row(*cells)
        tables.append(table)
    found = record.get("targets") or targets(record)
    if found:
        table = Table(title=f"speed race ({record['mode']}): targets")
        for title in ("case", "posenc", "peer", "goal", ""):
            table.add_column(title, justify="left" if title in ("case", "peer") else "right")
        for t in found:
            peer = "" if t["peer"] is None else f"{t['peer']} {_fmt(t['peer_value'], t['unit'])}"
            mark = "met" if t["met"] else "[bold red]MISSED[/]"
            table.add_row(t["label"], _fmt(t["value"], t["unit"]), peer, t["goal"], mark)
        tables.append(table)
    return tables


if __name__ == "__main__":  # the memory subprocess
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        _memory_child(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python benchmarks/speed.py --memory SPEC_JSON (internal)")
