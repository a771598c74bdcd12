"""Builds of the rotary kernel raced against each other and a copy, in one process.

The speed race (``run_speed.py``) times one build per process (``--isa``), so two builds are
compared across runs; this loads several builds of ``_rope.c`` at once (the AVX2 and AVX-512 ones
this CPU can run, and with ``--source`` another version of the kernel built the same ways) and
times only the kernel: one foreign call on q and k as ``RoPE.rotate`` makes it (tables broadcast
over heads), into outputs made once, next to ``copy_`` of the same tensors into outputs made once.
The contenders are interleaved in rounds (``speed.interleaved_times``: each timed call after one
untimed call of it, the garbage collector off while timing), medians over rounds, with the race's
steady allocator. It is how the width of the vector code per dtype
in ``_rope.c`` was chosen; run it on an idle machine.

Usage: python benchmarks/kernel_isa.py [--isa avx2|avx512 ...] [--source FILE.c] [--rounds N]
"""

from __future__ import annotations

import argparse
import array
import ctypes
import statistics
import sys
import tempfile
from pathlib import Path

import speed  # benchmarks/, next to this file: the steady allocator
import torch
from kernel_counts import build_source  # benchmarks/, next to this file

import posenc
from posenc.kernels import _build
from posenc.kernels import fused_rope as rope

# (b, h, n, d, dtype): the race's RoPE forward shapes
SHAPES = [
    (1, 32, 2048, 128, torch.float32),
    (4, 32, 512, 128, torch.float32),
    (1, 32, 2048, 128, torch.bfloat16),
    (1, 8, 1024, 64, torch.float32),
]
SYMBOLS = {torch.float32: "posenc_rope_f32", torch.bfloat16: "posenc_rope_bf16"}


def builds(isas: list[str], source: Path | None, work: Path) -> dict[str, ctypes.CDLL]:
    """``{label: library}``: posenc's own build per ISA, and ``source`` built with the same flags."""
    out: dict[str, ctypes.CDLL] = {}
    cc = _build._compiler()
    for isa in isas:
        lib = _build.load("_rope", isa)
        if lib is None:
            raise SystemExit(f"kernel_isa.py: the {isa} build of the kernel is unavailable here")
        out[f"{isa} build"] = lib
        if source is not None:
            if cc is None:
                raise SystemExit("kernel_isa.py: --source needs a C compiler")
            path = build_source(cc, source, isa, work / f"rope-{isa}.so")
            out[f"{isa} build of {source.name}"] = ctypes.CDLL(str(path))
    return out


def race(libs: dict[str, ctypes.CDLL], shape: tuple, rounds: int) -> dict[str, float]:
    """Median seconds per call of each build, and of ``copy_`` (key ``"copy"``)."""
    b, h, n, d, dtype = shape
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(b, h, n, d, generator=g).to(dtype) for _ in range(2))
    cos, sin = posenc.build("rope", head_dim=d).table(n).rows(n, q.device, torch.float32)
    c4, s4 = cos[None, None, :n], sin[None, None, :n]
    oq, ok = torch.empty_like(q), torch.empty_like(k)
    words = array.array("q", [
        *rope._job(q, c4, s4, oq, interleaved=False, rotary_dim=d, sign=1),
        *rope._job(k, c4, s4, ok, interleaved=False, rotary_dim=d, sign=1),
    ])  # fmt: skip
    pointer = words.buffer_info()[0]
    cases = {"copy": lambda: (oq.copy_(q), ok.copy_(k))}
    for label, lib in libs.items():
        fn = getattr(lib, SYMBOLS[dtype])
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int], None
        cases[label] = lambda fn=fn: fn(pointer, 2)
    times = speed.interleaved_times(cases, rounds)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", action="append", choices=["avx2", "avx512"], default=None,
                        help="builds to race (repeatable; default: those this CPU runs)")  # fmt: skip
    parser.add_argument("--source", type=Path, default=None, help="another _rope.c, built the same ways")
    parser.add_argument(
        "--rounds", type=int, default=60, help="rounds per shape (default 60; x5 for the small one)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    flags = _build.cpu_features()
    isas = args.isa or [isa for isa in ("avx2", "avx512") if isa != "avx512" or "avx512f" in flags]
    allocator = speed.steady_allocator()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU code {torch.backends.cpu.get_cpu_capability()}, "
          f"allocator {allocator['mode']}; medians, x = time / copy's")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        libs = builds(isas, args.source, Path(tmp))
        for shape in SHAPES:
            rounds = args.rounds * (5 if shape[2] * shape[1] < 2**14 else 1)
            medians = race(libs, shape, rounds)
            copy = medians["copy"]
            cells = "  ".join(f"{name} {1e3 * t:.3f} ms ({t / copy:.2f}x)" for name, t in medians.items())
            print(
                f"({','.join(map(str, shape[:4]))}) {str(shape[4]).removeprefix('torch.')}: {cells}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
