"""Where the time goes in a speed-race target case: ``torch.profiler`` per call.

Usage:
    python benchmarks/profile_targets.py [CASE ...] [--calls N] [--rows R]

Cases (default: all): rope-fp32, rope-bf16, rope-small, rope-decode, rope-bwd, alibi-bwd,
t5-bwd, fire-fwd. Each prints, for posenc and for the case's floor (a copy of q and k, or
unbiased causal SDPA), the wall time per call and the operators with the most self time per
call. Time spent in posenc's own C kernels (called through ctypes) is not an ATen operator:
it is the wall time minus the operators' self time (shown as "outside ATen"). Run it on an
idle machine, like the races (``python benchmarks/run_speed.py``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import speed_cases as cases  # benchmarks/, next to this file
import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = {
    "rope-fp32": ("rope", (1, 32, 2048, 128), torch.float32),
    "rope-bf16": ("rope", (1, 32, 2048, 128), torch.bfloat16),
    "rope-small": ("rope", (1, 8, 1024, 64), torch.float32),
    "rope-bwd": ("rope-bwd", (1, 32, 2048, 128), torch.float32),
    "rope-decode": ("decode", (1, 32, 1, 128), torch.float32),
    "alibi-bwd": ("alibi", (1, 8, 2048, 64), torch.float32),
    "t5-bwd": ("t5", (1, 8, 1024, 64), torch.float32),
    "fire-fwd": ("fire", (1, 8, 2048, 64), torch.float32),
}


def contenders(name: str) -> dict[str, Callable[[], object]]:
    kind, (b, h, n, d), dtype = SHAPES[name]
    if kind == "decode":
        found = cases.rope_decode_cases(h, d)
        return {k: v for k, v in found.items() if callable(v)}
    if kind.startswith("rope"):
        found = cases.rope_cases(b, h, n, d, dtype, backward=kind == "rope-bwd")
        return {"posenc": found["posenc rotate"], "floor": found["roofline (copy)"]}
    backward = name.endswith("bwd")
    found = cases.bias_cases(kind, b, h, n, d, dtype, backward=backward)
    out = {"posenc": found["posenc chunked"], "floor": found["sdpa unbiased (floor)"]}
    if kind == "fire":
        out["alibi"] = cases.bias_cases("alibi", b, h, n, d, dtype)["posenc chunked"]
    return out


def show(label: str, fn: Callable[[], object], calls: int, rows: int) -> None:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = (time.perf_counter() - start) / calls
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    events = prof.key_averages()
    aten = sum(e.self_cpu_time_total for e in events) / calls / 1e3  # ms per call
    print(f"  {label}: {1e3 * wall:.3f} ms per call (unprofiled); ATen self time {aten:.3f} ms, "
          f"outside ATen (Python, ctypes kernels) {max(0.0, 1e3 * wall - aten):.3f} ms")  # fmt: skip
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    for e in top:
        per_call = e.self_cpu_time_total / calls / 1e3
        print(f"      {per_call:9.4f} ms  {e.count / calls:5.1f}x  {e.key}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help=", ".join(SHAPES))
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rows", type=int, default=6)
    args = parser.parse_args()
    unknown = [name for name in args.cases if name not in SHAPES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; choose from {', '.join(SHAPES)}")
    for name in args.cases or list(SHAPES):
        kind, shape, dtype = SHAPES[name]
        print(f"{name} {shape} {str(dtype).removeprefix('torch.')}", flush=True)
        calls = 2000 if kind == "decode" else args.calls
        for label, fn in contenders(name).items():
            show(label, fn, calls, args.rows)


if __name__ == "__main__":
    main()
